//go:build !pristine

package failstop_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The recovery call, RecoverProducePartition: atomic against concurrent
// producers, refused (ErrRecoveryPending) until every promise of its failure
// has returned, so never from the hook or such a promise; and the order of
// the hook and the promises around a failure.

// keyedRec is record seq of key g: value "g seq", key "k<g>".
func keyedRec(g, seq int) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte("k" + strconv.Itoa(g)), Value: fmt.Appendf(nil, "%d %d", g, seq)}
}

func keyedOf(t *testing.T, r *kgo.Record) (g, seq int) {
	t.Helper()
	if _, err := fmt.Sscanf(string(r.Value), "%d %d", &g, &seq); err != nil {
		t.Fatalf("record value %q: %v", r.Value, err)
	}
	return g, seq
}

// TestRecoverWhileProducing: several goroutines keep producing keyed records
// to one partition while the broker fails some of its produce requests
// (INVALID_RECORD). A coordinator collects every failed or rejected record
// from the promises, each carrying its failure, and recovers the partition
// with them, in produce order per key. A goroutine whose record comes back
// pauses (as an application stops producing to a failed partition, or its
// rejections never end), and the coordinator lets them all go on right
// before it calls RecoverProducePartition, so they produce while it runs. It
// holds the lock its promises take across the call: a record rejected
// meanwhile has a promise that has not returned, so the call is refused
// (ErrRecoveryPending) rather than accepted without that record. The log
// must hold every key exactly in produce order, nothing lost, nothing twice:
// the records a recovery buffers go before anything produced concurrently.
// A recovery from inside the hook is always refused with ErrRecoveryPending.
func TestRecoverWhileProducing(t *testing.T) {
	eachConfig(t, func(t *testing.T, opts []kgo.Opt) {
		const (
			producers = 4
			perKey    = 400
			window    = 8 // unsettled records per producer
			total     = producers * perKey
		)
		ctx := testCtx(t)
		c := newCluster(t, 1, topic)

		// Fail the 3rd, 7th and 12th produce request to the partition.
		var nreq atomic.Int64
		fault := c.Fault(kfake.Fault{
			Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0},
			Err: kerr.InvalidRecord, Count: -1,
			When: func(kmsg.Request) bool {
				switch nreq.Add(1) {
				case 3, 7, 12:
					return true
				}
				return false
			},
		})
		t.Cleanup(fault.Remove)

		var (
			clMu     sync.Mutex
			cl       *kgo.Client
			hookErrs = make(chan error, 64)
		)
		h := newFailHook()
		h.onFail = func(f *failure) {
			clMu.Lock()
			cl := cl
			clMu.Unlock()
			hookErrs <- recoverPartition(cl, f, nil)
		}
		clMu.Lock()
		cl = newClient(t, c, append(append([]kgo.Opt{kgo.ProducerLinger(0)}, opts...), failStopOpts(h)...)...)
		clMu.Unlock()

		type backRec struct {
			r *kgo.Record
			f *failure
		}
		var (
			written atomic.Int64
			mu      sync.Mutex
			back    []backRec // failed or rejected, not yet recovered
			wake    = make(chan struct{}, 1)
			paused  = newGate()
		)
		signal := func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		promise := func(r *kgo.Record, err error) {
			if err == nil {
				written.Add(1)
			} else {
				f := failureOf(err)
				if f == nil || !errors.Is(err, kerr.InvalidRecord) {
					t.Errorf("record %q failed with %v, want INVALID_RECORD carrying a partition failure", r.Value, err)
				}
				paused.stop()
				mu.Lock()
				back = append(back, backRec{r, f})
				mu.Unlock()
			}
			signal()
		}

		var wg sync.WaitGroup
		for g := range producers {
			sem := make(chan struct{}, window)
			wg.Go(func() {
				for seq := range perKey {
					paused.wait(ctx)
					select {
					case sem <- struct{}{}:
					case <-ctx.Done():
						return
					}
					cl.Produce(ctx, keyedRec(g, seq), func(r *kgo.Record, err error) {
						<-sem
						promise(r, err)
					})
				}
			})
		}

		var (
			recoveries, refusals int
			retry                <-chan time.Time // set while refused
		)
		for written.Load() < total {
			select {
			case <-wake:
			case <-retry:
			case <-ctx.Done():
				mu.Lock()
				n := len(back)
				mu.Unlock()
				t.Fatalf("%d of %d records written, %d waiting for a recovery, %d recoveries: %v", written.Load(), total, n, recoveries, ctx.Err())
			}
			retry = nil
			mu.Lock()
			if len(back) == 0 {
				mu.Unlock()
				continue
			}
			f := back[0].f
			var rs []*kgo.Record
			for _, b := range back {
				if b.f != f {
					mu.Unlock()
					t.Fatalf("records of two failures unrecovered at once (%v, then %v)", f, b.f)
				}
				rs = append(rs, b.r)
			}
			// Produce order per key is all that matters.
			slices.SortFunc(rs, func(a, b *kgo.Record) int {
				ga, sa := keyedOf(t, a)
				gb, sb := keyedOf(t, b)
				return cmp.Or(cmp.Compare(ga, gb), cmp.Compare(sa, sb))
			})
			paused.open()
			err := recoverPartition(cl, f, promise, rs...)
			if err == nil {
				back = nil
			}
			mu.Unlock()
			switch {
			case err == nil:
				recoveries++
			case errors.Is(err, errRecoveryPending):
				// A promise of the failure has not returned
				// (it may wait for mu): try again shortly.
				refusals++
				retry = time.After(time.Millisecond)
			default:
				t.Fatalf("recovering with %d records: %v", len(rs), err)
			}
		}
		wg.Wait()

		events := h.snapshot()
		if len(events) == 0 || recoveries < len(events) {
			t.Fatalf("%d failures, %d recoveries: the faults did not fail the partition", len(events), recoveries)
		}
		for range events {
			if err := <-hookErrs; !errors.Is(err, errRecoveryPending) {
				t.Errorf("recovering from inside the hook: %v, want a refusal wrapping ErrRecoveryPending", err)
			}
		}
		t.Logf("%d failures, %d recoveries, %d refused while promises were returning, %d produce requests", len(events), recoveries, refusals, nreq.Load())

		// The log: every key exactly in produce order, each record once.
		hwm := c.PartitionInfo(topic, 0).HighWatermark
		if hwm != total {
			t.Errorf("high watermark %d, want %d: records lost or written twice", hwm, total)
		}
		next := make([]int, producers)
		for _, r := range readLog(ctx, t, c, topic, 0, kgo.ReadUncommitted(), hwm-1) {
			g, seq := keyedOf(t, r)
			if seq != next[g] {
				t.Fatalf("key k%d: seq %d at offset %d, want seq %d (produce order)", g, seq, r.Offset, next[g])
			}
			next[g]++
		}
	})
}

