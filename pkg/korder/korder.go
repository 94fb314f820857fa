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
//   - When a partition (or, see below, a whole topic) has a failure, the
//     new records for it are held, in order, while the rest keeps flowing.
//   - Once every record already handed to kgo for it has finished, the
//     failed and rejected records are run through the policies, in the
//     order they were produced: Retry, Isolate, DeadLetter, Drop or Stop.
//   - The partitions are recovered, the records the policies kept are
//     produced again in order, and the held records are released in order.
//
// The guarantee: for every partition, the records written are exactly the
// records produced to it, in Produce call order (per producing goroutine,
// as with kgo), minus the records a policy explicitly diverted or dropped.
// Every promise is called exactly once, with the final outcome.
//
// # Per-topic and per-partition holds
//
// Holds are per partition (unless TopicHolds is given), with any
// partitioner: a failure of partition P holds, and under Stop stops, only
// the records that go to P; the topic's other partitions keep flowing
// during P's whole recovery.
//
// With kgo.ManualPartitioner(), which puts every record in its Partition
// field (kgo.RecordPartitioner(kgo.ManualPartitioner())), the Producer
// knows a record's partition before kgo does, and holds P's records itself.
//
// With any other partitioner, including kgo's default, kgo picks the
// partition inside Produce, so the Producer learns P's records from kgo: a
// failed partition rejects every later record to it, in produce order,
// with kgo.ErrProducePartitionFailed and the record's Partition set, and
// kgo routes unkeyed records around it (they are not held because of P).
// The Producer collects P's failed and rejected records and settles them
// through the policies while the topic keeps flowing. The topic as a whole
// is held only at a short gate before each time the recovery produces P's
// records again: no record of the topic reaches kgo from when the gate
// closes, the Producer waits until every record of the topic it handed to
// kgo has finished (so that every record of P produced before, failed or
// rejected, has been collected, and none is on its way to P), recovers P in
// kgo, hands P's records to kgo in order, and opens the gate: records
// produced meanwhile to any partition were held and follow, in order. The
// gate lasts as long as kgo takes to finish what it had of the topic when
// it closed (about one produce round trip, plus the linger and what was
// buffered ahead); Stats.TopicHoldTime adds it up. With pinned partitions
// (see Stalled partitions), the gate holds less: it waits only for the
// records that may go to a failed partition (unkeyed records in flight,
// and those pinned to it), and while it is closed only the failed
// partitions' new records are held (and unkeyed records are pinned to
// other partitions); the others go on. While Isolate bisects,
// the gate stays closed (its rounds produce part of P's records with P
// recovered). Records kgo rejects for P are what P holds (MaxHeld), and
// count against MaxHeldBytes. Since the records of a partition whose round
// is in flight wait in kgo's buffer behind the round, a round that takes
// long (P's broker is slow, or keeps a request) can fill kgo's
// MaxBufferedRecords, which blocks Produce for every partition, as it
// would without korder.
//
// Either way, a failure kgo cannot pin on a partition (it reports it for
// the whole topic, partition -1: for example a record larger than
// MaxBufferedBytes before the topic's metadata is loaded, an unkeyed record
// that does so after, or an unknown topic) holds every partition of the
// topic until the topic is recovered. Quarantine, Stop and MaxHeld apply
// per partition too: a key is quarantined in the partition whose record
// was diverted (with a partitioner that hashes keys, a key's records all go
// to one partition anyway), Stop stops only the failed partition (kgo keeps
// it failed, and its later records fail with ErrStopped; Resume resumes
// every stopped partition of the topic), and each partition holds up to
// MaxHeld records, if that is set; MaxHeldBytes bounds the bytes the
// topic's partitions hold together.
//
// # Stalled partitions
//
// A partition can also stop making progress without failing: its broker
// is down or answers with a retryable error, and kgo keeps retrying its
// records (with kgo's defaults, only after each metadata refresh, at most
// every MetadataMinAge). kgo buffers every partition's records in one
// buffer (MaxBufferedRecords), so such a partition's records fill it and
// kgo's Produce then blocks for every partition, long before any record
// fails. With kgo's default partitioner, the Producer prevents that for
// keyed records: when kopts give no partitioner (kgo.RecordPartitioner),
// it gives the client kgo's default partitioner wrapped so that the
// Producer can compute a keyed record's partition before kgo and pin the
// record to it. A partition may then have at most half of
// MaxBufferedRecords in kgo; from an eighth on, the Producer checks
// whether any of its records finished in the last StallAfter (100ms by
// default). If none did, the partition is stalled: its new records are
// held, in order, and handed to kgo in order as its records in kgo
// finish, while the topic's other partitions keep flowing with the rest of
// kgo's buffer. A partition that makes progress is only busy: at half of
// the buffer, its records wait in Produce for room, as they would in kgo.
// While a partition of the topic holds records, unkeyed records are pinned
// to partitions that do not (kgo's partitioner could otherwise put one
// ahead of the held records). Records held for a stalled partition count
// against MaxHeldBytes and MaxHeld, as in Stats.Held, and are settled like
// other held records when their context ends or the Producer closes. With
// a partitioner given in kopts, even kgo's default, or ManualPartitioner
// (see above), or TopicHolds, stalled partitions are not held.
//
// The Producer recognizes kgo.ManualPartitioner() by its type (that of every
// kgo.BasicConsistentPartitioner) and, for each topic, by asking it to
// partition a few probe records with different keys and Partition fields:
// only a partitioner that picks the Partition field every time is held by
// the Producer itself; any other one, including a
// BasicConsistentPartitioner that hashes keys, has its holds learned from
// kgo.
//
// # Contexts
//
// A record whose own context (the one given to Produce, or the record's
// Context) is done when its turn comes is settled alone with its context's
// error, as raw kgo would: it is not produced again, diverted, dropped or
// counted toward Stop, and the records failed only with it (kgo fails a
// batch whose first record's context is done) are produced again in order.
// A held record whose context ends while it is held is settled when the
// hold ends, without reaching kgo.
//
// # Cost
//
// While a topic (partition) has no failure, Produce takes no lock and
// allocates nothing per record: it counts the record in with one atomic
// add, and hands it to kgo with a promise from a ring of reusable carriers
// (one ring per topic, or per partition), claimed with a compare-and-swap
// and freed with an atomic store. A ring starts at 64 carriers of
// 72 bytes and grows only while more records are in flight than it has
// carriers: to at most four times the most records in flight, rounded up to
// a power of two, and at most twice the client's MaxBufferedRecords (131072
// carriers, 9 MB, with kgo's default). It never shrinks. Until it has grown,
// or if even that is not enough, a record allocates its own promise.
package korder

