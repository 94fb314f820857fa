package korder_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// Issue 34, bug 6: MaxHeld bounds what the Producer keeps for a failed
// partition, counting the records of a round in flight, whatever the number
// of producing goroutines and the partitioner: eight goroutines produce to a
// partition whose every produce fails while Retry keeps sending its failed
// records again; what is kept never exceeds the bound, the records that do
// not fit fail with ErrHeldFull (counted), Produce never blocks, and the
// healthy partition is written meanwhile. Only records whose rejection had
// come back counted, and Produce blocked at the bound: 300 of 300 Produce
// calls returned with MaxHeld(100), 300 held; 370 with MaxHeld(50). The
// default bound is DefaultMaxHeld: before, nothing but MaxHeldBytes (64 MiB
// per partition) bounded what was kept.
func TestMaxHeldBoundsWhatIsKept(t *testing.T) {
	for _, bound := range []int{100, 50, korder.DefaultMaxHeld} {
		opts, n := []korder.Opt{korder.MaxHeld(bound)}, 400
		if bound == korder.DefaultMaxHeld {
			opts, n = nil, 2*bound/7+100 // 7 of 8 records go to the failed partition
		}
		t.Run(strconv.Itoa(bound), func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 2)
			fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: -1})
			defer fault.Remove()
			hook, failed := failedHook()
			p := newProducer(t, c, []kgo.Opt{defaultPartitioner(), hook}, append(opts,
				korder.WithPolicies(korder.Retry(1<<30, time.Millisecond)))...)
			keys := []string{keyFor("k", 0, 2), keyFor("k", 1, 2)}
			ps := newPromises()
			p.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(keys[0]), Value: []byte("first/0")}, ps.fn())
			waitOn(ctx, t, failed, "partition 0's failure")
			var maxHeld int64
			sampled, sampling := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					maxHeld = max(maxHeld, p.Stats().Held)
					select {
					case <-sampling:
						return
					default:
					}
				}
			}()
			// Produce must not block: the producers are done well
			// before their context ends.
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range n {
						k := keys[0]
						if i%8 == 0 {
							k = keys[1]
						}
						p.Produce(pctx, &kgo.Record{Topic: topic, Key: []byte(k), Value: fmt.Appendf(nil, "g%d/%d", g, i)}, ps.fn())
					}
				}()
			}
			wg.Wait()
			blocked := pctx.Err() != nil
			fault.Remove()
			ps.wait(ctx, t)
			close(sampling)
			<-sampled
			errs := ps.check(t)
			full := 0
			for r, err := range errs {
				switch {
				case err == nil:
				case string(r.Key) == keys[0] && errors.Is(err, korder.ErrHeldFull) && errors.Is(err, kerr.InvalidRecord):
					full++
				case errors.Is(err, context.DeadlineExceeded):
					blocked = true
				default:
					t.Errorf("%s (key %s): %v", r.Value, r.Key, err)
				}
			}
			s := p.Stats()
			t.Logf("MaxHeld(%d): held up to %d; %d records failed with ErrHeldFull", bound, maxHeld, full)
			if blocked || maxHeld > int64(bound)*11/10 || full == 0 || s.HeldFull != int64(full) {
				t.Fatalf("MaxHeld(%d): Produce blocked: %v; held up to %d; %d records failed with ErrHeldFull, %d counted", bound, blocked, maxHeld, full, s.HeldFull)
			}
			checkWritten(ctx, t, c, errs)
		})
	}
}

// checkWritten checks that the records written are exactly those whose
// promise got nil, in Produce order per producing goroutine (values
// "<goroutine>/<i>").
func checkWritten(ctx context.Context, t *testing.T, c *kfake.Cluster, errs map[*kgo.Record]error) {
	t.Helper()
	want := map[string]bool{}
	for r, err := range errs {
		if err == nil {
			want[string(r.Value)] = true
		}
	}
	for part := range int32(2) {
		last := map[string]int{}
		for _, r := range readAll(ctx, t, c, topic, part) {
			g, n, _ := strings.Cut(string(r.Value), "/")
			i, err := strconv.Atoi(n)
			if err != nil {
				continue // not produced by the scenario
			}
			if prev, ok := last[g]; ok && i <= prev {
				t.Fatalf("partition %d: %s written after %s/%d", part, r.Value, g, prev)
			}
			last[g] = i
			if !want[string(r.Value)] {
				t.Fatalf("partition %d: %s written, although its promise did not say so", part, r.Value)
			}
			delete(want, string(r.Value))
		}
	}
	if len(want) > 0 {
		t.Fatalf("%d records whose promise got nil are not written", len(want))
	}
}

