// Package korder is an ordered producer on top of franz-go's kgo: it keeps
// per-partition order across produce failures by carrying out the recovery
// protocol of kgo.FailPartitionOnProduceFailure for you.
//
// With plain kgo, a record that fails (retries or the delivery timeout run
// out, a non-retryable broker error) is reported asynchronously, after
// records produced later may already be written; producing it again puts it
// behind them. kgo.FailPartitionOnProduceFailure stops the damage: the
// partition rejects every later record until it is recovered. Recovering by
// hand means holding your own pipeline, waiting for everything in flight,
// collecting the failed and rejected records in order, recovering, producing
// them again, and resuming. A Producer does all of that:
//
//   - When a topic has a failure, new Produce calls for that topic are held,
//     in order, while other topics keep flowing.
//   - Once every record already handed to kgo for the topic has finished,
//     the failed and rejected records are run through the policies, in the
//     order they were produced: Retry, Isolate, DeadLetter, Drop or Stop.
//   - The partitions are recovered, the records the policies kept are
//     produced again in order, and the held records are released in order.
//
// The guarantee: for every partition, the records written are exactly the
// records produced to it, in Produce call order (per producing goroutine,
// as with kgo), minus the records a policy explicitly diverted or dropped.
// Every promise is called exactly once, with the final outcome.
//
// Holds are per topic: kgo picks a record's partition inside Produce, with
// a pluggable partitioner, so the producer cannot know which partition a
// held record would go to. A failure on one partition therefore briefly
// holds the whole topic.
package korder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	// ErrDeadLettered is the error (wrapping the cause) a record's promise
	// gets when DeadLetter diverted it to the dead-letter topic.
	ErrDeadLettered = errors.New("korder: record diverted to the dead-letter topic")

	// ErrDropped is the error (wrapping the cause) a record's promise gets
	// when Drop dropped it.
	ErrDropped = errors.New("korder: record dropped after a produce failure")

	// ErrStopped is the error (wrapping the cause) a record's promise gets
	// when Stop stopped its topic: the record that failed, every record
	// after it, and every record produced to the topic until Resume.
	ErrStopped = errors.New("korder: topic stopped after a produce failure")

	// ErrClosed is the error a record's promise gets if the Producer is
	// closed before the record could be produced. As with
	// kgo.ErrClientClosed, which it then wraps, a record whose produce
	// request was in flight when the Producer closed may have been written
	// anyway (to its topic, or to the dead-letter topic): the outcome of a
	// request in flight at Close is unknown.
	ErrClosed = errors.New("korder: producer closed")
)

// Producer is an ordered producer. It is safe for concurrent use.
type Producer struct {
	cl  *kgo.Client
	cfg config

	// fast is a copy-on-write snapshot of topics for the lock-free
	// Produce path; topics changes only when a topic is first seen.
	fast atomic.Pointer[map[string]*topicState]
	last atomic.Pointer[topicState] // the last topic fastTopic found

	mu     sync.Mutex
	topics map[string]*topicState
	closed bool
	stats  Stats
}

// pending is one record produced through the Producer, until its promise is
// called.
type pending struct {
	seq      uint64
	ctx      context.Context
	r        *kgo.Record
	promise  func(*kgo.Record, error)
	err      error // the last error kgo failed the record with
	attempts int   // produce attempts during recovery
}

type topicState struct {
	name string

	// While slow is false (no recovery, hold, stop or quarantine, and not
	// closed), Produce hands records to kgo without taking the Producer's
	// mutex: it adds to inflight, then checks slow again. A recovery sets
	// slow, then starts only once inflight is zero, so a record either
	// sees slow and takes the locked path, or is counted before the
	// recovery can start.
	slow     atomic.Bool
	inflight atomic.Int64  // records handed to kgo whose promise has not run
	seq      atomic.Uint64 // Produce order within the topic

	failed []*pending // failed or rejected since the failure, in any order
	held   []*pending // produced while the topic recovers, in order

	recovering bool          // a failure was seen: hold new records
	running    bool          // a recovery goroutine is at work
	stopped    error         // Stop: fail everything until Resume
	space      chan struct{} // closed when held shrinks or the state changes
	holdStart  time.Time

	quarantined map[string]error // keys whose records go to the dead-letter topic
}