import (
	"context"
	"errors"
	"fmt"
	"reflect"
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
	// when Stop stopped its topic (with per-partition holds, its
	// partition): the record that failed, every record after it, and every
	// record produced to the topic (partition) until Resume.
	ErrStopped = errors.New("korder: topic stopped after a produce failure")

	// ErrHeldFull is the error a record's promise gets, with
	// RejectWhenHeldFull, when its topic (partition) is recovering and its
	// held queue is full (MaxHeld, MaxHeldBytes). The record is not
	// written.
	ErrHeldFull = errors.New("korder: held queue full while the topic recovers")

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
	cl           *kgo.Client
	cfg          config
	defaultTopic string          // kgo.DefaultProduceTopic, read once
	maxCarriers  int             // the largest carrier ring of a unit (see carrier)
	pin          *pinPartitioner // the client's partitioner, if it is the Producer's (see pin.go); nil with TopicHolds
	partCap      uint64          // the most records of a pinned partition in kgo (see throttle.go)
	softCap      uint64          // from here on, a pinned partition is checked for a stall
	lingers      bool            // the client lingers or flushes manually (see flushUntil)
	manualFlush  bool            // the client flushes manually: every recovery round flushes

	// probe is the client's partitioner if it has the type of
	// kgo.ManualPartitioner() and TopicHolds was not given, else nil: it
	// is probed for each topic when the topic is first seen (manualFor).
	probe kgo.Partitioner

	// fast is a copy-on-write snapshot of topics for the lock-free
	// Produce path; topics changes only when a topic is first seen.
	fast atomic.Pointer[map[string]*topicState]
	last atomic.Pointer[topicState] // the last topic fastTopic found

	mu       sync.Mutex
	topics   map[string]*topicState
	closed   bool
	stats    Stats
	partHold map[string]map[int32]time.Duration // per-partition holds: finished holds
}

// pending is one record produced through the Producer, until its promise is
// called.
type pending struct {
	seq      uint64
	ctx      context.Context
	r        *kgo.Record
	promise  func(*kgo.Record, error)
	err      error     // the last error kgo failed the record with
	attempts int       // produce attempts during recovery
	size     int64     // the bytes it counts for while held (heldSize)
	rejected bool      // learned holds: kgo rejected it, and it is held (see collectLocked)
	sp       *slowPart // pinned: the partition it is counted in, or held by (see throttle.go)
	up       bool      // counted in its unit's unpinned
}

