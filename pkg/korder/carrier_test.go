package korder

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestMaxCarriersFor(t *testing.T) {
	for _, c := range []struct {
		maxBuffered int64
		want        int
	}{
		{0, minCarriers},
		{1, minCarriers},
		{32, minCarriers},
		{33, 128},
		{50000, 1 << 17}, // kgo's default
		{1 << 16, maxCarriers},
		{1 << 40, maxCarriers},
		{1<<63 - 1, maxCarriers},
	} {
		if got := maxCarriersFor(c.maxBuffered); got != c.want {
			t.Errorf("maxCarriersFor(%d) = %d, expected %d", c.maxBuffered, got, c.want)
		}
	}
}

// carrierRun produces through a Producer whose topic "t" is one unit (per
// topic holds) and checks that every promise is called exactly once, with
// its own record and no error, however the records were carried.
type carrierRun struct {
	t   *testing.T
	c   *kfake.Cluster
	p   *Producer
	wg  sync.WaitGroup
	bad atomic.Int32
}

func newCarrierRun(t *testing.T, brokers int, ring int, kopts ...kgo.Opt) *carrierRun {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if l0 := c.PartitionInfo("t", 0).Leader; brokers > 1 && c.PartitionInfo("t", 1).Leader == l0 {
		if err := c.MoveTopicPartition("t", 1, 1-l0); err != nil {
			t.Fatal(err)
		}
	}
	p, err := NewProducer(append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, kopts...), TopicHolds())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.maxCarriers = ring
	return &carrierRun{t: t, c: c, p: p}
}

func (cr *carrierRun) produce(ctx context.Context, partition int32, value string) {
	cr.produceThen(ctx, partition, value, func() {})
}

// produceSync produces and waits for the record's promise.
func (cr *carrierRun) produceSync(ctx context.Context, partition int32, value string) {
	cr.t.Helper()
	done := make(chan struct{})
	cr.produceThen(ctx, partition, value, func() { close(done) })
	select {
	case <-done:
	case <-ctx.Done():
		cr.t.Fatalf("the promise of %s did not run", value)
	}
}

func (cr *carrierRun) produceThen(ctx context.Context, partition int32, value string, then func()) {
	r := &kgo.Record{Topic: "t", Partition: partition, Value: []byte(value)}
	n := new(atomic.Int32)
	cr.wg.Add(1)
	cr.p.Produce(ctx, r, func(got *kgo.Record, err error) {
		defer then()
		if got != r || err != nil {
			cr.bad.Add(1)
			cr.t.Errorf("promise of %s called with %p (%s), %v; expected %p, nil", r.Value, got, got.Value, err, r)
		}
		if n.Add(1) == 1 {
			cr.wg.Done()
		} else {
			cr.bad.Add(1)
			cr.t.Errorf("promise of %s called %d times", r.Value, n.Load())
		}
	})
}

func (cr *carrierRun) wait(ctx context.Context) {
	cr.t.Helper()
	done := make(chan struct{})
	go func() { cr.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		cr.t.Fatal("promises did not all run")
	}
}

func (cr *carrierRun) unit() *unit {
	cr.p.mu.Lock()
	defer cr.p.mu.Unlock()
	return cr.p.topics["t"].whole
}

// checkRing checks that nothing holds a carrier once every promise ran,
// and that no carrier keeps a context or promise; it returns the ring and
// how many of its carriers were used.
func (cr *carrierRun) checkRing() (*carrierRing, int) {
	cr.t.Helper()
	ring := cr.unit().carriers.Load()
	if ring == nil {
		cr.t.Fatal("the unit has no carrier ring")
	}
	used := 0
	for i := range ring.slots {
		c := &ring.slots[i]
		if c.busy.Load() || c.ctx != nil || c.promise != nil {
			cr.t.Errorf("carrier %d still busy (%v) or holding a context or promise", i, c.busy.Load())
		}
		if c.seq != 0 {
			used++
			if c.seq&ring.mask != uint64(i) {
				cr.t.Errorf("carrier %d carried record number %d", i, c.seq)
			}
		}
	}
	return ring, used
}