// NewProducer returns a Producer around a new kgo client built from kopts,
// with kgo.FailPartitionOnProduceFailure and the Producer's failure hook
// added. opts configure the Producer; without WithPolicies, the policies are
// Retry(3, 100ms) then Stop.
func NewProducer(kopts []kgo.Opt, opts ...Opt) (*Producer, error) {
	p := &Producer{
		cfg:    defaultConfig(),
		topics: make(map[string]*topicState),
	}
	for _, o := range opts {
		o(&p.cfg)
	}
	if err := p.cfg.validate(); err != nil {
		return nil, err
	}
	all := append(slices.Clip(kopts), kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(hook{p}))
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, err
	}
	p.cl = cl
	return p, nil
}

// Client returns the underlying kgo client. Producing through it directly
// bypasses the Producer's ordering protocol.
func (p *Producer) Client() *kgo.Client { return p.cl }

// hook is the Producer's kgo.HookProducePartitionFailed: it marks the topic
// as recovering at once, so that the next Produce call for it is held. It
// runs on a kgo goroutine and only takes the Producer's mutex briefly.
type hook struct{ p *Producer }

func (h hook) OnProducePartitionFailed(topic string, partition int32, err error) {
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := p.topicLocked(topic)
	p.stats.Failures++
	p.logf(kgo.LogLevelWarn, "korder: produce failed, holding the topic until its records are recovered", "topic", topic, "partition", partition, "err", err)
	p.beginRecoveryLocked(ts)
	p.maybeRecoverLocked(ts)
}

func (p *Producer) topicLocked(topic string) *topicState {
	ts := p.topics[topic]
	if ts == nil {
		ts = &topicState{name: topic, space: make(chan struct{})}
		ts.slow.Store(p.closed)
		p.topics[topic] = ts
		fast := make(map[string]*topicState, len(p.topics))
		for name, ts := range p.topics {
			fast[name] = ts
		}
		p.fast.Store(&fast)
	}
	return ts
}

func (p *Producer) beginRecoveryLocked(ts *topicState) {
	if !ts.recovering {
		ts.recovering = true
		ts.holdStart = time.Now()
	}
	p.updateSlowLocked(ts)
}

// updateSlowLocked sets whether Produce must take the locked path for ts.
func (p *Producer) updateSlowLocked(ts *topicState) {
	ts.slow.Store(ts.recovering || ts.running || ts.stopped != nil || len(ts.held) > 0 || len(ts.quarantined) > 0 || p.closed)
}

// wakeLocked wakes everything waiting on the topic's state.
func (ts *topicState) wakeLocked() {
	close(ts.space)
	ts.space = make(chan struct{})
}

