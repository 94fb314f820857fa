//go:build !pristine

package failstop_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handed is a record given to ProducerOnPartitionFailedRecord's function.
type handed struct {
	r       *kgo.Record
	err     error
	promise func(*kgo.Record, error)
}

// TestHandOverFailedRecords is a wrapper's use of
// ProducerOnPartitionFailedRecord: it gives the client its caller's promises
// unchanged. Partition 0's first batch fails with INVALID_RECORD: that record
// and the two produced after it come to the function, in order, with the
// caller's promises, which are not called; a healthy partition's promise is.
// The wrapper recovers the partition with the three records once the function
// returned for each, and calls each caller's promise with its outcome: all
// three are written, in order, before anything produced later.
func TestHandOverFailedRecords(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2, topic)
	hand := make(chan handed, 16)
	cl := newClient(t, c, kgo.FailPartitionOnProduceFailure(), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerOnPartitionFailedRecord(func(r *kgo.Record, err error, promise func(*kgo.Record, error)) {
			hand <- handed{r, err, promise}
		}))
	produceOK(ctx, t, cl, rec(topic, 0, 0)) // the client knows the topic

	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: 1})
	first := produceAsync(ctx, cl, rec(topic, 0, 1))
	var hs []handed
	take := func() handed {
		select {
		case h := <-hand:
			hs = append(hs, h)
			return h
		case <-ctx.Done():
			t.Fatalf("%d records handed over: %v", len(hs), ctx.Err())
			return handed{}
		}
	}
	f := failureOf(take().err)
	if f == nil {
		t.Fatalf("handed %v, which carries no failure", hs[0].err)
	}
	later := produceAsync(ctx, cl, recs(topic, 0, 2, 4)...)
	take()
	take()
	produceOK(ctx, t, cl, rec(topic, 1, 0)) // not handed over
	for i, h := range hs {
		if seqOf(t, h.r) != i+1 || failureOf(h.err) != f {
			t.Fatalf("handed record %d: seq %s with %v, want seq %d with %v", i, h.r.Value, h.err, i+1, f)
		}
	}
	checkWave(t, []result{{hs[0].r, hs[0].err}, {hs[1].r, hs[1].err}, {hs[2].r, hs[2].err}}, kerr.InvalidRecord)
	for _, ch := range append(first, later...) {
		select {
		case r := <-ch:
			t.Fatalf("the caller's promise of seq %s was called with %v", r.r.Value, r.err)
		default:
		}
	}

	byRecord := map[*kgo.Record]func(*kgo.Record, error){}
	var rs []*kgo.Record
	for _, h := range hs {
		byRecord[h.r] = h.promise
		rs = append(rs, h.r)
	}
	if err := recoverWhenReturned(ctx, t, cl, f, func(r *kgo.Record, err error) { byRecord[r](r, err) }, rs...); err != nil {
		t.Fatalf("recovering: %v", err)
	}
	produceOK(ctx, t, cl, rec(topic, 0, 4))
	for _, r := range await(ctx, t, append(first, later...)) {
		if r.err != nil {
			t.Fatalf("seq %s: %v", r.r.Value, r.err)
		}
	}
	checkLog(ctx, t, c, topic, 0, seqRange(0, 5))
	select {
	case h := <-hand:
		t.Fatalf("seq %s handed over after the recovery: %v", h.r.Value, h.err)
	default:
	}
}
