package korder

import (
	"context"
	"errors"
	"fmt"
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
	always       bool  // kgo.DefaultProduceTopicAlways
	lingers      bool  // the client lingers or flushes manually: rounds flush it
	manual       bool  // kgo.ManualFlushing
	counted      bool  // kgo may fail any record unbuffered: manual flushing, transactions
	bound        int64 // kgo.MaxBufferedPartitionRecords
	maxBytes     int64 // kgo.MaxBufferedBytes

	// seq numbers the records produced; attn counts what takes Produce off
	// the no-failure path (holds, quarantines, Close). Both are read on it.
	seq  atomic.Uint64
	attn atomic.Int32

	// held counts the records the Producer holds: taken from kgo with a
	// failure and not yet finished or handed back, in Produce's slow path,
	// or produced where kgo may fail them unbuffered (see carry). Records
	// handed back to kgo are counted in moved first (see drained).
	held    atomic.Int64
	moved   atomic.Uint64
	waiters atomic.Int32 // Flush calls waiting for held to fall to 0
	idleMu  sync.Mutex
	idle    chan struct{} // closed when held falls to 0 with waiters

	rounds atomic.Uint64 // numbers the recovery rounds of every partition

	closing   chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once

	mu       sync.Mutex
	topics   map[string]*topic
	holdTime map[string]map[int32]time.Duration

	st stats
}

// NewProducer returns a Producer around a new kgo client built from kopts,
// with kgo.FailPartitionOnProduceFailure and the Producer's failure hook
// added, and kgo.MaxBufferedPartitionRecords(10000) unless kopts set it
// (kgo.MaxBufferedPartitionRecords(0) turns it off). opts configure the
// Producer (nil ones are ignored); without WithPolicies, the policies are
// Retry(3, 100ms) then Drop, which never stop a partition.
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
	p.dl = newDeadLetters(p.cfg.policies)
	p.dl.closing = p.closing
	all := append(append([]kgo.Opt{kgo.MaxBufferedPartitionRecords(10000)}, kopts...), kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(hook{p}))
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

// Client returns the underlying kgo client. Producing through it directly
// bypasses the Producer's ordering protocol.
func (p *Producer) Client() *kgo.Client { return p.cl }

// hook is the Producer's kgo.HookProducePartitionFailed. kgo calls it
// inline, where the partition fails, with its own locks held, on whatever
// goroutine fails it (one of kgo's, a goroutine producing, or a partition's
// worker inside a recovery): it must not block, nor take a lock that is held
// across a call into kgo. It only counts: the Producer learns of each failure
// from the promises of its records, which carry it.
type hook struct{ p *Producer }

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

// lockPartition returns the state machine of a topic's partition (-1: the
// topic), locked, made if need be.
func (p *Producer) lockPartition(name string, id int32) *partition {
	p.mu.Lock()
	t := p.topics[name]
	if t == nil {
		t = &topic{p: p, name: name, parts: map[int32]*partition{}}
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
// written, or with an error that wraps ErrDeadLettered, ErrDropped,
// ErrStopped, ErrHeldFull or ErrClosed and the cause, with its own context's
// error if that is done before the record could be written, or with kgo's
// own error for a failure that fails no partition, such as a usage error (no
// topic, an invalid record): such a record is not retried and holds nothing
// back. A nil record, and a record to a dead-letter topic of the policies,
// fail at once with an error.
//
// Produce blocks only where kgo's Produce does (kgo.MaxBufferedRecords), never
// for the Producer's own state: not for MaxHeld or MaxHeldBytes, nor while a
// partition recovers. As with kgo, a promise must not
// block, and must not call Flush or Close; produce from a promise in a
// goroutine of its own.
func (p *Producer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if ctx == nil {
		ctx = context.Background()
	}
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
	seq := p.seq.Add(1)
	if p.attn.Load() != 0 {
		p.produceSlow(&pending{seq: seq, ctx: ctx, r: r, promise: promise})
		return
	}
	// kgo fails a record before buffering it (not counted buffered) for
	// no topic or a size over kgo.MaxBufferedBytes; with manual flushing
	// or a transaction, for a full buffer or no transaction too.
	unbuffered := p.counted || r.Topic == "" || p.maxBytes > 0 && (&pending{r: r}).size() > p.maxBytes
	if unbuffered {
		p.hold(1)
	}
	p.carry(ctx, r, promise, seq, unbuffered)
}

// produceSlow is Produce while something takes it off the no-failure path.
// The record is held until its promise has returned.
func (p *Producer) produceSlow(pd *pending) {
	p.hold(1)
	if p.isClosed() {
		p.finish(pd, ErrClosed)
		return
	}
	t := p.topic(pd.r.Topic)
	if q, ok := t.admit(pd.r.Key, pd.seq); ok {
		p.divertKeyed(t, pd, q, func(err error) { p.finish(pd, err) })
		return
	}
	p.carry(pd.ctx, pd.r, pd.promise, pd.seq, true)
}

// carry gives a record to kgo, with one closure as its promise; a record
// counted held (p.hold(1)) is counted out once its promise has returned. The
// closure is kept small (it is the only allocation on the no-failure path):
// the context travels in the record's Context, as kgo sets it, if it has
// none of its own.
func (p *Producer) carry(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error), seq uint64, counted bool) {
	if r.Context == nil && !counted {
		r.Context = ctx
		p.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				p.result(&pending{seq: seq, ctx: r.Context, r: r, promise: promise}, r, err)
				return
			}
			promise(r, nil)
		})
		return
	}
	p.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
		if err != nil {
			p.result(&pending{seq: seq, ctx: ctx, r: r, promise: promise}, r, err)
		} else {
			promise(r, nil)
		}
		if counted {
			p.hold(-1)
		}
	})
}

