package korder_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// defaultPartitioner is the partitioner a Producer's client has when its
// options give none (kgo's default, wrapped so that the Producer can pin
// keyed records), which newProducer's ManualPartitioner would otherwise
// replace.
func defaultPartitioner() kgo.Opt { return kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)) }

// kgoDefaultPartitioner is kgo's default partitioner given explicitly: the
// Producer cannot pin records with it (see the package documentation).
func kgoDefaultPartitioner() kgo.Opt {
	return kgo.RecordPartitioner(kgo.UniformBytesPartitioner(64<<10, true, true, nil))
}

// keyFor returns base, or base with a suffix, such that kgo's default
// partitioner puts a record with it as key on partition of n partitions.
func keyFor(base string, partition int32, n int) string {
	tp := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	for i := 0; ; i++ {
		k := base
		if i > 0 {
			k += "~" + strconv.Itoa(i)
		}
		if tp.Partition(&kgo.Record{Key: []byte(k)}, n) == int(partition) {
			return k
		}
	}
}

// keyed is a keyed record for the default partitioner, on partition of a
// topic with matrixPartitions partitions; its Partition field is only a
// note of where it goes.
func keyed(partition int32, key string, seq int) *kgo.Record {
	k := keyFor(key, partition, matrixPartitions)
	return &kgo.Record{Topic: topic, Partition: partition, Key: []byte(k), Value: []byte(key + "-" + strconv.Itoa(seq))}
}

// With the default partitioner, a partition's failure holds only its own
// records, which korder learns from kgo: while the recovery of a poison
// record on partition 0 is held up (its produce request again is kept by
// the broker), keyed records of partition 1 are written; partition 0's new
// records are written after its recovered ones. The partitions have
// different leaders. (Partition 0 is recovered in kgo while its round is
// in flight, so unkeyed records may go to it, behind the round:
// TestLearnedRetryDoesNotStopHealthyPartitions checks that they are routed
// around it while it is failed.)
func TestLearnedHoldsDoNotStopHealthyPartitions(t *testing.T) {
	// pinned: the client's partitioner is the Producer's (kopts give
	// none); explicit: kgo's default given in kopts, which turns pinning
	// off, and the gate holds the whole topic.
	for _, part := range []struct {
		name string
		opt  func() kgo.Opt
	}{{"pinned", defaultPartitioner}, {"explicit", kgoDefaultPartitioner}} {
		t.Run(part.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := twoBrokerCluster(t)
			poison(c)
			retrying, release := holdProduceContaining(t, c, "POISON", 2)
			p := newProducer(t, c, []kgo.Opt{part.opt()}, korder.WithPolicies(korder.Retry(1, 0), korder.DeadLetter(dlq)))

			if err := produceSync(ctx, p, keyed(0, "a", 0)); err != nil {
				t.Fatal(err)
			}
			ps := newPromises()
			bad := keyed(0, "a", 1)
			bad.Value = []byte("POISON")
			p.Produce(ctx, bad, ps.fn())
			waitClosed(ctx, t, retrying, "the recovery to produce the poison record again")

			exp0 := []string{"a-0"}
			for i := 2; i <= 4; i++ {
				r := keyed(0, "a", i)
				exp0 = append(exp0, string(r.Value))
				p.Produce(ctx, r, ps.fn())
			}
			var exp1 []string
			for i := range 5 {
				r := keyed(1, "b", i)
				exp1 = append(exp1, string(r.Value))
				if err := produceSync(ctx, p, r); err != nil {
					t.Fatalf("partition 1 during partition 0's recovery: %v", err)
				}
			}
			release()
			ps.wait(ctx, t)
			checkPoisonDeadLettered(t, ps, bad)
			expectLog(ctx, t, c, topic, 0, exp0)
			if got := values(readAll(ctx, t, c, topic, 1)); len(got) < len(exp1) {
				t.Errorf("partition 1: %v", got)
			}
		})
	}
}