// A record whose carrier is still in flight when the ring comes round to
// its slot again keeps it: the later record allocates instead, and every
// promise still gets its own record.
func TestCarrierInFlightIsNotReused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cr := newCarrierRun(t, 2, minCarriers)

	// The first record of a topic takes the locked path; the next one
	// misses (there is no ring yet) and makes the ring.
	u := (*unit)(nil)
	for i := 0; u == nil || u.carriers.Load() == nil; i++ {
		if i == 2 {
			t.Fatal("two records made no carrier ring")
		}
		cr.produceSync(ctx, 1, "warm-"+strconv.Itoa(i))
		u = cr.unit()
	}

	// Hold partition 0's broker, and carry one record to it.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	cr.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cr.c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				if p.Partition == 0 {
					cr.c.DropControl()
					close(held)
					cr.c.SleepControl(func() { <-release })
					return nil, nil, false
				}
			}
		}
		return nil, nil, false
	})
	stuck := u.in.Load() + 1
	cr.produce(ctx, 0, "stuck")
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the produce request was not held")
	}
	slot := &u.carriers.Load().slots[stuck&u.carriers.Load().mask]
	if !slot.busy.Load() || slot.seq != stuck {
		t.Fatalf("record %d is not in its carrier (busy %v, seq %d)", stuck, slot.busy.Load(), slot.seq)
	}

	// Go round the ring three times on partition 1, one record at a
	// time, so that only the stuck record's slot is ever busy.
	misses := u.misses.Load()
	for i := range 3 * minCarriers {
		cr.produceSync(ctx, 1, "p1-"+strconv.Itoa(i))
		if !slot.busy.Load() || slot.seq != stuck {
			t.Fatalf("after record p1-%d, the stuck record's carrier was taken (busy %v, seq %d)", i, slot.busy.Load(), slot.seq)
		}
	}
	if got := u.misses.Load() - misses; got != 3 {
		t.Errorf("%d records missed a carrier, expected 3 (one a lap, at the stuck record's slot)", got)
	}
	once.Do(func() { close(release) })
	cr.wait(ctx)
	if _, used := cr.checkRing(); used != minCarriers {
		t.Errorf("%d carriers of %d used", used, minCarriers)
	}
	if cr.bad.Load() > 0 {
		t.FailNow()
	}
}

// Many producers, many records in flight, a small ring: carriers are
// claimed concurrently, reused, and missed, and the ring grows to its
// limit; every promise gets its own record once, and each partition is
// written in order.
func TestCarriersConcurrent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ring, goroutines, each = 256, 8, 2000
	cr := newCarrierRun(t, 1, ring)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				cr.produce(ctx, int32(g%2), fmt.Sprintf("g%d-%d", g, i))
			}
		})
	}
	wg.Wait()
	cr.wait(ctx)
	r, used := cr.checkRing()
	if len(r.slots) != ring || used != ring {
		t.Errorf("ring of %d carriers, %d used; expected %d, all used", len(r.slots), used, ring)
	}
	if cr.bad.Load() > 0 {
		t.FailNow()
	}
	next := map[string]int{}
	for part := range int32(2) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(cr.c.ListenAddrs()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {part: kgo.NewOffset().AtStart()}}))
		if err != nil {
			t.Fatal(err)
		}
		for n := int64(0); n < cr.c.PartitionInfo("t", part).HighWatermark; {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
			fs.EachRecord(func(r *kgo.Record) {
				n++
				var g, i int
				if _, err := fmt.Sscanf(string(r.Value), "g%d-%d", &g, &i); err != nil || int32(g%2) != part || i != next["g"+strconv.Itoa(g)] {
					t.Fatalf("partition %d: got %s out of order (expected g%d-%d)", part, r.Value, g, next["g"+strconv.Itoa(g)])
				}
				next["g"+strconv.Itoa(g)]++
			})
		}
		cl.Close()
	}
	for g := range goroutines {
		if n := next["g"+strconv.Itoa(g)]; n != each {
			t.Errorf("g%d: %d records written, expected %d", g, n, each)
		}
	}
}