// gate pauses producers: wait returns at once while it is open.
type gate struct {
	mu sync.Mutex
	ch chan struct{} // closed while open
}

func newGate() *gate {
	g := &gate{ch: make(chan struct{})}
	close(g.ch)
	return g
}

func (g *gate) wait(ctx context.Context) {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func (g *gate) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
		g.ch = make(chan struct{})
	default:
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
	default:
		close(g.ch)
	}
}

// TestRecoverNoHook: with no HookProducePartitionFailed, an application
// learns of a failure from its records' promises, each of which carries it.
// A recovery from inside any of those promises, the last included, is
// refused with ErrRecoveryPending (that promise has not returned); the
// promise that brings back the last record hands the failure to another
// goroutine, which recovers the partition with all of them.
func TestRecoverNoHook(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ManualFlushing(),
	}, failStopOpts(nil)...)...)

	next := 0
	for round, n := range []int{1, 5, 20} {
		faultProduce(kerr.InvalidRecord, 0)(c) // the next produce request
		var (
			mu    sync.Mutex
			seen  int
			first *failure
		)
		failed := make(chan *failure, 1)
		for _, r := range recs(topic, 0, next, next+n) {
			cl.TryProduce(ctx, r, func(r *kgo.Record, err error) {
				f := failureOf(err)
				if !errors.Is(err, kerr.InvalidRecord) || f == nil {
					t.Errorf("round %d: seq %s got %v, want INVALID_RECORD carrying a partition failure", round, r.Value, err)
					return
				}
				if err := recoverPartition(cl, f, nil); !errors.Is(err, errRecoveryPending) {
					t.Errorf("round %d: recovering from the promise of seq %s: %v, want a refusal wrapping ErrRecoveryPending", round, r.Value, err)
				}
				mu.Lock()
				defer mu.Unlock()
				if first == nil {
					first = f
				} else if f != first {
					t.Errorf("round %d: seq %s carries another failure (%v) than the first record (%v)", round, r.Value, f, first)
				}
				if seen++; seen == n {
					failed <- f
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatalf("round %d: Flush: %v", round, err)
		}
		var f *failure
		select {
		case f = <-failed:
		case <-ctx.Done():
			t.Fatalf("round %d: the promises did not run", round)
		}
		checkEvent(t, f, topic, 0, kerr.InvalidRecord)
		written := make(chan result, n)
		if err := recoverWhenReturned(ctx, t, cl, f, func(r *kgo.Record, err error) { written <- result{r, err} }, recs(topic, 0, next, next+n)...); err != nil {
			t.Fatalf("round %d: recovering once the promises returned: %v", round, err)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatalf("round %d: Flush: %v", round, err)
		}
		for range n {
			if r := <-written; r.err != nil {
				t.Fatalf("round %d: recovered seq %s: %v", round, r.r.Value, r.err)
			}
		}
		next += n
	}
	checkLog(ctx, t, c, topic, 0, seqRange(0, next))
}

// TestUnkeyedMaxBufferedFailsAlone: an unkeyed TryProduce over
// MaxBufferedRecords fails with ErrMaxBuffered, and only it: no partition
// or topic fails (an unkeyed record has no order to keep), the keyed records
// buffered before it are written, and so are those produced after it.
func TestUnkeyedMaxBufferedFailsAlone(t *testing.T) {
	for _, warm := range []bool{true, false} {
		name := "metadata-loaded"
		if !warm {
			name = "before-metadata"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 2, topic)
			h := newFailHook()
			cl := newClient(t, c, append([]kgo.Opt{kgo.ManualFlushing(), kgo.MaxBufferedRecords(2)}, failStopOpts(h)...)...)
			try, flushOK := tryFlush(ctx, t, cl)

			seq := 0
			if warm {
				flushOK(try(keyedRec(0, 0)))
				seq = 1
			}
			buffered := try(keyedRec(0, seq), keyedRec(0, seq+1))
			over := await(ctx, t, try(&kgo.Record{Topic: topic, Value: []byte("unkeyed")}))[0]
			if !errors.Is(over.err, kgo.ErrMaxBuffered) || failureOf(over.err) != nil {
				t.Fatalf("unkeyed record over the limit got %v, want ErrMaxBuffered alone", over.err)
			}
			flushOK(buffered)
			flushOK(try(keyedRec(0, seq+2), keyedRec(0, seq+3)))
			flushOK(try(&kgo.Record{Topic: topic, Value: []byte("unkeyed")}))
			if evs := h.snapshot(); len(evs) != 0 {
				t.Fatalf("an unkeyed ErrMaxBuffered failed %v", evs)
			}
		})
	}
}

