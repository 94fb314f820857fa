package korder

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Producer is an ordered producer. It is safe for concurrent use.
type Producer struct {
	cl     *kgo.Client
	cfg    config
	decide func(*call) act
	dl     *deadLetters

	defaultTopic string
	always       bool         // kgo.DefaultProduceTopicAlways
	lingers      bool         // the client lingers or flushes manually: rounds flush it
	manual       bool         // kgo.ManualFlushing
	counted      bool         // kgo may fail any record unbuffered: manual flushing, transactions
	bound        int64        // kgo.MaxBufferedPartitionRecords
	maxBytes     int64        // kgo.MaxBufferedBytes
	attn         atomic.Int32 // what takes Produce off the no-failure path (quarantines, stops, Close)
	_            [64]byte     // what Produce reads (above) off the cache lines written while partitions fail

	seq     atomic.Uint64 // numbers the records off the no-failure path, and those that come back
	held    atomic.Int64  // the records kgo does not count buffered: kept after a failure, in Produce's slow path, or that kgo may fail unbuffered
	moved   atomic.Uint64 // handed back to kgo (see Flush)
	waiters atomic.Int32  // Flush calls waiting for held to fall to 0
	idleMu  sync.Mutex
	idle    chan struct{} // closed when held falls to 0 with waiters
	rounds  atomic.Uint64 // numbers the recovery rounds of every partition

	closing   chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once

	mu       sync.Mutex
	topics   map[string]*topic
	holdTime map[string]map[int32]time.Duration

	st         stats
	testCalled func(n int, keep, accepted bool) // tests only, set before any Produce: after a recovery call of n records, the lock released
}

// NewProducer returns a Producer around a new kgo client built from kopts, with
// kgo.FailPartitionOnProduceFailure, kgo.ProducerOnPartitionFailedRecord and a
// hook added, and kgo.MaxBufferedPartitionRecords(10000) unless kopts set it
// (0 turns it off). Nil opts are ignored.
func NewProducer(kopts []kgo.Opt, opts ...Opt) (*Producer, error) {
	p := &Producer{
		cfg:      defaultConfig(),
		topics:   map[string]*topic{},
		holdTime: map[string]map[int32]time.Duration{},
		closing:  make(chan struct{}),
		idle:     make(chan struct{}),
	}
	for _, o := range opts {
		if o != nil {
			o(&p.cfg)
		}
	}
	if err := p.cfg.validate(); err != nil {
		return nil, err
	}
	p.decide = func(c *call) act { return decide(p.cfg.policies, &p.st, c) }
	p.dl = &deadLetters{topics: map[string]bool{}, closing: p.closing}
	for _, pol := range p.cfg.policies {
		if pol.kind == policyDeadLetter {
			p.dl.topics[pol.topic] = true
		}
	}
	all := append(append([]kgo.Opt{kgo.MaxBufferedPartitionRecords(10000)}, kopts...),
		kgo.FailPartitionOnProduceFailure(), kgo.ProducerOnPartitionFailedRecord(p.handOver), kgo.WithHooks(hook{p}))
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, err
	}
	p.cl, p.dl.cl = cl, cl
	p.defaultTopic, _ = cl.OptValue(kgo.DefaultProduceTopic).(string)
	p.always, _ = cl.OptValue(kgo.DefaultProduceTopicAlways).(bool)
	linger, _ := cl.OptValue(kgo.ProducerLinger).(time.Duration)
	p.manual, _ = cl.OptValue(kgo.ManualFlushing).(bool)
	p.lingers = linger > 0 || p.manual
	p.bound, _ = cl.OptValue(kgo.MaxBufferedPartitionRecords).(int64)
	if p.dl.topics[p.defaultTopic] {
		cl.Close()
		return nil, fmt.Errorf("korder: the default produce topic %q is a dead-letter topic", p.defaultTopic)
	}
	p.maxBytes, _ = cl.OptValue(kgo.MaxBufferedBytes).(int64)
	txn := cl.OptValues(kgo.TransactionalID)
	p.counted = p.manual || len(txn) == 2 && txn[1] == true
	return p, nil
}

// Client returns the kgo client. Producing through it bypasses the Producer,
// but for a record that fails with its partition: the Producer takes it, as
// one produced before a Stop (see Resume).
func (p *Producer) Client() *kgo.Client { return p.cl }

