//go:build !pristine

package failstop_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStaleFailureRefused: the refusals of RecoverProducePartition. A
// recovered failure is refused (not failed). Once its partition fails anew,
// it is stale: refused, buffering nothing, with an error that carries the new
// failure (so the caller learns which failure to recover). The new failure is
// refused with ErrRecoveryPending while a promise of it (held on a channel)
// has not returned, and accepted once it has.
func TestStaleFailureRefused(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	h := newFailHook()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(512),
	}, failStopOpts(h)...)...)
	produceOK(ctx, t, cl, rec(topic, 0, 0))

	big := func(seq int) *kgo.Record {
		r := rec(topic, 0, seq)
		r.Headers = []kgo.RecordHeader{{Key: "pad", Value: make([]byte, 1024)}}
		return r
	}
	// f1: recovered at once, dropping the record.
	await(ctx, t, produceAsync(ctx, cl, big(1)))
	f1 := h.wait(ctx, t)
	if err := recoverWhenReturned(ctx, t, cl, f1, nil); err != nil {
		t.Fatalf("recovering the first failure: %v", err)
	}
	if err := recoverPartition(cl, f1, nil); err == nil || errors.Is(err, errRecoveryPending) || failureOf(err) != nil {
		t.Fatalf("recovering a recovered failure again: %v, want a refusal (not failed)", err)
	}

	// f2: its record's promise is held (until cleanup at the latest, which
	// runs before the client's).
	release, held := make(chan struct{}), make(chan error, 1)
	doRelease := sync.OnceFunc(func() { close(release) })
	t.Cleanup(doRelease)
	cl.Produce(ctx, big(2), func(_ *kgo.Record, err error) { held <- err; <-release })
	f2 := h.wait(ctx, t)
	checkEvent(t, f2, topic, 0, kerr.MessageTooLarge)
	if err := <-held; failureOf(err) != f2 {
		t.Fatalf("the record that failed the partition again got %v, want it to carry the new failure", err)
	}

	stale := recs(topic, 0, 10, 12)
	err := recoverPartition(cl, f1, nil, stale...)
	if failureOf(err) != f2 || errors.Is(err, errRecoveryPending) {
		t.Fatalf("recovering the stale failure: %v, want a refusal carrying the new failure %v", err, f2)
	}
	checkPending(t, recoverPartition(cl, f2, nil))
	doRelease()

	// The refused calls buffered nothing: recovering f2 with seq 1 and 2
	// (produced again at a size that fits) writes exactly them.
	recoverOK(ctx, t, cl, f2, rec(topic, 0, 1), rec(topic, 0, 2))
	checkLog(ctx, t, c, topic, 0, seqRange(0, 3))
	if evs := h.snapshot(); len(evs) != 2 {
		t.Fatalf("hook called %d times (%v), want twice", len(evs), evs)
	}
}

// A refused RecoverProducePartition counts nothing as buffered: a recovery
// that counted its records before it was refused made a concurrent keyed
// TryProduce to ANOTHER partition see the buffer over MaxBufferedRecords,
// get ErrMaxBuffered, and fail that partition. Refused here, again and
// again: a stale failure (recovered, then its partition failed anew). (A
// refusal for a pending promise would need a promise held, which holds
// every promise of the client.)
func TestRefusedRecoveryCountsNothing(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2, topic)
	h := newFailHook()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(60), kgo.ProducerBatchMaxBytes(512),
	}, failStopOpts(h)...)...)
	produceOK(ctx, t, cl, rec(topic, 0, 0), rec(topic, 1, 0))

	// Fail partition 0 with a record too large for a batch, recover it,
	// and fail it again.
	big := rec(topic, 0, 1)
	big.Headers = []kgo.RecordHeader{{Key: "pad", Value: make([]byte, 1024)}}
	await(ctx, t, produceAsync(ctx, cl, big))
	f1 := h.wait(ctx, t)
	checkEvent(t, f1, topic, 0, kerr.MessageTooLarge)
	if err := recoverWhenReturned(ctx, t, cl, f1, nil); err != nil {
		t.Fatal(err)
	}
	await(ctx, t, produceAsync(ctx, cl, big))
	f2 := h.wait(ctx, t)

	stop := make(chan struct{})
	done := make(chan struct{})
	rs := recs(topic, 0, 100, 160) // 60 records
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := recoverPartition(cl, f1, nil, rs...); failureOf(err) != f2 {
				t.Errorf("recovering the stale failure: %v, want a refusal carrying %v", err, f2)
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()

	// Keyed records to partition 1, one at a time: at most one buffered.
	for i := range 3000 {
		r := rec(topic, 1, i+1)
		r.Key = []byte("k")
		ch := make(chan error, 1)
		cl.TryProduce(ctx, r, func(_ *kgo.Record, err error) { ch <- err })
		if err := <-ch; err != nil {
			if errors.Is(err, kgo.ErrMaxBuffered) {
				t.Fatalf("record %d to partition 1 (at most 1 buffered, limit 60) failed with %v; failures: %v", i, err, h.snapshot())
			}
			t.Fatalf("record %d: %v", i, err)
		}
	}
}