// TestHookBeforePromises: the hook runs, and returns, before the failed
// record's promise is called, whether the failure is on the client's
// response goroutine (INVALID_RECORD) or on the producing goroutine (a
// record too large for a batch); the promise's error carries the failure
// the hook was passed; recovering from inside the hook is refused with
// ErrRecoveryPending. Once the promise has returned, recovering with the
// record writes it.
func TestHookBeforePromises(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []kgo.Opt
		cause error
		arm   func(c *kfake.Cluster)
		fail  func(r *kgo.Record)
	}{
		{
			name:  "response-goroutine",
			cause: kerr.InvalidRecord,
			arm:   func(c *kfake.Cluster) { faultProduce(kerr.InvalidRecord, 0)(c) },
			fail:  func(*kgo.Record) {},
		},
		{
			name:  "producing-goroutine",
			opts:  []kgo.Opt{kgo.ProducerBatchMaxBytes(512)},
			cause: kerr.MessageTooLarge,
			arm:   func(*kfake.Cluster) {},
			fail: func(r *kgo.Record) {
				r.Headers = []kgo.RecordHeader{{Key: "pad", Value: make([]byte, 1024)}}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 1, topic)
			var (
				clMu         sync.Mutex
				cl           *kgo.Client
				hookReturned atomic.Bool
				promiseRan   = make(chan struct{})
				hookErr      = make(chan error, 2)
			)
			h := newFailHook()
			h.onFail = func(f *failure) {
				clMu.Lock()
				cl := cl
				clMu.Unlock()
				hookErr <- recoverPartition(cl, f, nil)
				select {
				case <-promiseRan:
					hookErr <- errors.New("the failed record's promise ran before OnProducePartitionFailed")
				default:
				}
				hookReturned.Store(true)
			}
			clMu.Lock()
			cl = newClient(t, c, append(append([]kgo.Opt{
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
			}, tc.opts...), failStopOpts(h)...)...)
			clMu.Unlock()
			produceOK(ctx, t, cl, rec(topic, 0, 0)) // metadata

			tc.arm(c)
			bad := rec(topic, 0, 1)
			tc.fail(bad)
			type outcome struct {
				err   error
				early bool // the hook had not returned
			}
			done := make(chan outcome, 1)
			cl.Produce(ctx, bad, func(_ *kgo.Record, err error) {
				early := !hookReturned.Load()
				close(promiseRan)
				done <- outcome{err, early}
			})
			var o outcome
			select {
			case o = <-done:
			case <-ctx.Done():
				t.Fatal("the failed record's promise was not called")
			}
			f := h.wait(ctx, t)
			checkEvent(t, f, topic, 0, tc.cause)
			if !errors.Is(o.err, tc.cause) || failureOf(o.err) != f || isRejected(o.err) {
				t.Fatalf("seq 1 failed with %v, want %v carrying the hook's failure", o.err, tc.cause)
			}
			if o.early {
				t.Errorf("the failed record's promise ran before OnProducePartitionFailed returned")
			}
			checkPending(t, <-hookErr)
			select {
			case err := <-hookErr:
				t.Error(err)
			default:
			}

			recoverOK(ctx, t, cl, f, rec(topic, 0, 1))
			checkLog(ctx, t, c, topic, 0, []int{0, 1})
			checkHookOnce(t, h)
		})
	}
}

