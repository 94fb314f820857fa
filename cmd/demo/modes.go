package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// A mode produces the workload to c and settles every record in t. It
// returns once everything it started is closed.
type mode struct {
	name string
	run  func(ctx context.Context, w *workload, c *kfake.Cluster, t *tracker) error
}

var modes = []mode{
	{"upstream-style", runUpstream},
	{"fail-stop + manual", runFailStop},
	{"korder", runKorder},
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// runUpstream is what an application does with kgo as it is upstream
// (FailPartitionOnProduceFailure off): when a promise reports an error, it
// produces the record again after a short backoff, and gives up (and knows
// it) after cfg.attempts attempts. Meanwhile it keeps producing.
func runUpstream(ctx context.Context, w *workload, c *kfake.Cluster, t *tracker) error {
	cl, err := kgo.NewClient(clientOpts(w.cfg, c, t)...)
	if err != nil {
		return err
	}
	defer cl.Close()

	var produce func(id, attempt int)
	produce = func(id, attempt int) {
		cl.Produce(ctx, w.record(id), func(_ *kgo.Record, err error) {
			switch {
			case err == nil:
				t.settle(id, ok)
			case attempt >= w.cfg.attempts:
				t.settle(id, gaveUp)
			default:
				// Not from the promise itself: Produce may block.
				time.AfterFunc(w.cfg.backoff, func() { produce(id, attempt+1) })
			}
		})
	}
	if err := produceAll(ctx, w, t, func(id int) { produce(id, 1) }); err != nil {
		return err
	}
	if err := t.wait(ctx); err != nil {
		return err
	}
	return cl.Flush(ctx)
}

// runFailStop is the recovery protocol of kgo.FailPartitionOnProduceFailure
// done by hand, as in the README: on a failure of a partition, hold the
// partition's new records, wait until every record handed to kgo for it has
// had its promise called, recover it, produce the failed and rejected
// records again one at a time, in order (giving up on a record after
// cfg.attempts attempts), then release the held records in order.
func runFailStop(ctx context.Context, w *workload, c *kfake.Cluster, t *tracker) error {
	a := &failStopApp{w: w, t: t, ctx: ctx, wake: make(chan struct{}, 1)}
	for range w.cfg.partitions {
		a.parts = append(a.parts, &fsPart{})
	}
	cl, err := kgo.NewClient(append(clientOpts(w.cfg, c, t, (*fsHook)(a)), kgo.FailPartitionOnProduceFailure())...)
	if err != nil {
		return err
	}
	a.cl = cl
	coordCtx, stop := context.WithCancel(ctx)
	var coord sync.WaitGroup
	coord.Go(func() { a.coordinate(coordCtx) })
	defer func() {
		stop()
		coord.Wait()
		cl.Close()
	}()

	if err := produceAll(ctx, w, t, a.submit); err != nil {
		return err
	}
	if err := t.wait(ctx); err != nil {
		return err
	}
	return cl.Flush(ctx)
}

type failStopApp struct {
	w   *workload
	t   *tracker
	cl  *kgo.Client
	ctx context.Context

	mu    sync.Mutex
	parts []*fsPart

	hookMu sync.Mutex
	hooked []int32
	wake   chan struct{}
}

type fsPart struct {
	failed     bool  // hold new records: the partition failed
	recovering bool  // a recovery goroutine owns the partition
	inflight   int   // records handed to kgo whose promise has not run
	failures   []int // failed or rejected records, in any order
	held       []int // records produced while failed, in order

	quiet atomic.Bool // the recovery expects failures of its own: the hook ignores them
}

// fsHook is the kgo.HookProducePartitionFailed. It runs on a kgo goroutine,
// possibly inside Produce while the app's mutex is held, so it only takes a
// leaf lock and wakes the coordinator.
type fsHook failStopApp

func (h *fsHook) OnProducePartitionFailed(tp string, partition int32, err error) {
	a := (*failStopApp)(h)
	if tp != topic {
		return
	}
	if partition < 0 || int(partition) >= len(a.parts) {
		a.t.fail(fmt.Errorf("fail-stop: unexpected failure of %s/%d: %w", tp, partition, err))
		return
	}
	if a.parts[partition].quiet.Load() {
		return
	}
	a.hookMu.Lock()
	a.hooked = append(a.hooked, partition)
	a.hookMu.Unlock()
	a.signal()
}

func (a *failStopApp) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// submit hands a new record to kgo, or holds it if its partition failed.
func (a *failStopApp) submit(id int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps := a.parts[a.w.part[id]]
	if ps.failed {
		ps.held = append(ps.held, id)
		return
	}
	a.handoffLocked(id)
}

// handoffLocked produces id with a.mu held, which fixes the order of the
// partition. Produce does not block here (the window is far below kgo's
// MaxBufferedRecords), and promises run on kgo's own goroutine.
func (a *failStopApp) handoffLocked(id int) {
	a.parts[a.w.part[id]].inflight++
	a.cl.Produce(a.ctx, a.w.record(id), func(_ *kgo.Record, err error) { a.promise(id, err) })
}

func (a *failStopApp) promise(id int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps := a.parts[a.w.part[id]]
	ps.inflight--
	if err == nil {
		a.t.settle(id, ok)
	} else {
		// The hook may not have run yet: hold the partition now.
		ps.failed = true
		ps.failures = append(ps.failures, id)
	}
	if ps.failed && ps.inflight == 0 {
		a.signal()
	}
}

// coordinate starts a recovery of every failed partition with nothing in
// flight.
func (a *failStopApp) coordinate(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
		}
		a.hookMu.Lock()
		hooked := a.hooked
		a.hooked = nil
		a.hookMu.Unlock()

		a.mu.Lock()
		for _, p := range hooked {
			a.parts[p].failed = true
		}
		for p, ps := range a.parts {
			if ps.failed && ps.inflight == 0 && !ps.recovering {
				ps.recovering = true
				ps.quiet.Store(true)
				wg.Go(func() { a.recover(ctx, int32(p)) })
			}
		}
		a.mu.Unlock()
	}
}

