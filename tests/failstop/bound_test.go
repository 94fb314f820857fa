//go:build !pristine

package failstop_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPartitionBoundIsolatesStall: partition 0's broker keeps answering
// NOT_ENOUGH_REPLICAS, which kgo retries without end. Without a bound, its
// records take the buffer that every partition shares (MaxBufferedRecords),
// and producing to partition 1 blocks. With MaxBufferedPartitionRecords,
// once partition 0 retries its first batch, the record past the bound fails
// the partition (the hook is called, with a cause wrapping ErrMaxBuffered)
// and the ones after it are rejected with that failure; partition 1 keeps
// being written. Once the stall ends and the buffered records are written,
// RecoverProducePartition produces the failed and rejected ones, in order.
func TestPartitionBoundIsolatesStall(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2, topic)
	h := newFailHook()
	cl := newClient(t, c, kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(h),
		kgo.MaxBufferedPartitionRecords(3), kgo.MaxBufferedRecords(5),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(100*time.Millisecond))
	produceOK(ctx, t, cl, rec(topic, 1, 0)) // the client knows the topic

	stall := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: -1})
	stalled := produceAsync(ctx, cl, recs(topic, 0, 0, 3)...)
	// Stalled (the bound applies) once kgo handled two answers to the
	// first batch: with up to three batches, answers may be the others',
	// so the fifth comes after that.
	if err := stall.Wait(ctx, 5); err != nil {
		t.Fatal(err)
	}
	over := await(ctx, t, produceAsync(ctx, cl, recs(topic, 0, 3, 5)...))
	f := checkWave(t, over, kgo.ErrMaxBuffered)
	if ev := h.wait(ctx, t); ev != f {
		t.Fatalf("the hook was called with %v, the records past the bound carry %v", ev, f)
	}
	checkEvent(t, f, topic, 0, kgo.ErrMaxBuffered)
	// Partition 1 has the rest of the shared buffer.
	produceOK(ctx, t, cl, recs(topic, 1, 1, 11)...)
	stall.Remove()
	for _, r := range await(ctx, t, stalled) {
		if r.err != nil {
			t.Fatalf("stalled record %s: %v", r.r.Value, r.err)
		}
	}
	recoverOK(ctx, t, cl, f, recs(topic, 0, 3, 5)...)
	produceOK(ctx, t, cl, rec(topic, 0, 5))
	checkLog(ctx, t, c, topic, 0, seqRange(0, 6))
	checkLog(ctx, t, c, topic, 1, seqRange(0, 11))
	checkHookOnce(t, h)
}