// With the default partitioner, kgo rejects a failed partition's records
// for as long as it is failed: while every produce to partition 0 fails
// (Retry backs off between rounds), partition 1's keyed records and unkeyed
// records are written, one at a time; once the fault is gone, partition 0
// has every record, in order.
func TestLearnedRetryDoesNotStopHealthyPartitions(t *testing.T) {
	ctx := testCtx(t)
	c := twoBrokerCluster(t)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: -1})
	p := newProducer(t, c, []kgo.Opt{defaultPartitioner()}, korder.WithPolicies(korder.Retry(1<<20, 0)))

	ps := newPromises()
	var exp0 []string
	for i := range 5 {
		r := keyed(0, "a", i)
		exp0 = append(exp0, string(r.Value))
		p.Produce(ctx, r, ps.fn())
	}
	// Partition 0 fails when the response to a-0..a-4 comes back. An
	// unkeyed record produced before that is partitioned like any other:
	// the sticky partitioner may put it on partition 0, behind a-0..a-4,
	// where it fails with them and is kept in order behind them (korder's
	// per-partition guarantee), so it is written only once the fault is
	// gone. Only once kgo has partition 0 failed (the hook, which counts
	// Failures, runs after kgo set it failed, and Retry's keepFailed
	// rounds keep it failed) are unkeyed records routed around it.
	for p.Stats().Failures == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("partition 0 never failed")
		case <-time.After(time.Millisecond):
		}
	}
	var exp1 []string
	for i := range 20 {
		r := keyed(1, "b", i)
		exp1 = append(exp1, string(r.Value))
		if err := produceSync(ctx, p, r); err != nil {
			t.Fatalf("partition 1 while partition 0 fails: %v", err)
		}
		if err := produceSync(ctx, p, &kgo.Record{Topic: topic, Value: []byte("u-" + strconv.Itoa(i))}); err != nil {
			t.Fatalf("unkeyed record while partition 0 fails: %v", err)
		}
		if i == 1 {
			// Partition 0 keeps producing while it fails.
			for j := 5; j < 8; j++ {
				r := keyed(0, "a", j)
				exp0 = append(exp0, string(r.Value))
				p.Produce(ctx, r, ps.fn())
			}
		}
	}
	if s := p.Stats(); s.Failures == 0 {
		t.Fatalf("partition 0 never failed: %+v", s)
	}
	h.Remove()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp0)
	var got1 []string
	for _, v := range values(readAll(ctx, t, c, topic, 1)) {
		if v[0] == 'b' {
			got1 = append(got1, v)
		}
	}
	if strconv.Quote(got1[0]) != strconv.Quote(exp1[0]) || len(got1) != len(exp1) {
		t.Errorf("partition 1: %v, expected %v", got1, exp1)
	}
	s := p.Stats()
	if s.PartitionHoldTime[topic][0] <= 0 || s.PartitionHoldTime[topic][1] != 0 {
		t.Errorf("hold time per partition %v", s.PartitionHoldTime)
	}
}

// With the default partitioner, Stop stops only the failed partition: its
// later keyed records fail with ErrStopped, the other partitions' records
// and unkeyed records are written; Resume resumes it.
func TestLearnedStopPartition(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: -1})
	p := newProducer(t, c, []kgo.Opt{defaultPartitioner()}, korder.WithPolicies(korder.Stop()))
	a := func(i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(keyFor("a", 0, 2)), Value: []byte("a-" + strconv.Itoa(i))}
	}
	b := func(i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(keyFor("b", 1, 2)), Value: []byte("b-" + strconv.Itoa(i))}
	}

	if err := produceSync(ctx, p, a(0)); !errors.Is(err, korder.ErrStopped) || !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("got %v, expected ErrStopped wrapping INVALID_RECORD", err)
	}
	if err := produceSync(ctx, p, a(1)); !errors.Is(err, korder.ErrStopped) {
		t.Fatalf("partition 0 after the stop: %v", err)
	}
	if err := produceSync(ctx, p, b(0)); err != nil {
		t.Fatalf("partition 1 after partition 0 stopped: %v", err)
	}
	if err := produceSync(ctx, p, &kgo.Record{Topic: topic, Value: []byte("u-0")}); err != nil {
		t.Fatalf("unkeyed record after partition 0 stopped: %v", err)
	}
	h.Remove()
	p.Resume(topic)
	if err := produceSync(ctx, p, a(2)); err != nil {
		t.Fatalf("partition 0 after Resume: %v", err)
	}
	expectLog(ctx, t, c, topic, 0, []string{"a-2"})
	expectLog(ctx, t, c, topic, 1, []string{"b-0", "u-0"})
	if s := p.Stats(); s.Stopped != 2 {
		t.Errorf("stats %+v: expected the record the stop failed and the one produced while stopped", s)
	}
}