// heldSize is what a held record counts for against MaxHeldBytes: its key,
// value and headers.
func heldSize(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// topicState is a topic: with per-topic holds, its one unit; with
// per-partition holds, a unit per partition and the coordination of
// failures of the whole topic.
type topicState struct {
	name string

	whole *unit // per-topic holds: the topic's unit; nil with per-partition holds

	// Per-partition holds. parts is a copy-on-write snapshot of units for
	// the lock-free Produce path, indexed by partition (nil where no unit
	// exists yet, and only for partitions below maxFastPartition).
	parts atomic.Pointer[[]*unit]
	units map[int32]*unit

	// Per-partition holds: a failure of the whole topic (kgo's partition
	// -1). While topicFailed, every unit holds; once every unit is
	// quiescent (parked in its recovery with nothing in kgo, or stopped),
	// one of them recovers the topic in kgo (healing), then each unit
	// recovers its own partition. See gate.
	topicFailed bool
	healing     bool
	space       chan struct{} // closed when a unit may have become quiescent, or the topic recovered, or held bytes were freed while heldWaiters > 0

	heldBytes   int64     // bytes held by the topic's units (MaxHeldBytes)
	pin         *pinState // learned holds with pinned partitions (see throttle.go); else nil
	heldWaiters int       // Produce calls waiting for heldBytes to shrink
}

// unholdLocked accounts for records leaving the held queue of one of the
// topic's units, and wakes the Produce calls waiting for room.
func (ts *topicState) unholdLocked(pds []*pending) {
	for _, pd := range pds {
		ts.heldBytes -= pd.size
	}
	if len(pds) > 0 && ts.heldWaiters > 0 {
		ts.wakeLocked()
	}
}

// maxFastPartition bounds the lock-free path's per-partition snapshot: a
// record to a higher partition number takes the locked path.
const maxFastPartition = 1 << 14

// unit is the unit of holding and recovery: a topic with per-topic holds, a
// topic's partition with per-partition holds.
type unit struct {
	p         *Producer
	t         *topicState
	partition int32 // per-partition holds; -1 for a whole topic

	// While slow is false (no recovery, hold, stop or quarantine, and not
	// closed), Produce hands records to kgo without taking the Producer's
	// mutex: it counts the record in, then checks slow again. A recovery
	// sets slow, then starts only once nothing is in flight, so a record
	// either sees slow and takes the locked path, or is counted before
	// the recovery can start.
	//
	// The records in flight are in minus out (see inflight): a record is
	// in flight from when it is counted in, before it is handed to kgo,
	// until its promise has returned. On the fast path, in is written by
	// producing goroutines, out by the goroutine that calls kgo's
	// promises, and slow only when the unit's state changes: each has a
	// cache line of its own, so that the two sides do not take a line
	// from each other on every record.
	//
	// in also numbers the records in Produce order (pending.seq), so that
	// the fast path does one atomic add, not two. A held record, which is
	// not handed to kgo until its release, takes its number with
	// nextSeqLocked.
	slow     atomic.Bool
	carriers atomic.Pointer[carrierRing] // see carrier; nil until the first miss
	_        [cacheLine]byte
	in       atomic.Uint64 // records counted in, and the last number taken
	_        [cacheLine]byte
	out      atomic.Uint64 // records counted out: their promise has run
	_        [cacheLine]byte
	misses   atomic.Uint64 // claims that found no free carrier, since the ring last grew or forgot them
	growing  atomic.Bool   // a claim is replacing the ring

	failed []*pending // failed or rejected since the failure, in any order
	held   []*pending // produced while the unit recovers, in order

	recovering bool          // a failure was seen: hold new records
	running    bool          // a recovery goroutine is at work
	parked     bool          // the recovery waits in gate, with nothing in kgo
	stopped    error         // Stop: fail everything until Resume
	space      chan struct{} // closed when held shrinks or the state changes
	holdStart  time.Time

	quarantined map[string]error // keys whose records go to the dead-letter topic

	// Learned per-partition holds (see learned.go): the unit is a whole
	// topic whose records all flow through it, and kgo holds a failed
	// partition's records by rejecting them; recovering is then only the
	// gate.
	learn  bool
	whole  bool                 // a failure not pinned on a partition: hold the topic until it is recovered
	kick   bool                 // a hook asked for a recovery
	resume bool                 // Resume asked to end the stops of partitions
	lparts map[int32]*partState // partitions with records held or stopped
	gated  []int32              // the partitions the closed gate holds; nil: the whole topic (see gateInflightLocked)
	// gateWhole: the closed gate held the whole topic at some point, and
	// holds it until it opens.
	gateWhole bool
	// unpinned counts the records of a topic with pinned partitions in
	// kgo that are not pinned (they may go to any partition).
	unpinned atomic.Int64
	// rejBytes is what the rejected records held count for in
	// t.heldBytes.
	rejBytes int64
	// releasing: the held records are being handed to kgo; Produce waits
	// until they are (releaseBatchesLocked).
	releasing bool
}

// cacheLine is the padding between a unit's counters: 64 bytes is the line
// size of amd64 and of most arm64 cores.
const cacheLine = 64

// inflight returns how many records the unit counted in have not been
// counted out. out is read first: in only grows and is never behind out,
// so the result is never below the count at the time out was read, and
// zero means that nothing was in flight from then until in was read. Under
// p.mu it is exact for the records that take the lock (nextSeqLocked's
// pair of adds is never seen halfway).
func (u *unit) inflight() uint64 {
	out := u.out.Load()
	return u.in.Load() - out
}

// nextSeqLocked numbers a record that is not handed to kgo (held): it is
// counted in and out at once, under p.mu, where every decision to start a
// recovery is taken.
func (u *unit) nextSeqLocked() uint64 {
	seq := u.in.Add(1)
	u.out.Add(1)
	return seq
}

// countOut counts out a record that was counted in, on whichever path it
// took (once its promise has returned). While the unit is slow, a recovery (or Close) may be waiting
// for this record to be the last in flight, so it takes the lock and asks
// (maybeRecoverLocked, which also wakes Close). A recovery that sets slow
// after the load here sees this record counted out when it checks, under
// the lock.
func (u *unit) countOut() {
	u.out.Add(1)
	if u.slow.Load() {
		u.p.mu.Lock()
		u.p.maybeRecoverLocked(u)
		u.p.mu.Unlock()
	}
}

// quarantineCause returns why key is quarantined in u, or nil if it is not
// (records without a key never are). Under p.mu.
func (u *unit) quarantineCause(key []byte) error {
	if key == nil {
		return nil
	}
	return u.quarantined[string(key)]
}

// perPartition returns whether u is one partition of its topic.
func (u *unit) perPartition() bool { return u.t.whole == nil }

// logKVs returns the unit's coordinates for a log line, followed by kvs.
func (u *unit) logKVs(kvs ...any) []any {
	if u.perPartition() {
		return append([]any{"topic", u.t.name, "partition", u.partition}, kvs...)
	}
	return append([]any{"topic", u.t.name}, kvs...)
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
	// The Producer's partitioner goes first, so that one given in kopts
	// replaces it (see pin.go).
	pin := newPinPartitioner()
	all := append([]kgo.Opt{kgo.RecordPartitioner(pin)}, kopts...)
	all = append(all, kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(hook{p}))
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, err
	}
	p.cl = cl
	p.defaultTopic, _ = cl.OptValue(kgo.DefaultProduceTopic).(string)
	linger, _ := cl.OptValue(kgo.ProducerLinger).(time.Duration)
	manual, _ := cl.OptValue(kgo.ManualFlushing).(bool)
	p.lingers = linger > 0 || manual
	p.manualFlush = manual
	maxBuffered, _ := cl.OptValue(kgo.MaxBufferedRecords).(int64)
	p.maxCarriers = maxCarriersFor(maxBuffered)
	p.partCap = uint64(max(maxBuffered/2, 1))
	p.softCap = uint64(max(maxBuffered/8, 1))
	if got, _ := cl.OptValue(kgo.RecordPartitioner).(*pinPartitioner); got != nil && !p.cfg.topicHolds {
		p.pin = got
	}
	part, _ := cl.OptValue(kgo.RecordPartitioner).(kgo.Partitioner)
	if !p.cfg.topicHolds && part != nil && reflect.TypeOf(part) == reflect.TypeOf(kgo.ManualPartitioner()) {
		p.probe = part
	}
	return p, nil
}