// recover runs the recovery of partition p: nothing of p is in flight, and
// new records of p are held until it ends.
func (a *failStopApp) recover(ctx context.Context, p int32) {
	ps := a.parts[p]
	a.mu.Lock()
	failures := ps.failures
	ps.failures = nil
	a.mu.Unlock()
	slices.Sort(failures) // ids are produce order

	recoverP := func() { a.cl.RecoverProducePartitions(map[string][]int32{topic: {p}}) }
	for _, id := range failures {
		for attempt := 2; ; attempt++ { // the first attempt is the one that failed
			recoverP()
			err := a.cl.ProduceSync(ctx, a.w.record(id)).FirstErr()
			if err == nil {
				a.t.settle(id, ok)
				break
			}
			if attempt >= a.w.cfg.attempts || ctx.Err() != nil {
				a.t.settle(id, gaveUp)
				break
			}
			sleepCtx(ctx, a.w.cfg.backoff)
		}
	}
	recoverP()

	a.mu.Lock()
	defer a.mu.Unlock()
	ps.quiet.Store(false)
	ps.recovering, ps.failed = false, false
	held := ps.held
	ps.held = nil
	for _, id := range held {
		a.handoffLocked(id)
	}
}

// runKorder produces through a korder.Producer, which runs the recovery
// protocol itself: Retry, then Isolate a batch failure down to its records,
// then divert what still fails to the dead-letter topic.
func runKorder(ctx context.Context, w *workload, c *kfake.Cluster, t *tracker) error {
	p, err := korder.NewProducer(clientOpts(w.cfg, c, t), korder.WithPolicies(
		korder.Retry(w.cfg.attempts-1, w.cfg.backoff),
		korder.Isolate(),
		korder.DeadLetter(dlqTopic),
	))
	if err != nil {
		return err
	}
	defer p.Close()

	submit := func(id int) {
		p.Produce(ctx, w.record(id), func(_ *kgo.Record, err error) {
			switch {
			case err == nil:
				t.settle(id, ok)
			case errors.Is(err, korder.ErrDeadLettered):
				t.settle(id, deadLettered)
			default:
				t.settle(id, gaveUp)
			}
		})
	}
	if err := produceAll(ctx, w, t, submit); err != nil {
		return err
	}
	if err := t.wait(ctx); err != nil {
		return err
	}
	return p.Flush(ctx)
}
