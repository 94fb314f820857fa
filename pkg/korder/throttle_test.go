package korder_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// stallBuffered is the MaxBufferedRecords of the stall tests: partition 0
// may have three quarters of it in kgo.
const stallBuffered = 64

// stallPartition0 makes every produce of partition 0 fail with a retryable
// error, which kgo retries without end (RecordRetries is not set) after
// each metadata refresh: partition 0 stalls, and none of its records fails.
// The returned function ends the fault.
func stallPartition0(c *kfake.Cluster) func() {
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: -1})
	return h.Remove
}

// newStallProducer returns a Producer with kgo's default partitioner,
// whose kgo buffer holds stallBuffered records, with the partition count
// known (a record of each of partitions 0 and 1 written).
func newStallProducer(ctx context.Context, t *testing.T, c *kfake.Cluster, opts ...korder.Opt) *korder.Producer {
	t.Helper()
	p := newProducer(t, c, []kgo.Opt{defaultPartitioner(), kgo.MaxBufferedRecords(stallBuffered), kgo.MetadataMinAge(50 * time.Millisecond)}, opts...)
	for part := range int32(2) {
		if err := produceSync(ctx, p, keyed(part, "w", 0)); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// A stalled partition (its broker answers every produce with a retryable
// error, which kgo keeps retrying) takes at most its share of kgo's
// buffer: partition 0's records beyond it are held by the Producer, in
// order, and Produce returns; partition 1's keyed records and unkeyed
// records are written meanwhile, the unkeyed ones to other partitions than
// 0. Before, partition 0's records filled kgo's buffer, and every Produce
// blocked until the fault was gone. Once it is, partition 0 has every
// record, in order, and every promise ran once.
func TestStalledPartitionDoesNotStopHealthyPartitions(t *testing.T) {
	ctx := testCtx(t)
	c := twoBrokerCluster(t)
	p := newStallProducer(ctx, t, c)
	end := stallPartition0(c)
	defer end()

	// The healthy records must be written while partition 0 is stalled:
	// within this bound, since the fault lasts until they are.
	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ps := newPromises()
	exp0 := []string{"w-0"}
	for i := 1; i <= 5*stallBuffered; i++ {
		r := keyed(0, "a", i)
		exp0 = append(exp0, string(r.Value))
		p.Produce(hctx, r, ps.fn())
	}
	if s := p.Stats(); s.Held < 4*stallBuffered {
		t.Fatalf("held %d records of the stalled partition, expected at least %d", s.Held, 4*stallBuffered)
	}
	exp1 := []string{"w-0"}
	for i := 1; i <= 3*stallBuffered; i++ {
		r := keyed(1, "b", i)
		exp1 = append(exp1, string(r.Value))
		if err := produceSync(hctx, p, r); err != nil {
			t.Fatalf("partition 1 while partition 0 is stalled: %v", err)
		}
		u := &kgo.Record{Topic: topic, Value: []byte("u-" + strconv.Itoa(i))}
		if err := produceSync(hctx, p, u); err != nil {
			t.Fatalf("unkeyed record while partition 0 is stalled: %v", err)
		}
		if u.Partition == 0 {
			t.Fatalf("unkeyed record %s went to the stalled partition, ahead of its held records", u.Value)
		}
	}
	end()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Held != 0 || s.HeldBytes != 0 {
		t.Errorf("held %d records, %d bytes after the flush", s.Held, s.HeldBytes)
	}
	expectLog(ctx, t, c, topic, 0, exp0)
	var got1 []string // partition 1 has unkeyed records too
	for _, v := range values(readAll(ctx, t, c, topic, 1)) {
		if !strings.HasPrefix(v, "u-") {
			got1 = append(got1, v)
		}
	}
	if !slices.Equal(got1, exp1) {
		t.Errorf("partition 1's keyed records:\n%v\nexpected\n%v", got1, exp1)
	}
}

// A busy partition is not a stalled one: while every partition makes
// progress, the Producer holds nothing, even with more records in flight
// than kgo buffers (Produce waits for room, as kgo's does).
func TestBusyPartitionIsNotHeld(t *testing.T) {
	ctx := testCtx(t)
	c := twoBrokerCluster(t)
	// A StallAfter no healthy partition reaches, even under -race on a
	// loaded machine: a hold would be a bug, not a slow produce.
	p := newStallProducer(ctx, t, c, korder.StallAfter(time.Minute))
	ps := newPromises()
	exp0 := []string{"w-0"}
	for i := 1; i <= 50*stallBuffered; i++ {
		r := keyed(0, "a", i)
		exp0 = append(exp0, string(r.Value))
		p.Produce(ctx, r, ps.fn())
		if s := p.Stats(); s.Held != 0 {
			t.Fatalf("record %d: %d records held, but partition 0 is only busy", i, s.Held)
		}
	}
	ps.wait(ctx, t)
	expectLog(ctx, t, c, topic, 0, exp0)
}

// Records held for a stalled partition: one whose context ends while it is
// held is settled with its context's error when its turn comes, the others
// are written in order; Close fails those still held with ErrClosed.
func TestStalledPartitionHeldContextAndClose(t *testing.T) {
	for _, closeDuring := range []bool{false, true} {
		t.Run(map[bool]string{false: "ctx", true: "close"}[closeDuring], func(t *testing.T) {
			ctx := testCtx(t)
			c := twoBrokerCluster(t)
			p := newStallProducer(ctx, t, c)
			end := stallPartition0(c)
			defer end()

			ps := newPromises()
			exp0 := []string{"w-0"}
			n := 3 * stallBuffered
			var dead *kgo.Record
			for i := 1; i <= n; i++ {
				r := keyed(0, "a", i)
				rctx := ctx
				if i == n-1 {
					dctx, cancel := context.WithCancel(ctx)
					rctx, dead = dctx, r
					p.Produce(rctx, r, ps.fn())
					cancel()
					continue
				}
				exp0 = append(exp0, string(r.Value))
				p.Produce(rctx, r, ps.fn())
			}
			if s := p.Stats(); s.Held == 0 {
				t.Fatal("nothing held")
			}
			if closeDuring {
				p.Close()
				ps.wait(ctx, t)
				closed := 0
				for r, err := range ps.check(t) {
					switch {
					case errors.Is(err, korder.ErrClosed):
						closed++
					case r == dead && errors.Is(err, context.Canceled):
					default:
						t.Errorf("record %s: %v", r.Value, err)
					}
				}
				if closed == 0 {
					t.Error("no record failed with ErrClosed")
				}
				return
			}
			end()
			ps.wait(ctx, t)
			for r, err := range ps.check(t) {
				switch {
				case r == dead:
					if !errors.Is(err, context.Canceled) {
						t.Errorf("record %s, whose context ended while held: %v", r.Value, err)
					}
				case err != nil:
					t.Errorf("record %s: %v", r.Value, err)
				}
			}
			expectLog(ctx, t, c, topic, 0, exp0)
		})
	}
}

// The gate of a learned recovery waits only for records that may go to the
// failed partition: while partition 0 is stalled (its records in kgo,
// retried without end), a poison record on partition 1 is recovered and
// dead-lettered, and partition 2's records are written throughout. Before,
// the gate waited for every record of the topic in kgo, partition 0's
// included, and held the whole topic until partition 0 came back.
func TestGateDoesNotWaitForStalledPartition(t *testing.T) {
	ctx := testCtx(t)
	c := twoBrokerCluster(t)
	poison(c)
	p := newStallProducer(ctx, t, c, korder.WithPolicies(korder.Retry(1, 0), korder.DeadLetter(dlq)))
	end := stallPartition0(c)
	defer end()

	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ps := newPromises()
	exp0 := []string{"w-0"}
	for i := 1; i <= 3; i++ {
		r := keyed(0, "a", i)
		exp0 = append(exp0, string(r.Value))
		p.Produce(hctx, r, ps.fn())
	}
	bad := keyed(1, "b", 1)
	bad.Value = []byte("POISON")
	p.Produce(hctx, bad, ps.fn())
	exp1 := []string{"w-0"}
	for i := 2; i <= 4; i++ {
		r := keyed(1, "b", i)
		exp1 = append(exp1, string(r.Value))
		p.Produce(hctx, r, ps.fn())
	}
	var exp2 []string
	for i := range 20 {
		r := keyed(2, "c", i)
		exp2 = append(exp2, string(r.Value))
		if err := produceSync(hctx, p, r); err != nil {
			t.Fatalf("partition 2 while partition 1 recovers and partition 0 is stalled: %v", err)
		}
	}
	// Partition 1's recovery ends while partition 0 is still stalled.
	for p.Stats().DeadLettered == 0 {
		if err := produceSync(hctx, p, keyed(2, "c", 100)); err != nil {
			t.Fatalf("partition 1's recovery did not end while partition 0 is stalled: %v", err)
		}
		exp2 = append(exp2, "c-100")
	}
	end()
	ps.wait(ctx, t)
	checkPoisonDeadLettered(t, ps, bad)
	expectLog(ctx, t, c, topic, 0, exp0)
	expectLog(ctx, t, c, topic, 1, exp1)
	expectLog(ctx, t, c, topic, 2, exp2)
}