// Issue 34, bug 2: MaxHeldBytes, per partition, never blocks a topic. Both
// partitions stall (kgo.MaxBufferedPartitionRecords fails them, and the
// Producer keeps what kgo rejects); partition 1 recovers while partition 0
// holds more than MaxHeldBytes, then partition 0 recovers too. A record
// produced to the topic afterwards is written at once. The held bytes were
// counted per topic, and partition 1 was forgotten marked full: every
// Produce to the topic waited until its context ended.
func TestMaxHeldBytesDoesNotBlockTheTopic(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	p := newProducer(t, c, []kgo.Opt{kgo.MaxBufferedPartitionRecords(2), kgo.MetadataMinAge(100 * time.Millisecond)}, korder.MaxHeldBytes(1000))
	value := func(part int32, i int) []byte { // 100 bytes
		return fmt.Appendf(nil, "p%d/%d/%s", part, i, strings.Repeat("v", 100))[:100]
	}
	for part := range int32(2) { // the topic is known
		if err := produceSync(ctx, p, &kgo.Record{Topic: topic, Partition: part, Value: value(part, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	// The promises of the records kgo rejects come back once everything
	// is produced, partition 0's first.
	ps, ps1 := newPromises(), newPromises()
	release := holdPromises(ctx, t, p, &kgo.Record{Topic: topic, Partition: 1, Value: value(1, 1)}, ps1.fn())
	var stalls [2]*kfake.FaultHandle
	for part := range int32(2) {
		stalls[part] = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{part}, Err: kerr.NotEnoughReplicas, Count: -1})
		defer stalls[part].Remove()
	}
	// Two records each, which kgo retries: the partitions are stalled.
	for i := range 2 {
		for part, ps := range []*promises{ps, ps1} {
			p.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(part), Value: value(int32(part), 2+i)}, ps.fn())
		}
	}
	// A partition is stalled (the bound applies) once kgo handled two
	// answers to its first batch: with two batches, an answer may be the
	// second's, so the fourth comes after that.
	for _, stall := range stalls {
		if err := stall.Wait(ctx, 4); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 { // kept, 1000 bytes, and rejected with ErrHeldFull
		p.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: value(0, 4+i)}, ps.fn())
	}
	p.Produce(ctx, &kgo.Record{Topic: topic, Partition: 1, Value: value(1, 4)}, ps1.fn())
	close(release)
	// Partition 1 has a state machine once its record came back, after
	// partition 0's.
	for p.Stats().PartitionHoldTime[topic][1] == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("partition 1's record did not come back")
		case <-time.After(time.Millisecond):
		}
	}
	stalls[1].Remove()
	ps1.wait(ctx, t)
	for r, err := range ps1.check(t) {
		if err != nil {
			t.Fatalf("%.5s: %v", r.Value, err)
		}
	}
	stalls[0].Remove()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil && !errors.Is(err, korder.ErrHeldFull) {
			t.Fatalf("%.5s: %v", r.Value, err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for part := range int32(2) {
		if err := produceSync(pctx, p, &kgo.Record{Topic: topic, Partition: part, Value: []byte("after")}); err != nil {
			t.Fatalf("a record produced to partition %d once both recovered: %v; %+v", part, err, p.Stats())
		}
	}
}

func TestMaxHeldBytesValidates(t *testing.T) {
	if _, err := korder.NewProducer([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, korder.MaxHeldBytes(0)); err == nil {
		t.Error("NewProducer accepted MaxHeldBytes(0)")
	}
}