// Produce produces r with kgo's semantics, keeping per-partition order
// across failures: if r's topic is recovering from a failure, r is held and
// produced, in order, once the topic recovers. If the topic's held queue is
// full (MaxHeld), Produce blocks until there is room or ctx is done, in
// which case the promise is called with ctx's error. The promise is called
// exactly once: with nil once the record is written, or with an error that
// wraps ErrDeadLettered, ErrDropped, ErrStopped or ErrClosed and the cause,
// or with kgo's own error for failures that are not produce failures (for
// example an invalid record).
func (p *Producer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if ctx == nil {
		ctx = context.Background()
	}
	if promise == nil {
		promise = func(*kgo.Record, error) {}
	}
	if r.Topic == "" {
		if def, _ := p.cl.OptValue(kgo.DefaultProduceTopic).(string); def != "" {
			r.Topic = def
		}
	}

	// The fast path: nothing is wrong with the topic.
	if ts := p.fastTopic(r.Topic); ts != nil && !ts.slow.Load() {
		ts.inflight.Add(1)
		if !ts.slow.Load() {
			seq := ts.seq.Add(1)
			p.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				if err == nil || !isProduceFailure(err) {
					if ts.inflight.Add(-1) == 0 && ts.slow.Load() {
						p.mu.Lock()
						p.maybeRecoverLocked(ts)
						p.mu.Unlock()
					}
					promise(r, closedErr(err))
					return
				}
				p.finished(ts, &pending{seq: seq, ctx: ctx, r: r, promise: promise}, err)
			})
			return
		}
		// A recovery began: back out and take the locked path.
		if ts.inflight.Add(-1) == 0 {
			p.mu.Lock()
			p.maybeRecoverLocked(ts)
			p.mu.Unlock()
		}
	}

	pd := &pending{ctx: ctx, r: r, promise: promise}
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			promise(r, ErrClosed)
			return
		}
		ts := p.topicLocked(r.Topic)
		if cause := ts.stopped; cause != nil {
			p.mu.Unlock()
			promise(r, fmt.Errorf("%w: %w", ErrStopped, cause))
			return
		}
		if cause, ok := ts.quarantined[string(r.Key)]; ok && r.Key != nil && !ts.recovering && len(ts.held) == 0 {
			pd.seq = ts.seq.Add(1)
			p.mu.Unlock()
			p.deadLetterQuarantined(pd, cause, nil)
			return
		}
		if !ts.recovering && len(ts.held) == 0 {
			pd.seq = ts.seq.Add(1)
			ts.inflight.Add(1)
			p.mu.Unlock()
			p.cl.Produce(ctx, r, func(_ *kgo.Record, err error) { p.finished(ts, pd, err) })
			return
		}
		if len(ts.held) < p.cfg.maxHeld {
			pd.seq = ts.seq.Add(1)
			ts.held = append(ts.held, pd)
			p.updateSlowLocked(ts)
			p.mu.Unlock()
			return
		}
		space := ts.space
		p.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			promise(r, ctx.Err())
			return
		}
		p.mu.Lock()
	}
}

// fastTopic returns the topic's state for the lock-free path, or nil if
// the topic was never seen. The last topic looked up is cached, which saves
// the map lookup when one topic is produced to at a time.
func (p *Producer) fastTopic(topic string) *topicState {
	if ts := p.last.Load(); ts != nil && ts.name == topic {
		return ts
	}
	fast := p.fast.Load()
	if fast == nil {
		return nil
	}
	ts := (*fast)[topic]
	if ts != nil {
		p.last.Store(ts)
	}
	return ts
}

