//go:build !pristine

package failstop_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A refused RecoverProducePartition counts nothing as buffered: a recovery
// that counted its records before it was refused made a concurrent keyed
// TryProduce to ANOTHER partition see the buffer over MaxBufferedRecords,
// get ErrMaxBuffered, and fail that partition.
func TestRefusedRecoveryCountsNothing(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2, topic)
	h := newFailHook()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(60), kgo.ProducerBatchMaxBytes(512),
	}, failStopOpts(h)...)...)
	produceOK(ctx, t, cl, rec(topic, 0, 0), rec(topic, 1, 0))

	// Fail partition 0 with a record too large for a batch (n = 1).
	big := rec(topic, 0, 1)
	big.Headers = []kgo.RecordHeader{{Key: "pad", Value: make([]byte, 1024)}}
	await(ctx, t, produceAsync(ctx, cl, big))
	checkEvent(t, h.wait(ctx, t), topic, 0, kerr.MessageTooLarge)

	// A recovery that is refused (seen 0 < 1), again and again: the
	// protocol's first call when a promise is still missing.
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
			if err := cl.RecoverProducePartition(topic, 0, 0, false, nil, rs...); err == nil {
				t.Error("recovery with a record unseen was not refused")
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
				t.Fatalf("record %d to partition 1 (at most 1 buffered, limit 60) failed with %v; hook events: %v", i, err, h.snapshot())
			}
			t.Fatalf("record %d: %v", i, err)
		}
	}
}
