package korder_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// Issue 34, bug 1: a topic's recovery (partition -1) hands kgo records among
// which one is too large for a batch. kgo partitions them on the recovering
// goroutine, and the large one fails its partition there: kgo calls the
// Producer's hook inside the recovery call. Meanwhile Stats, Resume, Flush
// and producing (kgo's promise goroutine delivering the topic's rejections)
// run, and then Close. The Producer held the topic's lock across the call
// and the hook took the Producer's and the topic's locks: with any of these
// waiting for the topic's lock under them, every promise stopped, and Flush
// and Close hung (12-16 of 40 runs). The current Producer releases its
// locks across every kgo call, and its hook takes none: this passed when
// written. Made to hold the topic's lock across the call, with a hook taking
// the Producer's and the topic's locks, it hangs in the first run. Each run
// is bounded; a hang fails with every goroutine's stack.
func TestTopicRecoveryWithTooLargeRecordDoesNotDeadlock(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	k0 := keyFor("k", 0, 2)
	for run := range 20 {
		done := make(chan struct{})
		var ps *promises
		go func() {
			defer close(done)
			ps = topicRecoveryRun(ctx, t, c, run, k0)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("run %d hung:\n%s", run, buf[:runtime.Stack(buf, true)])
		}
		if t.Failed() {
			return
		}
		for r, err := range ps.check(t) {
			switch {
			case len(r.Value) > 1<<10:
				if !errors.Is(err, korder.ErrDropped) && !closed(err) {
					t.Fatalf("run %d: a record too large for kgo got %v", run, err)
				}
			case err != nil && !closed(err):
				t.Fatalf("run %d: %s: %v", run, r.Value, err)
			}
		}
	}
	// What was written is in Produce order, per producing goroutine.
	last := map[string]int{}
	for _, r := range readAll(ctx, t, c, topic, 0) {
		g, n, _ := strings.Cut(string(r.Value), "/")
		i, _ := strconv.Atoi(n)
		if prev, ok := last[g]; ok && i <= prev {
			t.Fatalf("%s written after %s/%d", r.Value, g, prev)
		}
		last[g] = i
	}
}

// topicRecoveryRun is one run of TestTopicRecoveryWithTooLargeRecordDoesNotDeadlock,
// with a new client, which knows nothing of the topic, so that a keyed
// record larger than kgo.MaxBufferedBytes fails the whole topic. Retry
// produces it again through the topic's recovery after 50ms, and it is now
// too large for a batch: it fails its partition inside the recovery call.
// Records produced during the backoff are rejected by the topic, and one
// of them is too large too. Every fourth run closes the Producer during the
// recovery.
func topicRecoveryRun(ctx context.Context, t *testing.T, c *kfake.Cluster, run int, key string) *promises {
	hook, failed := failedHook()
	p, err := korder.NewProducer([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		defaultPartitioner(), hook,
		kgo.MaxBufferedBytes(64 << 10), kgo.ProducerBatchMaxBytes(1 << 10),
	}, korder.WithPolicies(korder.Retry(1, 50*time.Millisecond), korder.Drop()))
	if err != nil {
		t.Error(err)
		return newPromises()
	}
	defer p.Close()
	ps := newPromises()
	large := func() *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(key), Value: bytes.Repeat([]byte("J"), 2<<10)}
	}
	rec := func(g string, i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(fmt.Sprintf("%d-%s/%d", run, g, i))}
	}
	p.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: bytes.Repeat([]byte("x"), 100<<10)}, ps.fn())
	select {
	case <-failed:
	case <-ctx.Done():
		t.Error("the topic did not fail")
		return ps
	}
	// Everything else concurrently with the topic's recovery.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(step func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				step(i)
				runtime.Gosched()
			}
		}()
	}
	loop(func(int) { p.Stats() })
	loop(func(int) { p.Resume(topic) })
	loop(func(int) {
		fctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		_ = p.Flush(fctx)
	})
	if run%4 == 3 {
		loop(func(i int) {
			if i == 100 {
				p.Close()
			}
		})
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := range 300 {
			if i%50 == 3 {
				p.Produce(ctx, large(), ps.fn())
			}
			p.Produce(ctx, rec("main", i), ps.fn())
			if i%10 == 0 {
				time.Sleep(time.Millisecond) // spread over the backoff and the recovery
			}
		}
	}()
	<-produced
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		t.Errorf("run %d: Flush: %v; %+v", run, err, p.Stats())
	}
	close(stop)
	wg.Wait()
	p.Close()
	ps.wait(ctx, t)
	return ps
}

// closed: the error of a record that Close failed.
func closed(err error) bool {
	return errors.Is(err, korder.ErrClosed) || errors.Is(err, kgo.ErrClientClosed)
}

// Issue 34, item 10: "a -1 round's record that fails into a partition keeps
// the -1 round number". It did, and worse: the topic's worker numbered the
// records of its round once back from kgo, when one that failed into
// partition 0 inside the call could already be in partition 0's own round,
// numbered by partition 0's worker under another lock: a data race, and the
// record could leave partition 0's round with the topic's number, no longer
// one of its suspects. A record is now numbered by the partition it comes
// back to, when it comes back. The race detector saw it in 2 of 10 runs.
//
// A keyed record larger than kgo.MaxBufferedBytes fails the whole topic (a
// new client knows nothing of it); Retry produces it again through the
// topic's recovery, where it is too large for a batch and fails partition 0,
// whose policies settle it (its Retry attempt is spent: Drop). The records
// rejected by the topic meanwhile follow, in order; one of them is too large
// too, fails partition 0 inside the topic's recovery, and is retried by
// partition 0 at once, then dropped.
func TestTopicRoundRecordFailsIntoAPartition(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	hook, failed := failedHook()
	p := newProducer(t, c, []kgo.Opt{defaultPartitioner(), hook, kgo.MaxBufferedBytes(64 << 10), kgo.ProducerBatchMaxBytes(1 << 10)},
		korder.WithPolicies(korder.Retry(1, 0), korder.Drop()))
	k := keyFor("k", 0, 2)
	ps := newPromises()
	big := &kgo.Record{Topic: topic, Key: []byte(k), Value: bytes.Repeat([]byte("x"), 100<<10)}
	p.Produce(ctx, big, ps.fn())
	waitOn(ctx, t, failed, "the topic's failure")
	large := &kgo.Record{Topic: topic, Key: []byte(k), Value: bytes.Repeat([]byte("J"), 2<<10)}
	var exp []string
	for i := range 200 {
		if i == 2 {
			p.Produce(ctx, large, ps.fn())
		}
		r := &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte("r-" + strconv.Itoa(i))}
		exp = append(exp, string(r.Value))
		p.Produce(ctx, r, ps.fn())
	}
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if r == big || r == large {
			if !errors.Is(err, korder.ErrDropped) || !errors.Is(err, kerr.MessageTooLarge) {
				t.Errorf("%.4s: got %v, expected ErrDropped wrapping MESSAGE_TOO_LARGE", r.Value, err)
			}
		} else if err != nil {
			t.Errorf("%s: %v", r.Value, err)
		}
	}
	if s := p.Stats(); s.Retries < 1 || s.PartitionHoldTime[topic][-1] == 0 || s.PartitionHoldTime[topic][0] == 0 {
		t.Errorf("expected a retry through the topic's recovery, and partition 0 failed: %+v", s)
	}
	expectLog(ctx, t, c, topic, 0, exp)
}