type hook struct{ p *Producer } // the Producer's kgo.HookProducePartitionFailed: it only counts

func (h hook) OnProducePartitionFailed(f *kgo.ErrProducePartitionFailed) {
	if !h.p.dl.topics[f.Topic] { // the dead-letter writer recovers its own partitions
		h.p.st.failures.Add(1)
	}
}

// topic returns what the Producer keeps for a topic, nil if nothing.
func (p *Producer) topic(name string) *topic {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.topics[name]
}

// lockPartition returns a partition's state machine, locked, made if need be.
func (p *Producer) lockPartition(name string, id int32) *partition {
	p.mu.Lock()
	t := p.topics[name]
	if t == nil {
		t = &topic{p: p, name: name, parts: map[int32]*partition{}, quarantine: quarantine{}}
		p.topics[name] = t
	}
	t.mu.Lock()
	p.mu.Unlock()
	defer t.mu.Unlock()
	pt := t.partitionLocked(id)
	pt.mu.Lock()
	return pt
}

// Produce produces r with kgo's semantics, keeping per-partition order across
// failures. The promise is called exactly once: with nil once the record is
// written; with an error wrapping one of the package's errors and the cause;
// with the error of its own context (ctx or r.Context) if that is done when
// its turn comes, outside the policies; or with kgo's error for a usage error
// (no topic, an invalid record). A nil record, and a record to a dead-letter
// topic, fail at once. Produce blocks only where kgo's Produce does, never for
// a recovery. As with kgo, a promise must not block, nor call Flush or Close.
func (p *Producer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	ctx = cmp.Or(ctx, context.Background())
	if promise == nil {
		promise = func(*kgo.Record, error) {}
	}
	if r == nil {
		promise(nil, errors.New("korder: Produce of a nil record"))
		return
	}
	if p.always || r.Topic == "" {
		r.Topic = p.defaultTopic
	}
	if len(p.dl.topics) > 0 && p.dl.topics[r.Topic] {
		promise(r, fmt.Errorf("korder: %q is a dead-letter topic: the Producer does not produce to it", r.Topic))
		return
	}
	if p.attn.Load() != 0 {
		p.produceSlow(&pending{produced: p.seq.Add(seqStep), ctx: ctx, r: r, promise: promise})
		return
	}
	unbuffered := p.counted || r.Topic == "" || p.maxBytes > 0 && (&pending{r: r}).size() > p.maxBytes // kgo may fail it unbuffered (see counted): counted held
	if !unbuffered && r.Context == nil {
		p.cl.Produce(ctx, r, promise) // no allocation: kgo gives handOver the record if it fails
		return
	}
	p.hold(1)
	p.carry(&pending{ctx: ctx, r: r, promise: promise})
}

// produceSlow is Produce off the no-failure path; the record is held.
func (p *Producer) produceSlow(pd *pending) {
	p.hold(1)
	if p.isClosed() {
		p.finish(pd, ErrClosed)
		return
	}
	t := p.topic(pd.r.Topic)
	if q, ok := t.admit(pd.r.Key); !ok {
		p.carry(pd)
	} else if kept, full := q.pt.behind(pd, q); full {
		p.st.heldFull.Add(1)
		p.finish(pd, wrap(ErrHeldFull, q.cause))
	} else if !kept {
		p.divertKeyed(t, pd, q, func(err error) { p.finish(pd, err) })
	}
}

// carry gives kgo a record, counted held, marked (see handOver).
func (p *Producer) carry(pd *pending) {
	pd.mark()
	p.cl.Produce(pd.ctx, pd.r, func(r *kgo.Record, err error) { p.result(pd, r, err); p.hold(-1) })
}

// handOver is kgo's ProducerOnPartitionFailedRecord: a record with its caller's
// promise is the Producer's from here; its own go to their promises.
func (p *Producer) handOver(r *kgo.Record, err error, promise func(*kgo.Record, error)) {
	if ownOf(r) != nil || p.dl.topics[r.Topic] {
		promise(r, err)
		return
	}
	p.result(&pending{ctx: r.Context, r: r, promise: promise}, r, err)
}

