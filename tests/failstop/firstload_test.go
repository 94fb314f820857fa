//go:build !pristine

package failstop_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type partitionedFunc func(*kgo.Record, int32)

func (f partitionedFunc) OnProduceRecordPartitioned(r *kgo.Record, node int32) { f(r, node) }

// kgo stores a new topic's partitions only once the records that waited for
// them are buffered, and one of those can fail before: here A fails on
// partition 0 while B, the next waiting record, is held in its partitioned
// hook. A recovery of A's failure, handed over by A's promise, must find the
// partition while B is still held; with the earlier API it was refused
// ("the client does not know it"), and korder then gave up the partition's
// kept records (a flake of korder's TestMatrixMidStream).
func TestRecoverDuringTopicFirstLoad(t *testing.T) {
	ctx := testCtx(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for p, leader := range []int32{0, 1} { // B's partition is not on A's connection
		if c.PartitionInfo(topic, int32(p)).Leader != leader {
			if err := c.MoveTopicPartition(topic, int32(p), leader); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: -1})

	release := make(chan struct{})
	h := newFailHook()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.WithHooks(partitionedFunc(func(r *kgo.Record, _ int32) {
			if r.Partition == 1 {
				<-release
			}
		})),
	}, failStopOpts(h)...)...)

	failed := make(chan *failure, 1)
	cl.Produce(ctx, rec(topic, 0, 0), func(_ *kgo.Record, err error) { failed <- failureOf(err) })
	cl.Produce(ctx, rec(topic, 1, 1), nil)
	f := h.wait(ctx, t)
	checkEvent(t, f, topic, 0, kerr.InvalidRecord)
	defer close(release)
	select {
	case got := <-failed:
		if got != f {
			t.Fatalf("A's promise carries %v, want the hook's failure %v", got, f)
		}
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := recoverWhenReturned(ctx, t, cl, f, nil); err != nil {
		t.Fatalf("recovering while the topic's partitions were being stored: %v", err)
	}
}
