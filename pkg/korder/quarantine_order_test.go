package korder_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// A record produced once its key is quarantined goes to the dead-letter
// topic after the key's records the partition still holds: those rejected
// behind the poison record, diverted once it is. It went there at once,
// ahead of them (here, produced from the poison record's promise, which runs
// when the quarantine has begun and before the held records are diverted).
//
// Released while it waits, it is diverted all the same (it was produced
// while the key was quarantined), and the key's records the partition holds,
// or produced after the release, go to the topic, in order: the kept record
// was produced to the topic once the partition recovered, after them.
func TestQuarantineKeepsHeldRecordsFirst(t *testing.T) {
	for _, release := range []string{"", "K-4", "other-4"} {
		t.Run(map[string]string{"": "quarantined", "K-4": "released", "other-4": "released/other"}[release], func(t *testing.T) {
			testQuarantineKeepsHeldRecordsFirst(t, release)
		})
	}
}

// testQuarantineKeepsHeldRecordsFirst: with after, the key is released after
// K-3, and after is produced after K-3 (K-4 after the release).
func testQuarantineKeepsHeldRecordsFirst(t *testing.T, after string) {
	releaseKey := after != ""
	ctx := testCtx(t)
	c := newCluster(t, 2)
	poison(c)
	hook, failed := failedHook()
	p := newProducer(t, c, []kgo.Opt{hook}, korder.WithPolicies(korder.Isolate(), korder.DeadLetter(dlq).QuarantineKeys()))
	ps := newPromises()
	// The poison's failure comes back only once the later records were
	// rejected behind it.
	release := holdPromises(ctx, t, p, rec(1, "h", 0), ps.fn())
	badDone, next, then := ps.fn(), ps.fn(), ps.fn()
	p.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("K"), Value: []byte("POISON")}, func(r *kgo.Record, err error) {
		p.Produce(context.Background(), rec(0, "K", 3), next)
		switch after {
		case "K-4":
			p.ReleaseQuarantine(topic, []byte("K"))
			p.Produce(context.Background(), rec(0, "K", 4), then)
		case "other-4":
			p.Produce(context.Background(), rec(0, "other", 4), then)
			p.ReleaseQuarantine(topic, []byte("K"))
		default:
			then(rec(0, "none", 0), nil)
		}
		badDone(r, err)
	})
	waitOn(ctx, t, failed, "the poison's failure")
	for _, r := range []*kgo.Record{rec(0, "K", 1), rec(0, "other", 1), rec(0, "K", 2)} {
		p.Produce(ctx, r, ps.fn())
	}
	close(release)
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		v := string(r.Value)
		if wantDL := string(r.Key) == "K" && (!releaseKey || v == "POISON" || v == "K-3"); errors.Is(err, korder.ErrDeadLettered) != wantDL || !wantDL && err != nil {
			t.Errorf("%s: %v", r.Value, err)
		}
	}
	if releaseKey {
		expectLog(ctx, t, c, topic, 0, []string{"K-1", "other-1", "K-2", after})
		expectLog(ctx, t, c, dlq, 0, []string{"POISON", "K-3"})
		return
	}
	expectLog(ctx, t, c, topic, 0, []string{"other-1"})
	expectLog(ctx, t, c, dlq, 0, []string{"POISON", "K-1", "K-2", "K-3"})
}

// A record of a quarantined key produced as the Producer closes, waiting in
// behind for the worker's recovery call to end, was kept behind the key while
// the worker, closing, settled its other records (the lock released), after it
// had settled those kept behind: the worker ended, the record's promise never
// ran, and Close hung (found by a reviewing helper). The sleeps widen windows
// no hook shows: Close inside kgo's Close, a promise holding the worker.
func TestQuarantineKeptBehindAtClose(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	poison(c)
	hook, failed := failedHook()
	kopts := []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		hook,
	}
	p, err := korder.NewProducer(kopts, korder.WithPolicies(korder.Isolate(), korder.DeadLetter(dlq).QuarantineKeys()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kDone, closed, triggered := make(chan error, 1), make(chan struct{}), make(chan struct{})
	korder.SetTestHooks(p, func(n int, keep, accepted bool) {
		if n != 1 || !keep || !accepted || len(p.Quarantined(topic)) == 0 {
			return
		}
		once.Do(func() {
			close(triggered)
			go p.Produce(context.Background(), rec(0, "K", 9), func(_ *kgo.Record, err error) { kDone <- err })
			for korder.Parked(p, topic, 0) == 0 {
				time.Sleep(time.Millisecond)
			}
			go func() { p.Close(); close(closed) }()
			time.Sleep(100 * time.Millisecond) // Close has set closed, and is in cl.Close
		})
	})
	ps := newPromises()
	release := holdPromises(ctx, t, p, rec(1, "h", 0), ps.fn())
	p.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("K"), Value: []byte("POISON")}, ps.fn())
	waitOn(ctx, t, failed, "the poison's failure")
	for i := range 3 {
		fn := ps.fn()
		p.Produce(ctx, rec(0, "other", i), func(r *kgo.Record, err error) {
			time.Sleep(50 * time.Millisecond) // a slow promise: the worker's lock is released meanwhile
			fn(r, err)
		})
	}
	close(release)
	waitOn(ctx, t, triggered, "the probe after the quarantine")
	select {
	case err := <-kDone:
		t.Logf("K-9: %v", err)
	case <-time.After(10 * time.Second):
		l, w, f := korder.LaterState(p, topic, 0)
		t.Errorf("K-9's promise was never called: later %d, worker %v, failed %v", l, w, f)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Error("Close hangs")
	}
}