// result takes a record's outcome from kgo: a record that failed or was
// rejected with a failure of its partition (or topic) goes to that failure's
// state machine, which holds it; anything else to the record's promise.
// Called from kgo's promise, which kgo counts out of its buffered records
// only after it returns: held counts a kept record first.
func (p *Producer) result(pd *pending, r *kgo.Record, err error) {
	var fe *kgo.ErrProducePartitionFailed
	if err != nil && errors.As(err, &fe) {
		pt := p.lockPartition(fe.Topic, fe.Partition)
		settle := pt.arriveLocked(pd, fe, err)
		if settle == nil {
			p.hold(1) // before the worker may settle it
		}
		pt.mu.Unlock()
		if settle == nil {
			return
		}
		err = settle
	}
	pd.promise(r, err)
}

// finish calls the promise of a record the Producer holds, and counts it out.
func (p *Producer) finish(pd *pending, err error) {
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

// handed counts n held records out once kgo took them back (and counts them
// buffered).
func (p *Producer) handed(n int) {
	p.moved.Add(1)
	p.hold(-int64(n))
}

// drained tells whether nothing is held nor buffered in kgo. Each record
// produced is always counted in one or the other (kgo counts a record out
// after its promise, which counts it held if kept; a record handed back is
// counted buffered before it is counted out of held), unless it is handed
// back between the two reads, which moved tells.
func (p *Producer) drained() bool {
	m := p.moved.Load()
	return p.cl.BufferedProduceRecords() == 0 && p.held.Load() == 0 && p.moved.Load() == m
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

// ProduceSync produces rs as Produce does and returns once every promise
// has been called: the results in the order of rs, as
// kgo.Client.ProduceSync. Where kgo stops lingering on the partitions of rs,
// ProduceSync flushes the client while it waits, if it lingers or flushes
// manually.
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

// flushUntil flushes the client until done is closed, if it would linger on
// (or never send) the records of a recovery round or a dead-letter write.
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

// Flush waits until every record produced so far has finished: written,
// diverted, dropped or failed, including records being recovered. It
// flushes the client meanwhile, as kgo.Client.Flush does. As with kgo, a
// record whose context ended while Produce waited for room in kgo's buffer
// (kgo.MaxBufferedRecords) may be promised after Flush returns.
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
		if p.drained() {
			return nil
		}
	}
}

// Close closes the Producer and its client. Records being recovered that have
// not been produced again fail with ErrClosed; records in kgo fail as
// kgo.Client.Close fails them. Every promise has been called, and has
// returned, before Close returns (a Produce call that has not returned is
// concurrent with Close: its promise may come after). Close does not wait for
// buffered records: call Flush first for that. Do not call Close or Flush
// from a promise.
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
// to them from now on are produced, in order. Records produced to a stopped
// partition before Resume still fail with ErrStopped, whenever their promise
// comes. kgo resumes the partition only once every promise of its failure
// has returned; until then it rejects the records produced after Resume too,
// and the Producer keeps them and produces them again first, as in a
// recovery. A Produce call that has not returned when Resume is called (one
// blocked on kgo's MaxBufferedRecords, say) is concurrent with it: its record
// may go either way. Resuming a topic that is not stopped is a no-op. Resume
// does not call kgo (the partition's worker recovers it): it may be called
// from an application's kgo hook.
func (p *Producer) Resume(topic string) {
	t := p.topic(topic)
	if t == nil {
		return
	}
	// Records numbered up to seq were produced before this call (or
	// concurrently with it); later ones after it.
	seq := p.seq.Load()
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

// ReleaseQuarantine ends the quarantine of key in topic: later records with
// the key are produced to topic again. Releasing a key that is not
// quarantined is a no-op.
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
