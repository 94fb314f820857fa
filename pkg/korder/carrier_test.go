package korder

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ringProducer returns a context bounded to a minute, and a Producer with
// kopts and opts over a kfake cluster with topic "t" of 2 partitions.
func ringProducer(t *testing.T, kopts []kgo.Opt, opts ...Opt) (context.Context, *Producer, *kfake.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := NewProducer(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, kopts...), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return ctx, p, c
}

// A ring far smaller than the records in flight: records take carriers
// lap after lap or closures, the ring grows, and failures collected from
// carriers of many laps keep their Produce order (a carrier stores its lap,
// not the record's number). Every promise runs once, every record is
// written once, in order, and the carriers are clean at the end.
func TestCarrierRing(t *testing.T) {
	ctx, p, c := ringProducer(t, []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(0)},
		WithPolicies(Retry(100, time.Millisecond), Stop()))
	p.ring.Store(p.newCarrierRing(4))

	const n = 3000
	var mu sync.Mutex
	calls := map[*kgo.Record]int{}
	offsets := map[*kgo.Record]int64{}
	var rs [2][]*kgo.Record
	promise := func(r *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		calls[r]++
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
		offsets[r] = r.Offset
	}
	for i := range n {
		if i == n/3 {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: 3})
		}
		part := int32(i % 2)
		r := &kgo.Record{Topic: "t", Partition: part, Value: []byte(strconv.Itoa(i))}
		rs[part] = append(rs[part], r)
		p.Produce(ctx, r, promise)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for part, prs := range rs {
		for i, r := range prs {
			if calls[r] != 1 {
				t.Fatalf("record %s: promise called %d times", r.Value, calls[r])
			}
			if offsets[r] != int64(i) {
				t.Fatalf("partition %d: record %s at offset %d, expected %d", part, r.Value, offsets[r], i)
			}
		}
		if hw := c.PartitionInfo("t", int32(part)).HighWatermark; hw != int64(len(prs)) {
			t.Fatalf("partition %d holds %d records, expected %d", part, hw, len(prs))
		}
	}
	if p.Stats().Failures == 0 {
		t.Error("no failure: the fault did not apply")
	}
	rg := p.ring.Load()
	if len(rg.slots) <= 4 || len(rg.slots) > maxCarriers {
		t.Errorf("ring of %d carriers, expected it grown from 4", len(rg.slots))
	}
	for i := range rg.slots {
		if c := &rg.slots[i]; c.state.Load()&1 != 0 || c.promise != nil {
			t.Fatalf("carrier %d not clean after Flush", i)
		}
	}
}

// A ring that stays mostly free shrinks: with at most 128 records in flight,
// a ring of 4096 carriers shrinks to at most 1024 (four times the records in
// flight, rounded up) after shrinkLaps laps, and records keep taking
// carriers from the new ring.
func TestCarrierRingShrinks(t *testing.T) {
	ctx, p, _ := ringProducer(t, nil)
	big := p.newCarrierRing(4096)
	p.ring.Store(big)
	tokens := make(chan struct{}, 128)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			t.Error(err)
		}
		<-tokens
	}
	n := 0
	for ; p.ring.Load() == big && n < (shrinkLaps+2)*4096; n++ {
		select {
		case tokens <- struct{}{}:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		p.Produce(ctx, &kgo.Record{Topic: "t", Value: []byte(strconv.Itoa(n))}, promise)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if size := len(p.ring.Load().slots); size > 1024 {
		t.Fatalf("ring of %d carriers after %d records with at most 128 in flight, expected at most 1024", size, n)
	}
	if n > shrinkLaps*4096+1 {
		t.Errorf("shrank after %d records, expected %d laps of 4096", n, shrinkLaps)
	}
	if m := p.misses.Load(); m != 0 {
		t.Errorf("%d records found no carrier in the small ring", m)
	}
}