// finished is the kgo promise of every record the Producer hands to kgo
// outside recovery.
func (p *Producer) finished(ts *topicState, pd *pending, err error) {
	p.mu.Lock()
	ts.inflight.Add(-1)
	if err == nil || !isProduceFailure(err) || p.closed {
		if err != nil && p.closed && !errors.Is(err, kgo.ErrClientClosed) {
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		p.maybeRecoverLocked(ts)
		p.mu.Unlock()
		pd.promise(pd.r, closedErr(err))
		return
	}
	pd.err = err
	ts.failed = append(ts.failed, pd)
	p.beginRecoveryLocked(ts)
	p.maybeRecoverLocked(ts)
	p.mu.Unlock()
}

// closedErr wraps kgo.ErrClientClosed, which the Producer's own Close
// causes, in ErrClosed.
func closedErr(err error) error {
	if errors.Is(err, kgo.ErrClientClosed) && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// isProduceFailure returns whether err is a produce failure that the
// recovery protocol handles, rather than something that recovering and
// producing again cannot change.
func isProduceFailure(err error) bool {
	switch {
	case errors.Is(err, kgo.ErrClientClosed),
		errors.Is(err, kgo.ErrAborting):
		return false
	}
	return true
}

// maybeRecoverLocked starts the topic's recovery once it is recovering and
// nothing it handed to kgo is still in flight.
func (p *Producer) maybeRecoverLocked(ts *topicState) {
	if !ts.recovering || ts.running || ts.inflight.Load() > 0 || p.closed {
		ts.wakeLocked()
		return
	}
	ts.running = true
	p.updateSlowLocked(ts)
	go p.recover(ts)
}

// Flush waits until every record produced so far has finished: written,
// diverted, dropped or failed, including records held or being recovered.
func (p *Producer) Flush(ctx context.Context) error {
	for {
		// Wait out every recovery, then flush kgo. A record that fails
		// while kgo flushes starts a recovery before its promise
		// returns, so if none is running after the flush, we are done.
		p.mu.Lock()
		var wait chan struct{}
		for _, ts := range p.topics {
			if ts.recovering || ts.running || len(ts.held) > 0 {
				wait = ts.space
				break
			}
		}
		p.mu.Unlock()
		if wait != nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := p.cl.Flush(ctx); err != nil {
			return err
		}
		p.mu.Lock()
		busy := false
		for _, ts := range p.topics {
			busy = busy || ts.recovering || ts.running || len(ts.held) > 0
		}
		p.mu.Unlock()
		if !busy {
			return nil
		}
	}
}

// Close closes the Producer and its client. Records that are held or being
// recovered and have not been produced again fail with ErrClosed; records
// in kgo fail as kgo.Client.Close fails them. Every promise is called before
// Close returns. Close does not wait for buffered records: call Flush first
// for that.
func (p *Producer) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var held []*pending
	for _, ts := range p.topics {
		held = append(held, ts.held...)
		ts.held = nil
		p.updateSlowLocked(ts)
		ts.wakeLocked()
	}
	p.mu.Unlock()
	for _, pd := range held {
		pd.promise(pd.r, ErrClosed)
	}
	p.cl.Close()
	// Recoveries see closed and the closed client, fail what they hold
	// with ErrClosed and end; failed records no recovery will pick up fail
	// here. Wait until every promise has run.
	for {
		p.mu.Lock()
		var (
			wait   chan struct{}
			failed []*pending
		)
		for _, ts := range p.topics {
			if !ts.running && ts.inflight.Load() == 0 {
				failed = append(failed, ts.failed...)
				ts.failed = nil
			}
			if ts.running || ts.inflight.Load() > 0 {
				wait = ts.space
			}
		}
		p.mu.Unlock()
		for _, pd := range failed {
			pd.promise(pd.r, fmt.Errorf("%w: %w", ErrClosed, pd.err))
		}
		if wait == nil {
			return
		}
		<-wait
	}
}

// Resume ends a Stop of topic: records produced to it are produced again.
// Resuming a topic that is not stopped is a no-op.
func (p *Producer) Resume(topic string) {
	p.mu.Lock()
	ts := p.topics[topic]
	stopped := ts != nil && ts.stopped != nil
	p.mu.Unlock()
	if !stopped {
		return
	}
	// Recover kgo first, while the topic is still stopped: a stopped
	// topic hands nothing to kgo, so no record produced after the Resume
	// can be rejected by a failed partition, and then be overtaken by a
	// later record produced once the partition is recovered.
	p.recoverKgo(topic)
	p.mu.Lock()
	resumed := ts.stopped != nil // not by a concurrent Resume
	if resumed {
		ts.stopped = nil
		p.updateSlowLocked(ts)
		ts.wakeLocked()
	}
	p.mu.Unlock()
	if resumed {
		p.logf(kgo.LogLevelInfo, "korder: resumed stopped topic", "topic", topic)
	}
}

// ReleaseQuarantine ends the quarantine of key in topic: later records with
// the key are produced to topic again. Releasing a key that is not
// quarantined is a no-op.
func (p *Producer) ReleaseQuarantine(topic string, key []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ts := p.topics[topic]; ts != nil {
		if _, ok := ts.quarantined[string(key)]; ok {
			delete(ts.quarantined, string(key))
			p.updateSlowLocked(ts)
			p.stats.Quarantined--
			p.logf(kgo.LogLevelInfo, "korder: released quarantined key", "topic", topic, "key", string(key))
		}
	}
}

// Quarantined returns the keys quarantined in topic.
func (p *Producer) Quarantined(topic string) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys [][]byte
	if ts := p.topics[topic]; ts != nil {
		for k := range ts.quarantined {
			keys = append(keys, []byte(k))
		}
	}
	slices.SortFunc(keys, func(a, b []byte) int { return slices.Compare(a, b) })
	return keys
}

func (p *Producer) logf(level kgo.LogLevel, msg string, kvs ...any) {
	if l, _ := p.cl.OptValue(kgo.WithLogger).(kgo.Logger); l != nil && l.Level() >= level {
		l.Log(level, msg, kvs...)
	}
}