// manualFor returns whether the client's partitioner puts every record of
// topic in its Partition field, as kgo.ManualPartitioner() does. Its type,
// checked in NewProducer, is that of every kgo.BasicConsistentPartitioner,
// so it is asked to partition probe records: a partitioner that derives the
// partition from anything else (a key, a counter, the partition count)
// misses at least one of them. A partitioner that panics is not manual.
func (p *Producer) manualFor(topic string) (manual bool) {
	if p.probe == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			manual = false
		}
	}()
	tp := p.probe.ForTopic(topic)
	for _, key := range [][]byte{nil, []byte("korder-probe-a"), []byte("korder-probe-b")} {
		for _, n := range []int{1 << 20, 1<<20 + 7} {
			for _, partition := range []int32{3, 0, 7, 1, 1<<20 - 1, 2} {
				r := &kgo.Record{Topic: topic, Key: key, Partition: partition}
				if !tp.RequiresConsistency(r) || tp.Partition(r, n) != int(partition) {
					return false
				}
			}
		}
	}
	return true
}

// Client returns the underlying kgo client. Producing through it directly
// bypasses the Producer's ordering protocol.
func (p *Producer) Client() *kgo.Client { return p.cl }

// hook is the Producer's kgo.HookProducePartitionFailed: it marks the unit
// as recovering at once, so that the next Produce call for it is held. It
// runs on a kgo goroutine and only takes the Producer's mutex briefly.
type hook struct{ p *Producer }

func (h hook) OnProducePartitionFailed(topic string, partition int32, err error) {
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := p.topicLocked(topic)
	p.stats.Failures++
	switch {
	case ts.whole != nil && ts.whole.learn:
		p.hookLearnedLocked(ts.whole, partition, err)
	case ts.whole != nil:
		p.logf(kgo.LogLevelWarn, "korder: produce failed, holding the topic until its records are recovered", "topic", topic, "partition", partition, "err", err)
		p.beginRecoveryLocked(ts.whole)
		p.maybeRecoverLocked(ts.whole)
	case partition < 0:
		p.logf(kgo.LogLevelWarn, "korder: produce failed before partitioning, holding every partition of the topic until its records are recovered", "topic", topic, "err", err)
		// A late hook, for a failure that the units' gate already saw
		// and recovered, finds kgo recovered: nothing to do.
		if p.kgoTopicFailed(topic) {
			p.failTopicLocked(ts)
		}
	default:
		p.logf(kgo.LogLevelWarn, "korder: produce failed, holding the partition until its records are recovered", "topic", topic, "partition", partition, "err", err)
		u := p.unitLocked(topic, partition)
		p.beginRecoveryLocked(u)
		p.maybeRecoverLocked(u)
	}
}

