//go:build !pristine

package failstop_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRecordsBufferedBeforeFailure: partition 0 stalls with two records
// buffered, and the third fails it at MaxBufferedPartitionRecords, before
// being buffered. The two stalled records belong to that failure: a recovery
// is refused while they are buffered (it would put the failed records behind
// them, in a batch that may still fail); when their retries run out, they
// fail with the failure and ErrBufferedBeforeFailure, which tells that they
// come before the failure's records promised earlier. Recovered in that
// order, all five are written in Produce order.
func TestRecordsBufferedBeforeFailure(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2, topic)
	h := newFailHook()
	cl := newClient(t, c, kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(h),
		kgo.MaxBufferedPartitionRecords(2), kgo.RecordRetries(4),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(100*time.Millisecond))
	produceOK(ctx, t, cl, rec(topic, 1, 0)) // the client knows the topic

	stall := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: -1})
	defer stall.Remove()
	stalled := produceAsync(ctx, cl, recs(topic, 0, 0, 2)...)
	// Stalled (the bound applies) once kgo handled two answers to the
	// first batch: with two batches, an answer may be the second's, so the
	// fourth comes after that.
	if err := stall.Wait(ctx, 4); err != nil {
		t.Fatal(err)
	}
	over := await(ctx, t, produceAsync(ctx, cl, recs(topic, 0, 2, 5)...))
	f := checkWave(t, over, kgo.ErrMaxBuffered)
	if ev := h.wait(ctx, t); ev != f {
		t.Fatalf("the hook was called with %v, the records past the bound carry %v", ev, f)
	}

	// Refused until the stalled records have failed: a recovery would
	// buffer the failed records behind them. A probe that is accepted
	// once they have (a race) recovers the partition with no record.
	var got []result
	recovered := false
	for len(got) < len(stalled) {
		select {
		case r := <-stalled[len(got)]:
			got = append(got, r)
			continue
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("%d stalled records failed: %v", len(got), ctx.Err())
		}
		if err := recoverPartition(cl, f, nil); err == nil {
			for _, ch := range stalled[len(got):] {
				select {
				case r := <-ch:
					got = append(got, r)
				default:
					t.Fatal("recovery accepted while records buffered before the failure were buffered")
				}
			}
			recovered = true
		} else if !errors.Is(err, errRecoveryPending) {
			t.Fatalf("recovery with records buffered before the failure returned %v, want ErrRecoveryPending", err)
		}
	}
	for _, r := range got {
		var got *failure
		if !errors.Is(r.err, kgo.ErrBufferedBeforeFailure) || !errors.As(r.err, &got) || got != f || !errors.Is(r.err, kerr.NotEnoughReplicas) {
			t.Fatalf("stalled record %s: %v, want NOT_ENOUGH_REPLICAS with the failure and ErrBufferedBeforeFailure", r.r.Value, r.err)
		}
	}
	for _, r := range over {
		if errors.Is(r.err, kgo.ErrBufferedBeforeFailure) {
			t.Fatalf("record %s, produced after the stalled ones: %v", r.r.Value, r.err)
		}
	}
	stall.Remove()
	if recovered {
		produceOK(ctx, t, cl, recs(topic, 0, 0, 5)...)
	} else {
		recoverOK(ctx, t, cl, f, recs(topic, 0, 0, 5)...)
	}
	checkLog(ctx, t, c, topic, 0, seqRange(0, 5))
	checkHookOnce(t, h)
}
