package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// done by hand, as in the README. Records are produced as they come: once a
// partition fails, kgo rejects its new records, and every failed or rejected
// record comes back to its promise carrying the failure, which collects it.
// A goroutine recovers each failure with its records, in produce order,
// calling again while kgo refuses because a promise has not returned. A
// record that failed before (a poison record fails its batch each time) goes
// first and alone, keeping the partition failed behind it, until it is
// written or the application gives up on it (cfg.attempts failures).
func runFailStop(ctx context.Context, w *workload, c *kfake.Cluster, t *tracker) error {
	cl, err := kgo.NewClient(append(clientOpts(w.cfg, c, t), kgo.FailPartitionOnProduceFailure())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	a := &manual{w: w, t: t, cl: cl, parts: make([]manualPart, w.cfg.partitions), failures: make([]int, w.cfg.records)}
	for i := range a.parts {
		a.parts[i].alone = -1
	}
	recCtx, stop := context.WithCancel(ctx)
	defer stop()
	go a.recoverLoop(recCtx)

	if err := produceAll(ctx, w, t, func(id int) { cl.Produce(ctx, w.record(id), a.promise) }); err != nil {
		return err
	}
	if err := t.wait(ctx); err != nil {
		return err
	}
	return cl.Flush(ctx)
}

type manual struct {
	w  *workload
	t  *tracker
	cl *kgo.Client

	mu       sync.Mutex // taken by every promise: see recoverLocked
	parts    []manualPart
	failures []int // per record: the times kgo failed it (rejections not counted)
}

type manualPart struct {
	failure *kgo.ErrProducePartitionFailed // to recover; nil if none
	ids     []int                          // its failed and rejected records, to produce again
	alone   int                            // a record recovered alone, until its promise ran; -1 if none
	retryAt time.Time                      // a record that failed again waits for the backoff
}

// promise is every record's promise. Promises run on kgo's own goroutine,
// one at a time, in produce order per partition.
func (a *manual) promise(r *kgo.Record, err error) {
	id, _, _, _ := parse(r.Value)
	a.mu.Lock()
	defer a.mu.Unlock()
	p := &a.parts[r.Partition]
	if p.alone == id {
		p.alone = -1
	}
	var f *kgo.ErrProducePartitionFailed
	switch {
	case err == nil:
		a.t.settle(id, ok)
	case !errors.As(err, &f): // kgo failed it alone: never here
		a.t.fail(fmt.Errorf("fail-stop: record %d failed without its partition: %w", id, err))
	default:
		p.failure = f
		if err != error(f) { // failed, not merely rejected
			if a.failures[id]++; a.failures[id] > 1 {
				p.retryAt = time.Now().Add(a.w.cfg.backoff)
			}
		}
		if a.failures[id] >= a.w.cfg.attempts {
			a.t.settle(id, gaveUp) // its failure is recovered all the same
		} else {
			p.ids = append(p.ids, id)
		}
	}
}

// recoverLoop tries to recover every failed partition every millisecond.
func (a *manual) recoverLoop(ctx context.Context) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a.mu.Lock()
		for i := range a.parts {
			a.recoverLocked(&a.parts[i])
		}
		a.mu.Unlock()
	}
}

// recoverLocked recovers p's failure with its records in produce order (ids
// are produce order), or, while the first of them has failed again, with
// that one alone. a.mu is held across the call: a record kgo rejected
// meanwhile has a promise waiting for a.mu, so kgo refuses the recovery
// (ErrRecoveryPending) rather than accept it without that record.
func (a *manual) recoverLocked(p *manualPart) {
	if p.failure == nil || p.alone >= 0 || time.Now().Before(p.retryAt) {
		return
	}
	slices.Sort(p.ids)
	ids := p.ids
	alone := len(ids) > 1 && a.failures[ids[0]] > 1
	if alone {
		ids = ids[:1]
	}
	rs := make([]*kgo.Record, len(ids))
	for i, id := range ids {
		rs[i] = a.w.record(id)
	}
	var next *kgo.ErrProducePartitionFailed // alone: the failure the partition stays failed with
	var err error
	if alone {
		next, err = a.cl.RecoverProducePartitionKeepFailed(p.failure, a.promise, rs...)
	} else {
		err = a.cl.RecoverProducePartition(p.failure, a.promise, rs...)
	}
	switch {
	case errors.Is(err, kgo.ErrRecoveryPending): // a promise of it is returning: next tick
		return
	case err != nil:
		a.t.fail(fmt.Errorf("fail-stop: recovering %s/%d: %w", p.failure.Topic, p.failure.Partition, err))
	}
	if alone {
		p.alone = ids[0]
	}
	p.failure, p.ids = next, slices.Delete(p.ids, 0, len(ids)) // ids is p.ids[:len(ids)]
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
