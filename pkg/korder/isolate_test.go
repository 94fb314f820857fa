package korder_test

import (
	"bytes"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// isolateRun produces n records with kgo's default linger, one of them
// poison (at 2n/3), in one failed group: the first produce request, a
// record before them, is held by the broker until all n are produced. It
// checks that Isolate and DeadLetter write the others in order and divert
// the poison record, and returns how long partition 0 was held and how
// many produce requests for partition 0 the recovery sent.
func isolateRun(t *testing.T, n int) (hold time.Duration, requests int64) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	release := make(chan struct{})
	var (
		once     sync.Once
		released atomic.Bool
		reqs     atomic.Int64
	)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() { c.SleepControl(func() { <-release }) })
		if released.Load() {
			for _, tp := range req.(*kmsg.ProduceRequest).Topics {
				if tp.Topic == topic || bytes.Equal(tp.TopicID[:], c.TopicInfo(topic).TopicID[:]) {
					reqs.Add(1)
				}
			}
		}
		return nil, nil, false
	})
	// kgo's defaults otherwise: ProducerLinger is 10ms.
	p, err := korder.NewProducer([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, korder.WithPolicies(korder.Isolate(), korder.DeadLetter(dlq)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)

	ps := newPromises()
	p.Produce(ctx, rec(0, "w", 0), ps.fn()) // held by the broker
	exp := []string{"w-0"}
	var poisoned *kgo.Record
	for i := range n {
		r := rec(0, "k", i)
		if i == 2*n/3 {
			r.Value = []byte("POISON")
			poisoned = r
		} else {
			exp = append(exp, string(r.Value))
		}
		p.Produce(ctx, r, ps.fn())
	}
	released.Store(true)
	close(release)
	ps.wait(ctx, t)
	checkPoisonDeadLettered(t, ps, poisoned)
	expectLog(ctx, t, c, topic, 0, exp)
	expectLog(ctx, t, c, dlq, 0, []string{"POISON"})
	s := p.Stats()
	if s.Isolations == 0 {
		t.Fatalf("stats %+v: no isolation", s)
	}
	return s.PartitionHoldTime[topic][0], reqs.Load()
}

// One poison record in a 300-record batch, with kgo's default linger:
// Isolate settles it and releases the partition in well under a second, and the
// number of rounds grows with the logarithm of the batch size, not with
// it. (Producing the batch one record at a time waited out the linger for
// every record: 3.2s.)
func TestIsolateFastWithLinger(t *testing.T) {
	// The best of three runs. The bound catches the linger waited out per
	// record (3.2s), with room for a busy machine (72ms at load 8).
	best := time.Hour
	for range 3 {
		hold, _ := isolateRun(t, 300)
		best = min(best, hold)
	}
	t.Logf("300 records: partition held %v", best)
	if best > time.Second {
		t.Errorf("one poison record in 300 held the partition %v, expected well under the 3.2s of a linger per record", best)
	}

	reqs := map[int]int64{}
	for _, n := range []int{75, 300, 1200} {
		hold, r := isolateRun(t, n)
		reqs[n] = r
		t.Logf("%d records: partition held %v, %d produce requests", n, hold, r)
	}
	// 16 times the records: log2(16) = 4 more halvings; allow twice that.
	if reqs[1200]-reqs[75] > 8 {
		t.Errorf("produce requests by batch size %v: more than logarithmic growth", reqs)
	}
}

// A partition whose every record fails on its own (a broker rejecting all
// of them): once the first culprit is found, each record behind it is
// produced alone first, and fails alone, so the partition costs about one
// produce request per record. Producing the rest whole after each culprit
// made every record behind it fail again and be narrowed down again: about
// n log2(n) requests, and n squared records sent.
func TestEveryRecordFailingIsProbed(t *testing.T) {
	const n = 64
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	var reqs atomic.Int64
	release := holdFirstProduce(c)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		reqs.Add(1)
		return nil, nil, false
	})
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Isolate(), korder.Drop()))
	ps := newPromises()
	for i := range n {
		p.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("POISON-" + strconv.Itoa(i))}, ps.fn())
	}
	release()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if !errors.Is(err, korder.ErrDropped) {
			t.Errorf("%s: %v, expected ErrDropped", r.Value, err)
		}
	}
	if got := reqs.Load(); got > 2*n {
		t.Errorf("%d produce requests for %d records failing on their own, expected at most %d", got, n, 2*n)
	}
}
