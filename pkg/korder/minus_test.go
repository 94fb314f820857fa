package korder

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Issue 34, item 10: "a stopped -1 machine keeps the topic's partitions
// waiting until Resume, so Flush hangs". A partition's worker waited while
// its topic had a state machine of its own (partition -1), which a Stop
// keeps until Resume: a partition failing then kept its records for ever,
// and Flush hung. kgo does not let that happen today (a stopped topic
// rejects its records before partitioning, and it fails as a whole only
// while its partitions are unknown), so the topic's stopped state machine is
// made here by hand: a record that fails its partition meanwhile is settled
// by the policies, and Flush returns.
func TestStoppedTopicDoesNotHoldItsPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Partitions: []int32{0}, Err: kerr.InvalidRecord})
	p, err := NewProducer([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, WithPolicies(Drop()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	minus := p.lockPartition("t", -1)
	minus.stopped = ErrStopped
	minus.mu.Unlock()

	errc := make(chan error, 1)
	p.Produce(ctx, &kgo.Record{Topic: "t", Partition: 0, Value: []byte("a")}, func(_ *kgo.Record, err error) { errc <- err })
	fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
	defer fcancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatalf("Flush: %v; %+v", err, p.Stats())
	}
	if err := <-errc; !errors.Is(err, ErrDropped) || !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a: got %v, expected ErrDropped wrapping INVALID_RECORD", err)
	}
}