// result takes a record's outcome: a partition failure's goes to the partition.
func (p *Producer) result(pd *pending, r *kgo.Record, err error) {
	pd.unmark()
	if fe := failure(err); fe != nil {
		pt := p.lockPartition(fe.Topic, fe.Partition)
		if pd.seq == 0 {
			pd.seq = pt.numberLocked(fe, err)
		}
		err = pt.arriveLocked(pd, fe, err)
		pt.mu.Unlock()
		if err == nil {
			return
		}
	}
	pd.promise(r, err)
}

// failure returns the partition failure err carries (a rejection's is err), if any.
func failure(err error) *kgo.ErrProducePartitionFailed {
	if fe, ok := err.(*kgo.ErrProducePartitionFailed); ok || err == nil {
		return fe
	}
	var fe *kgo.ErrProducePartitionFailed
	errors.As(err, &fe) // only here: it moves fe to the heap
	return fe
}

// finish calls the promise of a record the Producer holds, and counts it out.
func (p *Producer) finish(pd *pending, err error) {
	pd.unmark()
	pd.promise(pd.r, err)
	p.hold(-1)
}

// hold adds n to the records held, waking Flush calls if they fall to 0.
func (p *Producer) hold(n int64) {
	if p.held.Add(n) == 0 && p.waiters.Load() > 0 {
		p.idleMu.Lock()
		close(p.idle)
		p.idle = make(chan struct{})
		p.idleMu.Unlock()
	}
}

