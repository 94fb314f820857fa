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
	bound        int64 // kgo.MaxBufferedPartitionRecords

	// The no-failure path: in numbers the records produced, out counts the
	// promises returned (producing goroutines and kgo's promise goroutine
	// write one each); attn counts what takes Produce off that path
	// (quarantines, Close). attn and ring (see carrier.go) are read-mostly.
	in   atomic.Uint64
	_    [56]byte
	out  atomic.Uint64
	_    [56]byte
	attn atomic.Int32
	ring atomic.Pointer[carrierRing]
	_    [48]byte

	misses   atomic.Uint64 // records that found no free carrier (see resize)
	resizing atomic.Bool

	rounds atomic.Uint64 // numbers the recovery rounds of every partition

	closing chan struct{}
	closed  atomic.Bool
	waiters atomic.Int32 // Flush and Close calls waiting for out to reach in
	idleMu  sync.Mutex
	idle    chan struct{}

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
	p.ring.Store(p.newCarrierRing(minCarriers))
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
	seq := p.in.Add(1)
	if p.attn.Load() == 0 {
		p.carry(ctx, r, promise, seq)
		return
	}
	p.produceSlow(&pending{seq: seq, ctx: ctx, r: r, promise: promise})
}

// produceSlow is Produce while something takes it off the no-failure path.
func (p *Producer) produceSlow(pd *pending) {
	if p.isClosed() {
		p.finish(pd, ErrClosed)
		return
	}
	t := p.topic(pd.r.Topic)
	if q, ok := t.admit(pd.r.Key, pd.seq); ok {
		p.divertKeyed(t, pd, q, func(err error) { p.finish(pd, err) })
		return
	}
	p.carry(pd.ctx, pd.r, pd.promise, pd.seq)
}

// result takes a record's outcome from kgo: a record that failed or was
// rejected with a failure of its partition (or topic) goes to that failure's
// state machine; anything else to the record's promise.
func (p *Producer) result(pd *pending, r *kgo.Record, err error) {
	var fe *kgo.ErrProducePartitionFailed
	if err != nil && errors.As(err, &fe) {
		pt := p.lockPartition(fe.Topic, fe.Partition)
		settle := pt.arriveLocked(pd, fe, err)
		pt.mu.Unlock()
		if settle == nil {
			return
		}
		err = settle
	}
	p.finish(pd, err)
}

// finish calls a record's promise, and counts it out.
func (p *Producer) finish(pd *pending, err error) { p.done(pd.promise, pd.r, err) }

func (p *Producer) done(promise func(*kgo.Record, error), r *kgo.Record, err error) {
	promise(r, err)
	n := p.out.Add(1)
	if p.waiters.Load() > 0 && n == p.in.Load() {
		p.idleMu.Lock()
		close(p.idle)
		p.idle = make(chan struct{})
		p.idleMu.Unlock()
	}
}

// waitIdle waits until every record produced has been settled.
func (p *Producer) waitIdle(ctx context.Context) error {
	p.waiters.Add(1)
	defer p.waiters.Add(-1)
	for {
		p.idleMu.Lock()
		idle := p.idle
		p.idleMu.Unlock()
		if p.out.Load() == p.in.Load() {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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
// diverted, dropped or failed, including records being recovered.
func (p *Producer) Flush(ctx context.Context) error {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go p.cl.Flush(fctx) //nolint:errcheck // kgo sends what it lingers on meanwhile
	return p.waitIdle(ctx)
}

// Close closes the Producer and its client. Records being recovered that have
// not been produced again fail with ErrClosed; records in kgo fail as
// kgo.Client.Close fails them. Every promise has been called, and has
// returned, before Close returns. Close does not wait for buffered records:
// call Flush first for that. Do not call Close or Flush from a promise.
func (p *Producer) Close() {
	if p.closed.Swap(true) {
		<-p.closing
		_ = p.waitIdle(context.Background())
		return
	}
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
	_ = p.waitIdle(context.Background())
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
	seq := p.in.Load()
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