// TestPromisesInProduceOrder: the records a failure failed and those it
// rejected are promised in produce order, including records produced while
// the hook runs (here, by a goroutine the hook starts), so that an
// application can keep its failed and rejected records in the order their
// promises ran. Every one of them carries the failure.
func TestPromisesInProduceOrder(t *testing.T) {
	const n = 50
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	var (
		clMu sync.Mutex
		cl   *kgo.Client
		got  = make(chan result, n)
	)
	promise := func(r *kgo.Record, err error) { got <- result{r, err} }
	h := newFailHook()
	h.onFail = func(*failure) {
		clMu.Lock()
		cl := cl
		clMu.Unlock()
		go func() { // the hook must not produce: a goroutine does
			for seq := 3; seq <= n; seq++ {
				cl.Produce(ctx, rec(topic, 0, seq), promise)
			}
		}()
	}
	clMu.Lock()
	cl = newClient(t, c, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}, failStopOpts(h)...)...)
	clMu.Unlock()
	produceOK(ctx, t, cl, rec(topic, 0, 0)) // metadata

	faultProduce(kerr.InvalidRecord, 0)(c)
	cl.Produce(ctx, rec(topic, 0, 1), promise)
	cl.Produce(ctx, rec(topic, 0, 2), promise)
	f := h.wait(ctx, t)
	var order []int
	for range n {
		select {
		case r := <-got:
			order = append(order, seqOf(t, r.r))
			if failureOf(r.err) != f {
				t.Errorf("seq %s: %v, want an error carrying the failure %v", r.r.Value, r.err, f)
			}
		case <-ctx.Done():
			t.Fatalf("promises so far %v", order)
		}
	}
	if !slices.Equal(order, seqRange(1, n+1)) {
		t.Errorf("promises ran in the order %v, want 1 to %d", order, n)
	}
}