// waitHeld waits until no record is held.
func (p *Producer) waitHeld(ctx context.Context) error {
	p.waiters.Add(1)
	defer p.waiters.Add(-1)
	for {
		p.idleMu.Lock()
		idle := p.idle
		p.idleMu.Unlock()
		if p.held.Load() == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ProduceSync produces rs and returns their results, as kgo.Client.ProduceSync.
func (p *Producer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	res := make(kgo.ProduceResults, len(rs))
	var wg sync.WaitGroup
	wg.Add(len(rs))
	for i, r := range rs {
		p.Produce(ctx, r, func(r *kgo.Record, err error) {
			res[i] = kgo.ProduceResult{Record: r, Err: err}
			wg.Done()
		})
	}
	done := make(chan struct{})
	p.flushUntil(done)
	wg.Wait()
	close(done)
	return res
}

// flushUntil flushes the client until done is closed, if it lingers.
func (p *Producer) flushUntil(done chan struct{}) {
	if !p.lingers {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-done:
		case <-p.closing:
		}
		cancel()
	}()
	go p.cl.Flush(ctx) //nolint:errcheck // cancelled when done
}

func (p *Producer) isClosed() bool { return p.closed.Load() }

// Flush flushes the client and waits until every record produced so far has
// finished, including records being recovered (as with kgo, but a record whose
// context ended while Produce blocked may be promised after).
func (p *Producer) Flush(ctx context.Context) error {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go p.cl.Flush(fctx) //nolint:errcheck // nothing lingers while held records wait
	for {
		if err := p.cl.Flush(ctx); err != nil {
			return err
		}
		if err := p.waitHeld(ctx); err != nil {
			return err
		}
		m := p.moved.Load() // done once nothing is held nor buffered in kgo, nor moved between the two reads
		if p.cl.BufferedProduceRecords() == 0 && p.held.Load() == 0 && p.moved.Load() == m {
			return nil
		}
	}
}

// Close closes the Producer and its client: records it holds fail with
// ErrClosed (one kept behind a quarantined key gets its copy's outcome), those
// in kgo as kgo.Client.Close fails them, and every promise has returned (but a
// concurrent Produce's). Flush first to write them.
func (p *Producer) Close() { p.closeOnce.Do(p.close) }

func (p *Producer) close() {
	p.closed.Store(true)
	p.attn.Add(1)
	close(p.closing)
	p.mu.Lock()
	for _, t := range p.topics {
		t.mu.Lock()
		for _, pt := range t.parts {
			pt.mu.Lock()
			pt.cond.Broadcast()
			pt.mu.Unlock()
		}
		t.mu.Unlock()
	}
	p.mu.Unlock()
	p.cl.Close()
	_ = p.Flush(context.Background())
}

// Resume ends the Stop of every stopped partition of topic: records produced
// to them from now on are written, in order; those produced before still fail
// with ErrStopped. A concurrent Produce call may go either way. Resume does
// not call kgo: it may be called from an application's kgo hook.
func (p *Producer) Resume(topic string) {
	t := p.topic(topic)
	if t == nil {
		return
	}
	seq := p.seq.Load() // produced before Resume
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, pt := range t.parts {
		pt.mu.Lock()
		if pt.stopped != nil {
			pt.resumeLocked(seq)
		}
		pt.mu.Unlock()
	}
}

// ReleaseQuarantine ends the quarantine of key in topic.
func (p *Producer) ReleaseQuarantine(topic string, key []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.topics[topic]
	if t == nil || !t.release(key) {
		return
	}
	t.mu.Lock()
	t.forgetLocked()
	t.mu.Unlock()
	p.logf(kgo.LogLevelInfo, "korder: released quarantined key", "topic", topic, "key", string(key))
}

// Quarantined returns the keys quarantined in topic, sorted.
func (p *Producer) Quarantined(topic string) [][]byte {
	t := p.topic(topic)
	if t == nil {
		return nil
	}
	t.amu.Lock()
	defer t.amu.Unlock()
	return t.quarantine.keys()
}

func (p *Producer) logf(level kgo.LogLevel, msg string, kvs ...any) {
	if l, _ := p.cl.OptValue(kgo.WithLogger).(kgo.Logger); l != nil && l.Level() >= level {
		l.Log(level, msg, kvs...)
	}
}

type stats struct{ failures, retries, isolations, deadLettered, dropped, stopped, heldFull, canceled atomic.Int64 }

// Stats counts what the Producer did. Counts are of records unless noted.
type Stats struct {
	Failures     int64 // partition or topic failures kgo reported (hook calls, MaxBufferedPartitionRecords' too; not those of dead-letter topics)
	Retries      int64 // records produced again by Retry (the first record of each round)
	Isolations   int64 // records found failing on their own (a record-level cause), and settled
	DeadLettered int64 // records diverted to a dead-letter topic
	Dropped      int64 // records dropped by Drop
	Stopped      int64 // records failed with ErrStopped: by Stop, produced while stopped, or of a stopped key
	HeldFull     int64 // records failed with ErrHeldFull (MaxHeld, MaxHeldBytes)
	Canceled     int64 // records settled with their own context's error, outside the policies
	Quarantined  int64 // keys quarantined now
	Held         int64 // failed and rejected records kept now, to settle or produce again, or produced again and not yet written
	HeldBytes    int64 // their bytes (see MaxHeldBytes)

	PartitionHoldTime map[string]map[int32]time.Duration // per topic and partition (-1: the topic), the total time the partition was failed or recovering
}

func addHoldTime(m map[string]map[int32]time.Duration, topic string, part int32, d time.Duration) {
	if m[topic] == nil {
		m[topic] = map[int32]time.Duration{}
	}
	m[topic][part] += d
}

// Stats returns a snapshot of the Producer's counters.
func (p *Producer) Stats() Stats {
	st := &p.st
	s := Stats{Failures: st.failures.Load(), Retries: st.retries.Load(), Isolations: st.isolations.Load(),
		DeadLettered: st.deadLettered.Load(), Dropped: st.dropped.Load(), Stopped: st.stopped.Load(),
		HeldFull: st.heldFull.Load(), Canceled: st.canceled.Load(), PartitionHoldTime: map[string]map[int32]time.Duration{}}
	p.mu.Lock()
	defer p.mu.Unlock()
	for topic, m := range p.holdTime {
		s.PartitionHoldTime[topic] = maps.Clone(m)
	}
	for _, t := range p.topics {
		t.mu.Lock()
		for _, pt := range t.parts {
			pt.mu.Lock()
			s.Held += int64(pt.q.len() + len(pt.back) + len(pt.inRound) + len(pt.later))
			s.HeldBytes += pt.bytes
			addHoldTime(s.PartitionHoldTime, t.name, pt.id, time.Since(pt.since))
			pt.mu.Unlock()
		}
		t.amu.Lock()
		s.Quarantined += int64(len(t.quarantine.keys()))
		t.amu.Unlock()
		t.mu.Unlock()
	}
	return s
}
