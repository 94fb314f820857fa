package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestUnsureBatchWrittenOnce: the idempotent duplicates of seeds 1085, 2110
// and 5027 (issue 21), reproduced with plain kgo (idempotent, no option).
//
// A is written to partition 0, but its outcome is lost: the connection
// closes before the response, or the response is REQUEST_TIMED_OUT. A's
// batch is pinned to (producer ID, epoch E, sequence) and its resends are
// refused with NOT_ENOUGH_REPLICAS. Partition 1 then fails with
// INVALID_RECORD, which bumps the producer's epoch to E+1, and partition 1
// is written again under E+1. Then the fault is removed, and A's resend,
// still under E, reaches the broker's producer state.
//
// Kafka keeps that state per partition, so the resend is a duplicate and A
// is in the log once. Pristine v1.22.3 with its kfake (-tags pristine)
// writes A twice: kfake answered INVALID_PRODUCER_EPOCH (one epoch per
// producer ID), and kgo renumbered A under E+1. Patched, kfake answers the
// duplicate; and kgo no longer renumbers a batch that may be in the log: had
// the broker lost our state, A would fail with kgo.ErrPossiblyWritten, not
// be written twice.
func TestUnsureBatchWrittenOnce(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name string
		kill bool // lose the response by closing the connection; else REQUEST_TIMED_OUT
	}{
		{"lost response", true},
		{"REQUEST_TIMED_OUT", false},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			testUnsureBatchWrittenOnce(t, test.kill)
		})
	}
}

func testUnsureBatchWrittenOnce(t *testing.T, kill bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, chaosTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]

	g := new(gates)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.Dialer(g.dial),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.MetadataMinAge(10*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 5 * time.Millisecond }),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	produce := func(p int32, v string) <-chan error {
		done := make(chan error, 1)
		cl.Produce(ctx, &kgo.Record{Topic: chaosTopic, Partition: p, Value: []byte(v)}, func(_ *kgo.Record, err error) { done <- err })
		return done
	}
	wait := func(what string, done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			t.Fatalf("%s: promise not called", what)
			return nil
		}
	}
	for p := range int32(2) { // warm up: producer ID, metadata, both partitions
		if err := wait("warm-up", produce(p, "warm-up")); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
	}
	hwm0 := c.PartitionInfo(chaosTopic, 0).HighWatermark

	// A is written; hold its response until the resends are refused.
	release := g.hold(addr)
	defer release()
	first := kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Partitions: []int32{0}, Observe: true}
	if !kill {
		first = kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Partitions: []int32{0}, Err: kerr.RequestTimedOut}
	}
	seen := c.Fault(first)
	doneA := produce(0, "A")
	if err := seen.Wait(ctx, 1); err != nil {
		t.Fatalf("A never reached the broker: %v", err)
	}
	seen.Remove()
	if hwm := c.PartitionInfo(chaosTopic, 0).HighWatermark; hwm != hwm0+1 {
		t.Fatalf("setup: high watermark %d after the broker handled A, want %d", hwm, hwm0+1)
	}
	refuse := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: -1})
	defer refuse.Remove()
	if kill && g.kill(addr) == 0 {
		t.Fatal("setup: no connection to close")
	}
	release()
	if err := refuse.Wait(ctx, 1); err != nil {
		t.Fatalf("A was never resent: %v", err)
	}

	// Partition 1 fails (the epoch is bumped), then is written again.
	invalid := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Partitions: []int32{1}, Err: kerr.InvalidRecord})
	defer invalid.Remove()
	if err := wait("B", produce(1, "B")); err == nil {
		t.Fatal("setup: B was written, want INVALID_RECORD")
	}
	if err := wait("C", produce(1, "C")); err != nil {
		t.Fatalf("C: %v", err)
	}

	// A's next resend reaches the producer state.
	refuse.Remove()
	errA := wait("A", doneA)
	if hwm := c.PartitionInfo(chaosTopic, 0).HighWatermark; hwm != hwm0+1 {
		t.Fatalf("A was written %d times (promise: %v), want once", hwm-hwm0, errA)
	}
	if errA != nil && !isPossiblyWritten(errA) {
		t.Fatalf("A, in the log once, failed with %v, which does not say it may have been written", errA)
	}
}
