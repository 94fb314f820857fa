//go:build !pristine

package failstop_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
// producers, counted, callable from a promise; and the order of the hook and
// the promises around a failure. Each test here fails on the previous
// series (FailedProducePartitions and RecoverProducePartitions).

// hookGrace is how long the hooks and loggers below wait for a promise that
// must not run while they do. No correct run ends the wait early, so it
// costs this much per failure; it only gives a wrong order the time to show.
const hookGrace = 200 * time.Millisecond

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
// from the promises and recovers the partition with them, in produce order
// per key. A goroutine whose record comes back pauses (as an application
// stops producing to a failed partition, or its rejections never end), and
// the coordinator lets them all go on right before it calls
// RecoverProducePartition, so they produce while it runs. The log must hold
// every key exactly in produce order, nothing lost, nothing twice: the
// records a recovery buffers go before anything produced concurrently. A
// recovery while promises are missing is refused with how many; from inside
// the hook it always is.
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
		h.onFail = func(ev failEvent) {
			clMu.Lock()
			cl := cl
			clMu.Unlock()
			hookErrs <- recoverPartition(cl, ev.topic, ev.partition, 0, nil)
		}
		clMu.Lock()
		cl = newClient(t, c, append(append([]kgo.Opt{kgo.ProducerLinger(0)}, opts...), failStopOpts(h)...)...)
		clMu.Unlock()

		var (
			written atomic.Int64
			mu      sync.Mutex
			back    []*kgo.Record // failed or rejected, not yet recovered
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
				if !errors.Is(err, kerr.InvalidRecord) {
					t.Errorf("record %q failed with %v, want INVALID_RECORD or a rejection wrapping it", r.Value, err)
				}
				paused.stop()
				mu.Lock()
				back = append(back, r)
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

		var recoveries, refusals int
		for written.Load() < total {
			select {
			case <-wake:
			case <-ctx.Done():
				mu.Lock()
				n := len(back)
				mu.Unlock()
				t.Fatalf("%d of %d records written, %d waiting for a recovery, %d recoveries: %v", written.Load(), total, n, recoveries, ctx.Err())
			}
			mu.Lock()
			pending := slices.Clone(back)
			mu.Unlock()
			if len(pending) == 0 {
				continue
			}
			// Produce order per key is all that matters.
			slices.SortFunc(pending, func(a, b *kgo.Record) int {
				ga, sa := keyedOf(t, a)
				gb, sb := keyedOf(t, b)
				return cmp.Or(cmp.Compare(ga, gb), cmp.Compare(sa, sb))
			})
			paused.open()
			err := recoverPartition(cl, topic, 0, len(pending), promise, pending...)
			if err == nil {
				recoveries++
				mu.Lock()
				back = back[len(pending):]
				mu.Unlock()
				continue
			}
			// Refused: some promise of the failure has not run yet;
			// its arrival wakes us.
			missing, n, ok := refusedCounts(err)
			if !ok || missing <= 0 || n != len(pending)+missing {
				t.Fatalf("recovering with %d seen: %v, want a refusal saying how many of the failed or rejected records are not seen", len(pending), err)
			}
			refusals++
		}
		wg.Wait()

		events := h.snapshot()
		if len(events) == 0 || recoveries < len(events) {
			t.Fatalf("%d failures, %d recoveries: the faults did not fail the partition", len(events), recoveries)
		}
		for range events {
			err := <-hookErrs
			if missing, n, ok := refusedCounts(err); !ok || missing != n || n == 0 {
				t.Errorf("recovering from inside the hook: %v, want a refusal with every failed record not seen", err)
			}
		}
		t.Logf("%d failures, %d recoveries, %d refused for missing promises, %d produce requests", len(events), recoveries, refusals, nreq.Load())

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

// partitionFailedLogger, when kgo logs that a partition failed, waits for
// attempted (or hookGrace) before it returns.
type partitionFailedLogger struct{ attempted <-chan struct{} }

func (partitionFailedLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }
func (l partitionFailedLogger) Log(_ kgo.LogLevel, msg string, _ ...any) {
	if strings.HasPrefix(msg, "produce partition failed") {
		select {
		case <-l.attempted:
		case <-time.After(hookGrace):
		}
	}
}

// TestRecoverFromPromiseNoHook: with no HookProducePartitionFailed, the
// promise that brings back the last of a failed batch's records recovers
// the partition with all of them, and is never refused, however its timing
// relates to kgo logging the failure (the logger waits for the attempt, in
// case kgo still had the partition busy while logging).
func TestRecoverFromPromiseNoHook(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	attempted := make(chan struct{}, 1)
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ManualFlushing(),
		kgo.WithLogger(partitionFailedLogger{attempted}),
	}, failStopOpts(nil)...)...)

	next := 0
	for round, n := range []int{1, 5, 20} {
		faultProduce(kerr.InvalidRecord, 0)(c) // the next produce request
		var (
			mu   sync.Mutex
			seen []*kgo.Record
		)
		recovered := make(chan error, 1)
		written := make(chan result, n)
		for _, r := range recs(topic, 0, next, next+n) {
			cl.TryProduce(ctx, r, func(r *kgo.Record, err error) {
				if !errors.Is(err, kerr.InvalidRecord) {
					t.Errorf("round %d: seq %s got %v, want INVALID_RECORD", round, r.Value, err)
				}
				mu.Lock()
				seen = append(seen, r)
				all := len(seen) == n
				mu.Unlock()
				if all {
					recovered <- recoverPartition(cl, topic, 0, n, func(r *kgo.Record, err error) { written <- result{r, err} }, recs(topic, 0, next, next+n)...)
					attempted <- struct{}{}
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatalf("round %d: Flush: %v", round, err)
		}
		select {
		case err := <-recovered:
			if err != nil {
				t.Fatalf("round %d: recovering from the promise with all %d records seen: %v", round, n, err)
			}
		case <-ctx.Done():
			t.Fatalf("round %d: the promises did not run", round)
		}
		for range n {
			if r := <-written; r.err != nil {
				t.Fatalf("round %d: recovered seq %s: %v", round, r.r.Value, r.err)
			}
		}
		select { // a logger that did not wait
		case <-attempted:
		default:
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
			if !errors.Is(over.err, kgo.ErrMaxBuffered) || isPartitionFailed(over.err) {
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
// record too large for a batch); recovering from inside the hook is refused,
// the failed record not being seen yet. Once its promise ran, recovering
// with it writes it.
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
				hookErr      = make(chan error, 1)
			)
			h := newFailHook()
			h.onFail = func(ev failEvent) {
				clMu.Lock()
				cl := cl
				clMu.Unlock()
				hookErr <- recoverPartition(cl, ev.topic, ev.partition, 0, nil)
				select {
				case <-promiseRan:
				case <-time.After(hookGrace):
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
				done <- outcome{err, !hookReturned.Load()}
				close(promiseRan)
			})
			var o outcome
			select {
			case o = <-done:
			case <-ctx.Done():
				t.Fatal("the failed record's promise was not called")
			}
			if !errors.Is(o.err, tc.cause) || isPartitionFailed(o.err) {
				t.Fatalf("seq 1 failed with %v, want %v", o.err, tc.cause)
			}
			checkEvent(t, h.wait(ctx, t), topic, 0, tc.cause)
			if o.early {
				t.Errorf("the failed record's promise ran before OnProducePartitionFailed returned")
			}
			checkRefused(t, <-hookErr, 1, 1)

			recoverOK(ctx, t, cl, topic, 0, 1, rec(topic, 0, 1))
			checkLog(ctx, t, c, topic, 0, []int{0, 1})
			checkHookOnce(t, h)
		})
	}
}

// TestPromisesInProduceOrder: with a hook registered, a record rejected
// while the hook runs is promised after the failed records, produced before
// it: a partition's promises run in produce order, so that an application
// can keep its failed and rejected records in the order their promises ran.
func TestPromisesInProduceOrder(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	var cl *kgo.Client
	entered, rejected := make(chan struct{}), make(chan struct{})
	h := newFailHook()
	h.onFail = func(failEvent) {
		close(entered)
		<-rejected
	}
	cl = newClient(t, c, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}, failStopOpts(h)...)...)
	produceOK(ctx, t, cl, rec(topic, 0, 0)) // metadata

	faultProduce(kerr.InvalidRecord, 0)(c)
	order := make(chan int, 3)
	promise := func(r *kgo.Record, _ error) { order <- seqOf(t, r) }
	cl.Produce(ctx, rec(topic, 0, 1), promise)
	cl.Produce(ctx, rec(topic, 0, 2), promise)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the partition did not fail")
	}
	cl.Produce(ctx, rec(topic, 0, 3), promise) // rejected while the hook runs
	close(rejected)
	var got []int
	for range 3 {
		select {
		case s := <-order:
			got = append(got, s)
		case <-ctx.Done():
			t.Fatalf("promises so far %v", got)
		}
	}
	if !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("promises ran in the order %v, want [1 2 3]", got)
	}
}