// kgoTopicFailed returns whether kgo has failed topic as a whole (partition
// -1). It takes only kgo's leaf lock, so it may be called under p.mu.
func (p *Producer) kgoTopicFailed(topic string) bool {
	return slices.Contains(p.cl.FailedProducePartitions()[topic], -1)
}

// failTopicLocked holds every unit of a topic with per-partition holds
// after kgo failed the topic as a whole: each unit recovers once what it
// has in flight finishes, and its recovery waits in gate until the topic is
// recovered. Units created while the topic is failed start held
// (unitLocked). A stopped unit has nothing in kgo and takes nothing new: it
// is left alone.
func (p *Producer) failTopicLocked(ts *topicState) {
	ts.topicFailed = true
	for _, u := range ts.units {
		if u.stopped == nil {
			p.beginRecoveryLocked(u)
			p.maybeRecoverLocked(u)
		}
	}
	ts.wakeLocked()
}

func (p *Producer) topicLocked(topic string) *topicState {
	ts := p.topics[topic]
	if ts == nil {
		ts = &topicState{name: topic, space: make(chan struct{})}
		if p.manualFor(topic) {
			ts.units = make(map[int32]*unit)
		} else {
			ts.whole = p.newUnitLocked(ts, -1)
			ts.whole.learn = !p.cfg.topicHolds
			if ts.whole.learn && p.pin != nil {
				ts.pin = &pinState{n: p.pin.count(topic)}
			}
		}
		p.topics[topic] = ts
		fast := make(map[string]*topicState, len(p.topics))
		for name, ts := range p.topics {
			fast[name] = ts
		}
		p.fast.Store(&fast)
	}
	return ts
}

func (p *Producer) newUnitLocked(ts *topicState, partition int32) *unit {
	u := &unit{p: p, t: ts, partition: partition, space: make(chan struct{})}
	u.slow.Store(p.closed)
	return u
}

// unitLocked returns the unit of a record produced to topic and partition:
// the topic's with per-topic holds, the partition's otherwise.
func (p *Producer) unitLocked(topic string, partition int32) *unit {
	ts := p.topicLocked(topic)
	if ts.whole != nil {
		return ts.whole
	}
	u := ts.units[partition]
	if u != nil {
		return u
	}
	u = p.newUnitLocked(ts, partition)
	ts.units[partition] = u
	if ts.topicFailed {
		// Hold from the start: a record produced now would be rejected
		// by the failed topic, and must not be overtaken by a later one
		// once the topic recovers.
		p.beginRecoveryLocked(u)
		p.maybeRecoverLocked(u)
	}
	if partition >= 0 && partition < maxFastPartition {
		// Publish the unit to the lock-free path once its state is set.
		var parts []*unit
		if old := ts.parts.Load(); old != nil {
			parts = *old
		}
		next := make([]*unit, max(len(parts), int(partition)+1))
		copy(next, parts)
		next[partition] = u
		ts.parts.Store(&next)
	}
	return u
}

// eachUnitLocked calls fn for every unit.
func (p *Producer) eachUnitLocked(fn func(*unit)) {
	for _, ts := range p.topics {
		ts.eachUnit(fn)
	}
}

// eachUnit calls fn for every unit of the topic; under p.mu.
func (ts *topicState) eachUnit(fn func(*unit)) {
	if ts.whole != nil {
		fn(ts.whole)
		return
	}
	for _, u := range ts.units {
		fn(u)
	}
}

func (p *Producer) beginRecoveryLocked(u *unit) {
	if !u.recovering {
		u.recovering = true
		u.holdStart = time.Now()
		u.gated, u.gateWhole = nil, false // until the gate computes it: the whole topic
	}
	p.updateSlowLocked(u)
}

// updateSlowLocked sets whether Produce must take the locked path for u.
func (p *Producer) updateSlowLocked(u *unit) {
	u.slow.Store(u.recovering || (u.running && !u.learn) || u.stopped != nil || len(u.held) > 0 || len(u.quarantined) > 0 || p.closed)
}

// wakeLocked wakes everything waiting on the unit's state, and, while its
// topic is failed as a whole, the units waiting in gate, since the unit may
// have become quiescent.
func (u *unit) wakeLocked() {
	close(u.space)
	u.space = make(chan struct{})
	if u.t.topicFailed {
		u.t.wakeLocked()
	}
}

func (ts *topicState) wakeLocked() {
	close(ts.space)
	ts.space = make(chan struct{})
}

