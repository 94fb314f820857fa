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

// makeRing produces to partition 1 until the unit has a carrier ring: the
// first record of a topic takes the locked path, and the next one misses
// (there is no ring yet) and makes the ring.
func (cr *carrierRun) makeRing(ctx context.Context) *unit {
	cr.t.Helper()
	for i := range 2 {
		cr.produceSync(ctx, 1, "warm-"+strconv.Itoa(i))
	}
	u := cr.unit()
	if u.carriers.Load() == nil {
		cr.t.Fatal("two records made no carrier ring")
	}
	return u
}

// holdPartition0 holds the first produce request for partition 0 (and with
// it every later request to its broker) until release is called; held is
// closed once it is held.
func (cr *carrierRun) holdPartition0() (held <-chan struct{}, release func()) {
	heldc, releasec := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(releasec) }) }
	cr.t.Cleanup(release)
	cr.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cr.c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				if p.Partition == 0 {
					cr.c.DropControl()
					close(heldc)
					cr.c.SleepControl(func() { <-releasec })
					return nil, nil, false
				}
			}
		}
		return nil, nil, false
	})
	return heldc, release
}

// checkRings checks that nothing holds a carrier of any of rings once every
// promise ran, and that no carrier keeps a context or promise; it returns
// how many carriers of the unit's current ring were used.
func (cr *carrierRun) checkRings(rings map[*carrierRing]bool) int {
	cr.t.Helper()
	ring := cr.unit().carriers.Load()
	if ring == nil {
		cr.t.Fatal("the unit has no carrier ring")
	}
	rings[ring] = true
	used := 0
	for r := range rings {
		for i := range r.slots {
			c := &r.slots[i]
			if c.busy.Load() || c.ctx != nil || c.promise != nil {
				cr.t.Errorf("ring of %d: carrier %d still busy (%v) or holding a context or promise", len(r.slots), i, c.busy.Load())
			}
			if c.seq != 0 && c.seq&r.mask != uint64(i) {
				cr.t.Errorf("ring of %d: carrier %d carried record number %d", len(r.slots), i, c.seq)
			}
			if c.seq != 0 && r == ring {
				used++
			}
		}
	}
	return used
}

// A record whose carrier is still in flight when the ring comes round to
// its slot again keeps it: the later record allocates instead, and every
// promise still gets its own record.
func TestCarrierInFlightIsNotReused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cr := newCarrierRun(t, 2, minCarriers)
	u := cr.makeRing(ctx)

	// Hold partition 0's broker, and carry one record to it.
	held, release := cr.holdPartition0()
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
	release()
	cr.wait(ctx)
	if used := cr.checkRings(map[*carrierRing]bool{}); used != minCarriers {
		t.Errorf("%d carriers of %d used", used, minCarriers)
	}
	if cr.bad.Load() > 0 {
		t.FailNow()
	}
}

// A ring grows when more records are in flight than it has carriers, and
// only then: a record that stays in flight while the ring comes round to
// it many times does not make the ring grow. Carriers of the rings that
// were replaced finish as well.
func TestCarrierRingGrowth(t *testing.T) {
	const limit = 1024
	for _, c := range []struct {
		name string
		n    int // records held in flight on partition 0
	}{
		{"one record in flight", 1},
		{"many records in flight", 700},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cr := newCarrierRun(t, 2, limit)
			u := cr.makeRing(ctx)
			rings := map[*carrierRing]bool{u.carriers.Load(): true}

			held, release := cr.holdPartition0()
			for i := range c.n {
				cr.produce(ctx, 0, "p0-"+strconv.Itoa(i))
				rings[u.carriers.Load()] = true
				if i == 0 {
					select {
					case <-held:
					case <-ctx.Done():
						t.Fatal("the produce request was not held")
					}
				}
			}
			// Then 20 laps of the first ring on partition 1, one
			// record at a time: with one record in flight, 20
			// misses at its slot.
			for i := range 20 * minCarriers {
				cr.produceSync(ctx, 1, "p1-"+strconv.Itoa(i))
				rings[u.carriers.Load()] = true
			}
			size := len(u.carriers.Load().slots)
			switch {
			case c.n == 1 && size != minCarriers:
				t.Errorf("the ring grew to %d carriers with one record in flight", size)
			case c.n > 1 && size < c.n:
				t.Errorf("the ring has %d carriers with %d records in flight", size, c.n)
			case size > limit:
				t.Errorf("the ring has %d carriers, more than its limit %d", size, limit)
			}
			release()
			cr.wait(ctx)
			cr.checkRings(rings)
			if cr.bad.Load() > 0 {
				t.FailNow()
			}
			for part, n := range map[int32]int{0: c.n, 1: 2 + 20*minCarriers} {
				if hw := cr.c.PartitionInfo("t", part).HighWatermark; hw != int64(n) {
					t.Errorf("partition %d has %d records, expected %d", part, hw, n)
				}
			}
		})
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
	used := cr.checkRings(map[*carrierRing]bool{})
	if size := len(cr.unit().carriers.Load().slots); size != ring || used != ring {
		t.Errorf("ring of %d carriers, %d used; expected %d, all used", size, used, ring)
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
