package korder_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// With kgo.ManualFlushing, nothing is sent without a flush: a recovery
// round, which waits for the records it produces again, flushes them.
func TestManualFlushingRecovers(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: 1})
	p := newProducer(t, c, []kgo.Opt{kgo.ManualFlushing(), kgo.RecordRetries(0)}, korder.WithPolicies(korder.Retry(3, time.Millisecond), korder.Stop()))
	ps := newPromises()
	var exp []string
	for i := range 5 {
		r := rec(0, "k", i)
		exp = append(exp, string(r.Value))
		p.Produce(ctx, r, ps.fn())
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp)
	if s := p.Stats(); s.Retries == 0 {
		t.Errorf("stats %+v: expected a retry", s)
	}
}

// Flush and Close wait for the promise of a record that kgo fails before
// buffering it (no topic here), which kgo's Flush does not count: korder
// counts it held until its promise has returned.
func TestFlushAndCloseWaitForUnbufferedRecords(t *testing.T) {
	for _, closing := range []bool{false, true} {
		t.Run(map[bool]string{false: "Flush", true: "Close"}[closing], func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 1)
			p, err := korder.NewProducer([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			entered, returned := make(chan struct{}), make(chan struct{})
			var early atomic.Bool
			p.Produce(ctx, &kgo.Record{Value: []byte("no topic")}, func(_ *kgo.Record, err error) {
				if err == nil {
					t.Error("a record with no topic was written")
				}
				close(entered)
				// As in TestCloseWaitsForPromises: nothing can say
				// that the call has not returned.
				select {
				case <-returned:
					early.Store(true)
				case <-time.After(200 * time.Millisecond):
				}
			})
			waitClosed(ctx, t, entered, "the promise")
			go func() {
				if closing {
					p.Close()
				} else if err := p.Flush(ctx); err != nil {
					t.Error(err)
				}
				close(returned)
			}()
			waitClosed(ctx, t, returned, "the call")
			if early.Load() {
				t.Fatal("returned while a promise was running")
			}
		})
	}
}

// Issue 34, item 10: records that the application aborts through Client()
// (AbortBufferedRecords) fail with kgo's ErrAborting, which fails no
// partition: the Producer holds none of them and counts nothing for them,
// so Flush returns, every promise is called once, and the Producer goes on.
// Records it holds meanwhile (partition 0 failed, retried) are settled or
// written as usual.
func TestFlushAfterAbortBufferedRecords(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: 1})
	hook, failed := failedHook()
	p := newProducer(t, c, []kgo.Opt{hook, kgo.ManualFlushing(), kgo.RecordRetries(0)}, korder.WithPolicies(korder.Retry(3, 10*time.Millisecond), korder.Stop()))
	ps := newPromises()
	for i := range 5 {
		p.Produce(ctx, rec(0, "a", i), ps.fn())
	}
	if err := p.Client().Flush(ctx); err != nil { // kgo sends them: partition 0 fails, the Producer holds them
		t.Fatal(err)
	}
	waitOn(ctx, t, failed, "partition 0's failure")
	for i := range 5 {
		p.Produce(ctx, rec(1, "b", i), ps.fn()) // buffered, not sent (manual flushing)
	}
	if err := p.Client().AbortBufferedRecords(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if r.Partition == 1 && !errors.Is(err, kgo.ErrAborting) {
			t.Errorf("record %s, buffered when aborted: %v, expected kgo.ErrAborting", r.Value, err)
		}
		if r.Partition == 0 && err != nil && !errors.Is(err, kgo.ErrAborting) {
			t.Errorf("record %s, held when aborted: %v", r.Value, err)
		}
	}
	if s := p.Stats(); s.Held != 0 {
		t.Errorf("stats %+v: records still held", s)
	}
	ps = newPromises()
	p.Produce(ctx, rec(1, "b", 5), ps.fn())
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, err := range ps.check(t) {
		if err != nil {
			t.Fatalf("after the abort: %v", err)
		}
	}
}