// Produce produces r with kgo's semantics, keeping per-partition order
// across failures: if r's topic (with per-partition holds, its partition)
// is recovering from a failure, r is held and produced, in order, once it
// recovers. If the held queue is full (MaxHeldBytes, shared by the topic,
// or MaxHeld), Produce blocks until there is room or ctx is done, in which
// case the promise is called with ctx's error; with RejectWhenHeldFull, it
// fails the record at once with ErrHeldFull instead. The promise is called
// exactly once: with nil once the record is written, or with an error that
// wraps ErrDeadLettered, ErrDropped, ErrStopped, ErrHeldFull or ErrClosed
// and the cause, with its own context's error if that is done before the
// record could be written, or with kgo's own error for failures that are
// not produce failures (for example an invalid record).
//
// As with kgo, a promise must not block. A record counts as in flight
// until its promise returns, and a recovery waits for the records in
// flight: a Produce from a promise that blocks on a full held queue waits
// for itself, so produce from a promise in a goroutine of its own. With
// holds learned from kgo (see the package documentation), Produce also
// waits, briefly, while the records held at a gate are handed to kgo, which
// may wait for room in kgo's buffer, which kgo frees as promises return.
func (p *Producer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if ctx == nil {
		ctx = context.Background()
	}
	if promise == nil {
		promise = func(*kgo.Record, error) {}
	}
	if r.Topic == "" {
		r.Topic = p.defaultTopic
	}

	// The fast path: nothing is wrong with the record's unit.
	if ts := p.fastTopic(r.Topic); ts != nil {
		u := ts.whole
		if u == nil {
			u = ts.fastPart(r.Partition)
		}
		var (
			sp     *slowPart
			locked bool
		)
		if u != nil && ts.pin != nil {
			sp, locked = p.fastSlowPart(ts.pin, r)
		}
		if u != nil && !locked && !u.slow.Load() {
			seq := u.in.Add(1)
			// Counted where the gate looks before the second check
			// (see gateInflightLocked).
			if sp != nil {
				sp.in.Add(1)
			} else if ts.pin != nil {
				u.unpinned.Add(1)
			}
			if !u.slow.Load() {
				if u.learn {
					r.Partition = -1 // kgo sets it if it partitions the record
				}
				if sp != nil {
					r.Partition = pinnedPartition(sp.part)
				}
				if c := u.claim(seq, ctx, promise, sp); c != nil {
					p.cl.Produce(ctx, r, c.done)
				} else {
					p.cl.Produce(ctx, r, func(r *kgo.Record, err error) { u.finishFast(r, err, seq, ctx, promise, sp) })
				}
				return
			}
			// A recovery began: back out and take the locked path.
			if sp != nil {
				p.slowOut(u, sp)
			} else if ts.pin != nil {
				u.unpinned.Add(-1)
			}
			u.countOut()
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
		u := p.unitLocked(r.Topic, r.Partition)
		if u.learn {
			r.Partition = -1 // kgo sets it if it partitions the record
		}
		if cause := u.stopped; cause != nil {
			p.stats.Stopped++
			p.mu.Unlock()
			promise(r, fmt.Errorf("%w: %w", ErrStopped, cause))
			return
		}
		if u.releasing {
			// The held records are being handed to kgo: wait,
			// then go after them.
			space := u.space
			p.mu.Unlock()
			select {
			case <-space:
			case <-ctx.Done():
				promise(r, ctx.Err())
				return
			}
			p.mu.Lock()
			continue
		}
		if cause := u.quarantineCause(r.Key); cause != nil && !u.recovering && len(u.held) == 0 {
			pd.seq = u.in.Add(1) // counted in: handed to kgo, for the dead-letter topic
			p.mu.Unlock()
			p.deadLetterQuarantined(pd, cause, u.countOut)
			return
		}
		direct := !u.recovering && len(u.held) == 0
		if len(u.held) == 0 && u.t.pin != nil && (!u.recovering || u.partialGateLocked()) {
			act, wait, until := p.routeLocked(u, pd, true)
			// While a gate is closed, a record pinned to a
			// partition it does not gate goes on; an unpinned one,
			// which may go to a gated partition, is held.
			direct = act == pinDirect && (pd.sp != nil || !u.recovering)
			switch act {
			case pinQueued:
				p.mu.Unlock()
				return
			case pinWait, pinFull:
				if act == pinFull && p.cfg.rejectWhenFull {
					p.stats.HeldFull++
					p.mu.Unlock()
					promise(r, ErrHeldFull)
					return
				}
				if !p.waitPinLocked(u, pd, wait, until) {
					return
				}
				continue
			}
		}
		if direct {
			pd.seq = u.in.Add(1) // counted in: handed to kgo
			if pd.sp == nil && u.t.pin != nil {
				pd.up = true
				u.unpinned.Add(1)
			}
			p.mu.Unlock()
			p.cl.Produce(ctx, r, func(_ *kgo.Record, err error) { p.finished(u, pd, err) })
			return
		}
		if pd.size == 0 {
			pd.size = heldSize(r)
		}
		countFull := p.cfg.maxHeld > 0 && len(u.held) >= p.cfg.maxHeld
		bytesFull := u.t.heldBytes > 0 && u.t.heldBytes+pd.size > p.cfg.maxHeldBytes
		if !countFull && !bytesFull {
			pd.seq = u.nextSeqLocked()
			u.held = append(u.held, pd)
			u.t.heldBytes += pd.size
			p.updateSlowLocked(u)
			p.mu.Unlock()
			return
		}
		if p.cfg.rejectWhenFull {
			p.stats.HeldFull++
			p.mu.Unlock()
			promise(r, ErrHeldFull)
			return
		}
		space := u.space
		ts := u.t
		if !countFull {
			space = ts.space // the topic's bytes: any of its units may free them
			ts.heldWaiters++
		}
		p.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			if !countFull {
				p.mu.Lock()
				ts.heldWaiters--
				p.mu.Unlock()
			}
			promise(r, ctx.Err())
			return
		}
		p.mu.Lock()
		if !countFull {
			ts.heldWaiters--
		}
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

// fastPart returns the unit of a partition for the lock-free path, or nil
// if there is none yet (or the partition is out of the snapshot's range).
func (ts *topicState) fastPart(partition int32) *unit {
	if parts := ts.parts.Load(); parts != nil && uint32(partition) < uint32(len(*parts)) {
		return (*parts)[partition]
	}
	return nil
}

// finished is the kgo promise of every record the Producer hands to kgo
// outside recovery.
//
// A record is counted out once its promise has returned (or, if it failed,
// once it is among the unit's failed records), so that Close, which waits
// until nothing is in flight, returns after every promise.
func (p *Producer) finished(u *unit, pd *pending, err error) {
	unpin(pd.r)
	sp, up := pd.sp, pd.up
	pd.sp, pd.up = nil, false
	p.mu.Lock()
	// Counted out under p.mu, with the collection below: a gate that
	// sees the record out of its partition (gateInflightLocked) must
	// find it among the unit's failed records.
	if sp != nil {
		sp.out.Add(1)
	}
	if up {
		u.unpinned.Add(-1)
	}
	if sp != nil && sp.slow.Load() {
		p.serviceLocked(u, sp)
	}
	if err != nil && isProduceFailure(err) && !p.closed && u.learn {
		p.collectLocked(u, pd, err) // unlocks
		return
	}
	if err != nil && isProduceFailure(err) && !p.closed {
		pd.err = err
		u.failed = append(u.failed, pd)
		u.out.Add(1)
		p.beginRecoveryLocked(u)
		p.maybeRecoverLocked(u)
		p.mu.Unlock()
		return
	}
	if err != nil && p.closed && !errors.Is(err, kgo.ErrClientClosed) {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	p.mu.Unlock()
	pd.promise(pd.r, closedErr(err))
	u.countOut()
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

// maybeRecoverLocked starts the unit's recovery once it is recovering and
// nothing it handed to kgo is still in flight.
func (p *Producer) maybeRecoverLocked(u *unit) {
	start := u.recovering && u.inflight() == 0
	if u.learn {
		// A learned recovery drains the topic in its gate itself.
		start = u.recovering || len(u.failed) > 0 || u.kick || u.resume
	}
	if !start || u.running || p.closed {
		u.wakeLocked()
		return
	}
	u.running = true
	p.updateSlowLocked(u)
	go p.recover(u)
}

// busyLocked returns a channel that is closed when a busy unit's state
// changes, or nil if no unit is holding or recovering.
func (p *Producer) busyLocked() chan struct{} {
	var wait chan struct{}
	p.eachUnitLocked(func(u *unit) {
		if wait == nil && (u.recovering || u.running || len(u.held) > 0) {
			wait = u.space
		}
	})
	for _, ts := range p.topics {
		ts.eachSlowPart(func(sp *slowPart) {
			if wait == nil && (len(sp.queue) > 0 || sp.releasing) {
				wait = sp.space
			}
		})
	}
	return wait
}

// Flush waits until every record produced so far has finished: written,
// diverted, dropped or failed, including records held or being recovered.
func (p *Producer) Flush(ctx context.Context) error {
	for {
		// Wait out every recovery, then flush kgo. A record that fails
		// while kgo flushes starts a recovery before its promise
		// returns, so if none is running after the flush, we are done.
		p.mu.Lock()
		wait := p.busyLocked()
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
		busy := p.busyLocked() != nil
		p.mu.Unlock()
		if !busy {
			return nil
		}
	}
}

// Close closes the Producer and its client. Records that are held or being
// recovered and have not been produced again fail with ErrClosed; records
// in kgo fail as kgo.Client.Close fails them. Every promise has been called,
// and has returned, before Close returns (kgo.Client.Close may return before
// the promises of the records it fails have run). Close does not wait for
// buffered records: call Flush first for that. Do not call Close or Flush
// from a promise: both wait for promises to return.
func (p *Producer) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var held []*pending
	for _, ts := range p.topics {
		ts.eachUnit(func(u *unit) {
			held = append(held, u.held...)
			ts.unholdLocked(u.held)
			u.held = nil
			p.updateSlowLocked(u)
			u.wakeLocked()
		})
		ts.eachSlowPart(func(sp *slowPart) {
			held = append(held, sp.queue...)
			ts.unholdLocked(sp.queue)
			sp.queue = nil
			sp.wakeLocked()
		})
		ts.wakeLocked() // recoveries waiting in gate end
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
		p.eachUnitLocked(func(u *unit) {
			// One read of inflight: a promise may count a record out
			// between two reads without the lock, and a unit seen busy
			// by the first and idle by the second would keep its
			// failed records, and Close return without their promises.
			if u.running || u.inflight() > 0 {
				wait = u.space
				return
			}
			u.t.eachSlowPart(func(sp *slowPart) {
				if sp.releasing { // it may be calling promises
					wait = sp.space
				}
			})
			failed = append(failed, u.failed...)
			u.failed = nil
		})
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
// With per-partition holds, it resumes every stopped partition of the
// topic. Resuming a topic that is not stopped is a no-op.
func (p *Producer) Resume(topic string) {
	p.mu.Lock()
	ts := p.topics[topic]
	var (
		stopped []*unit
		parts   []int32
	)
	resumed := false
	if ts != nil && ts.whole != nil && ts.whole.stopped == nil {
		// Learned holds: the recovery resumes the stopped partitions at
		// its gate, once their rejected records have failed.
		resumed = p.resumeLearnedLocked(ts.whole)
	}
	if ts != nil {
		ts.eachUnit(func(u *unit) {
			if u.stopped != nil {
				stopped = append(stopped, u)
				if u.partition >= 0 {
					parts = append(parts, u.partition)
				}
			}
		})
	}
	p.mu.Unlock()
	if len(stopped) == 0 {
		if resumed {
			p.logf(kgo.LogLevelInfo, "korder: resuming stopped partitions", "topic", topic)
		}
		return
	}
	// Recover kgo first, while the units are still stopped: a stopped
	// unit hands nothing to kgo, so no record produced after the Resume
	// can be rejected by the failed partition, and then overtaken.
	if ts.whole != nil {
		p.recoverKgoTopic(topic)
	} else {
		p.recoverKgoPartitions(map[string][]int32{topic: parts})
	}
	p.mu.Lock()
	for _, u := range stopped {
		if u.stopped == nil {
			continue // a concurrent Resume
		}
		u.stopped = nil
		for _, ps := range u.lparts {
			ps.stopped = nil // recoverKgoTopic recovered them
		}
		p.updateSlowLocked(u)
		u.wakeLocked()
		if u.learn && (len(u.held) > 0 || len(u.failed) > 0) {
			// Held or collected while the recovery that stopped the
			// topic was ending: recover them.
			u.kick = true
			p.maybeRecoverLocked(u)
		}
		if ts.topicFailed {
			// The topic failed as a whole while the unit was
			// stopped: it takes part in the topic's recovery.
			p.beginRecoveryLocked(u)
			p.maybeRecoverLocked(u)
		}
	}
	p.mu.Unlock()
	p.logf(kgo.LogLevelInfo, "korder: resumed stopped topic", "topic", topic)
}

// ReleaseQuarantine ends the quarantine of key in topic (with
// per-partition holds, in every partition of topic): later records with the
// key are produced to topic again. Releasing a key that is not quarantined
// is a no-op.
func (p *Producer) ReleaseQuarantine(topic string, key []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := p.topics[topic]
	if ts == nil {
		return
	}
	ts.eachUnit(func(u *unit) {
		if _, ok := u.quarantined[string(key)]; ok {
			delete(u.quarantined, string(key))
			p.updateSlowLocked(u)
			p.logf(kgo.LogLevelInfo, "korder: released quarantined key", u.logKVs("key", string(key))...)
		}
	})
}

// Quarantined returns the keys quarantined in topic (with per-partition
// holds, in any of its partitions), sorted.
func (p *Producer) Quarantined(topic string) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys [][]byte
	if ts := p.topics[topic]; ts != nil {
		seen := map[string]bool{}
		ts.eachUnit(func(u *unit) {
			for k := range u.quarantined {
				if !seen[k] {
					seen[k] = true
					keys = append(keys, []byte(k))
				}
			}
		})
	}
	slices.SortFunc(keys, func(a, b []byte) int { return slices.Compare(a, b) })
	return keys
}

func (p *Producer) logf(level kgo.LogLevel, msg string, kvs ...any) {
	if l, _ := p.cl.OptValue(kgo.WithLogger).(kgo.Logger); l != nil && l.Level() >= level {
		l.Log(level, msg, kvs...)
	}
}
