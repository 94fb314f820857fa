package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
// done by hand, as in the README. Once a partition fails, the application
// holds its new records and collects its failed and rejected records from
// their promises, counting them (seen); then RecoverProducePartition buffers
// them and the held ones, in produce order, at the partition's front, and
// un-fails it. A call refused because promises are missing is made again
// once they arrived. If recovered records fail again (a poison record in
// their batch), they go one at a time, with keepFailed so that the partition
// stays failed behind each, until the application gives up on the record
// that keeps failing (cfg.attempts failures).
func runFailStop(ctx context.Context, w *workload, c *kfake.Cluster, t *tracker) error {
	a := &failStopApp{w: w, t: t, ctx: ctx, wake: make(chan struct{}, 1), attempts: make([]int, w.cfg.records)}
	for range w.cfg.partitions {
		a.parts = append(a.parts, &fsPart{awaiting: -1})
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

	mu       sync.Mutex
	parts    []*fsPart
	attempts []int // per record: the times kgo failed it (not counting rejections)

	hookMu sync.Mutex
	hooked []int32
	wake   chan struct{}
}

type fsPart struct {
	failed   bool      // the partition failed: hold new records, recover it
	seen     int       // failed or rejected promises since the last recovery call
	failures []int     // failed or rejected records to produce again, in any order
	held     []int     // records produced while failed, in order
	awaiting int       // the record recovered alone, until its promise ran; -1 if none
	retryAt  time.Time // a record that failed again waits for the backoff
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
	a.cl.Produce(a.ctx, a.w.record(id), a.promise)
}

// promise is every record's promise. Promises run on kgo's own goroutine,
// one at a time, in produce order per partition.
func (a *failStopApp) promise(r *kgo.Record, err error) {
	id, _, _, _ := parse(r.Value)
	a.mu.Lock()
	defer a.mu.Unlock()
	ps := a.parts[a.w.part[id]]
	if ps.awaiting == id {
		ps.awaiting = -1
		a.signal() // the next part of the recovery
	}
	if err == nil {
		a.t.settle(id, ok)
		return
	}
	// The hook may not have run yet: hold the partition now.
	ps.failed = true
	ps.seen++
	if !errors.Is(err, kgo.ErrProducePartitionFailed) { // not merely rejected
		a.attempts[id]++
		if a.attempts[id] > 1 {
			ps.retryAt = time.Now().Add(a.w.cfg.backoff)
		}
	}
	if a.attempts[id] >= a.w.cfg.attempts {
		a.t.settle(id, gaveUp) // seen all the same
	} else {
		ps.failures = append(ps.failures, id)
	}
	a.signal()
}

// coordinate recovers failed partitions as their promises arrive.
func (a *failStopApp) coordinate(ctx context.Context) {
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
			if ps.failed && ps.awaiting < 0 {
				a.recoverLocked(int32(p), ps)
			}
		}
		a.mu.Unlock()
	}
}

// recoverLocked calls RecoverProducePartition for partition p with its
// failed and held records in produce order (ids are produce order), or,
// while the first of them has failed again, with that one alone.
func (a *failStopApp) recoverLocked(p int32, ps *fsPart) {
	if d := time.Until(ps.retryAt); d > 0 {
		time.AfterFunc(d, a.signal)
		return
	}
	rs := append(slices.Sorted(slices.Values(ps.failures)), ps.held...)
	keepFailed := false
	if len(rs) > 1 && a.attempts[rs[0]] > 1 {
		rs, keepFailed = rs[:1], true
	}
	recs := make([]*kgo.Record, len(rs))
	for i, id := range rs {
		recs[i] = a.w.record(id)
	}
	err := a.cl.RecoverProducePartition(topic, p, ps.seen, keepFailed, a.promise, recs...)
	if err != nil {
		// Refused: promises are missing, and their arrival wakes us.
		if !strings.Contains(err.Error(), "not seen") {
			a.t.fail(fmt.Errorf("fail-stop: recovering partition %d: %w", p, err))
		}
		return
	}
	ps.seen = 0
	ps.failures = slices.DeleteFunc(ps.failures, func(id int) bool { return slices.Contains(rs, id) })
	ps.held = slices.DeleteFunc(ps.held, func(id int) bool { return slices.Contains(rs, id) })
	if keepFailed {
		ps.awaiting = rs[0]
	} else {
		ps.failed = false
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
