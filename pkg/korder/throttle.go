package korder

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Stalled partitions.
//
// kgo buffers the records of every partition in one buffer, bounded by
// MaxBufferedRecords: once it is full, Produce blocks, whatever partition
// the record is for. A partition that stops making progress without
// failing (its broker is down, or answers with a retryable error: kgo
// keeps its records and retries them, and with kgo's defaults waits for a
// metadata refresh between tries) keeps taking buffer until it has all of
// it, and then every partition's records wait: one slow partition is a
// topic outage, well before kgo gives up on any record and
// FailPartitionOnProduceFailure can isolate the partition.
//
// With learned holds and pinned partitions (pin.go: kgo's default
// partitioner), the Producer knows a keyed record's partition P before kgo
// does, and counts the records of P it has in kgo. P may have at most
// partCap of them (three quarters of MaxBufferedRecords), so that the
// other partitions always have a quarter of kgo's buffer. A record of P
// beyond that:
//
//   - waits in Produce, as it would in kgo for room in the buffer, while P
//     makes progress (some record of P finished in the last StallAfter):
//     P is busy, not stalled, and the wait is kgo's own backpressure;
//   - is held, in order, once P has made no progress for StallAfter (P is
//     stalled): Produce returns, and the topic's other partitions keep
//     flowing. Every later record of P is held behind it, and the held
//     records are handed to kgo, in order, as P's records in kgo finish,
//     up to partCap at a time. They count against MaxHeldBytes (and
//     MaxHeld): when the topic's held records reach it, Produce blocks,
//     or the record fails with ErrHeldFull with RejectWhenHeldFull.
//
// While a partition of the topic holds records, an unkeyed record, which
// kgo's partitioner could put in any partition, including the stalled one,
// ahead of its held records, is pinned by the Producer to a partition that
// holds nothing (rotating over them), and failing that held as one of
// some partition's records.
//
// If P fails in kgo meanwhile, its held records are handed to kgo as P's
// records in kgo finish: kgo rejects them, and the learned recovery
// collects them, in order, with the others (learned.go). While a learned
// recovery's gate is closed, nothing is handed to kgo.

// slowPart is a partition of a topic with pinned partitions.
type slowPart struct {
	part int32

	in  atomic.Uint64 // pinned records of the partition handed to kgo
	_   [cacheLine]byte
	out atomic.Uint64 // ... whose kgo promise ran
	_   [cacheLine]byte
	// slow: records of the partition take the locked path (Produce
	// checks it without the lock): it holds records, or a Produce waits
	// for room.
	slow atomic.Bool

	// Under p.mu.
	queue     []*pending    // held, in produce order
	waiters   int           // Produce calls waiting for room
	space     chan struct{} // closed when the partition's records in kgo finish, or its state changes
	markOut   uint64        // out when progress was last seen
	markAt    time.Time     // and when
	checked   time.Time     // the last stalledLocked
	stalled   bool          // no progress for stallAfter; stays set while queue holds records
	releasing bool          // a goroutine hands queue to kgo
	since     time.Time     // queue holds records since
}

func (sp *slowPart) inKgo() uint64 { return sp.in.Load() - sp.out.Load() }

// pinState is the topic's pinned partitions: the partition count kgo
// partitions keyed records over, and the partitions' slowParts.
type pinState struct {
	n     *atomic.Int32               // see pinPartitioner.count
	parts atomic.Pointer[[]*slowPart] // copy-on-write, indexed by partition; grown under p.mu
	nSlow atomic.Int32                // partitions that are slow
	rr    atomic.Uint32               // rotates the partitions unkeyed records are pinned to
	_     [0]func()                   // not comparable
}

// fastSlowPart returns the slowPart of a keyed record for the lock-free
// path, and whether the record must take the locked path instead: its
// partition's slowPart does not exist yet, or it is slow or full, or the
// record is unkeyed while a partition of the topic is slow. It returns nil,
// false for a record the Producer does not pin.
func (p *Producer) fastSlowPart(ps *pinState, r *kgo.Record) (*slowPart, bool) {
	part, ok := p.pin.keyedPartition(r, ps.n.Load())
	if !ok {
		return nil, ps.nSlow.Load() > 0
	}
	parts := ps.parts.Load()
	if parts == nil || int(part) >= len(*parts) {
		return nil, true
	}
	sp := (*parts)[part]
	if sp.slow.Load() {
		return nil, true
	}
	// Above the soft cap, one record in stallSample checks whether the
	// partition stalled; at the cap, every one does.
	if n := sp.inKgo(); n >= p.partCap || n >= p.softCap && sp.in.Load()%stallSample == 0 {
		return nil, true
	}
	return sp, false
}

// slowPartsLocked returns the topic's slowParts, grown to its partition
// count, or nil if that is not known yet.
func (ps *pinState) slowPartsLocked() []*slowPart {
	n := int(ps.n.Load())
	var parts []*slowPart
	if cur := ps.parts.Load(); cur != nil {
		parts = *cur
	}
	if n <= len(parts) {
		return parts
	}
	next := make([]*slowPart, n)
	copy(next, parts)
	for i := len(parts); i < n; i++ {
		next[i] = &slowPart{part: int32(i), space: make(chan struct{})}
	}
	ps.parts.Store(&next)
	return next
}

// pinAction is what the locked path does with a record of a topic with
// pinned partitions.
type pinAction int

// stallSample: above its soft cap, one record of a partition in
// stallSample takes the locked path to check whether it stalled.
const stallSample = 64

const (
	pinDirect pinAction = iota // hand it to kgo (pinned if pd.sp is set, counted in sp)
	pinQueued                  // held in pd.sp's queue
	pinWait                    // wait for room (wait, until)
	pinFull                    // the held records are at their bound
)

// routeLocked decides what happens to pd, a record of a learned unit that
// is neither gated nor holding. With wait false (a record released from
// the unit's gate), a record it pins goes into its partition's queue: it
// never waits and is never full.
func (p *Producer) routeLocked(u *unit, pd *pending, wait bool) (pinAction, chan struct{}, time.Time) {
	ps := u.t.pin
	pd.sp = nil
	if ps == nil {
		return pinDirect, nil, time.Time{}
	}
	n := ps.n.Load()
	parts := ps.slowPartsLocked()
	if n <= 0 || int(n) > len(parts) {
		return pinDirect, nil, time.Time{}
	}
	var sp *slowPart
	if part, ok := p.pin.keyedPartition(pd.r, n); ok {
		sp = parts[part]
	} else if ps.nSlow.Load() > 0 || u.partialGateLocked() {
		if sp = p.unkeyedPartLocked(u, parts[:n]); sp == nil {
			return pinDirect, nil, time.Time{}
		}
	} else {
		return pinDirect, nil, time.Time{}
	}
	pd.sp = sp
	if !wait {
		// Released from the gate: into the partition's queue, which
		// releaseSlow hands to kgo in order. Handing it from here
		// (outside p.mu, after the records before it in the batch)
		// would race releaseSlow, which may hand a later record of
		// the partition, queued behind it, first.
		if pd.size == 0 {
			pd.size = heldSize(pd.r)
		}
		u.t.heldBytes += pd.size
		sp.queue = append(sp.queue, pd)
		p.setSlowLocked(u.t, sp, true)
		p.kickReleaseLocked(u, sp)
		return pinQueued, nil, time.Time{}
	}
	inKgo := sp.inKgo()
	// Records of the partition not handed to kgo yet (held, or being
	// handed by releaseSlow) go first: this one goes behind them. So does
	// a record of a partition that a gate holds (learned.go), unless the
	// gate is opening (wait false: it releases what it held).
	behind := len(sp.queue) > 0 || sp.releasing || wait && u.gatesLocked(sp.part)
	stalled := behind || inKgo >= p.softCap && p.stalledLocked(sp)
	if !stalled && inKgo < p.partCap {
		sp.in.Add(1)
		pd.r.Partition = pinnedPartition(sp.part)
		return pinDirect, nil, time.Time{}
	}
	if !stalled && wait {
		// Busy, not stalled: wait for room, as kgo would.
		return pinWait, sp.space, sp.markAt.Add(p.cfg.stallAfter)
	}
	if pd.size == 0 {
		pd.size = heldSize(pd.r)
	}
	if wait {
		countFull := p.cfg.maxHeld > 0 && len(sp.queue) >= p.cfg.maxHeld
		bytesFull := u.t.heldBytes > 0 && u.t.heldBytes+pd.size > p.cfg.maxHeldBytes
		if countFull {
			return pinFull, sp.space, time.Time{}
		}
		if bytesFull {
			pd.sp = nil
			return pinFull, nil, time.Time{}
		}
		pd.seq = u.nextSeqLocked()
	}
	u.t.heldBytes += pd.size
	if len(sp.queue) == 0 {
		sp.since = time.Now()
	}
	sp.queue = append(sp.queue, pd)
	p.setSlowLocked(u.t, sp, true)
	if inKgo == 0 {
		// No promise of the partition is to come that would hand it
		// to kgo (see serviceLocked).
		p.kickReleaseLocked(u, sp)
	}
	return pinQueued, nil, time.Time{}
}

// unkeyedPartLocked returns the partition an unkeyed record is pinned to
// while a partition of the topic is slow or gated (it could otherwise go
// to one that holds records, ahead of them): one that is not slow and has room,
// rotating over them, or else one that is slow (the record is held as its
// own), but never one that kgo has failed or korder stopped (kgo would
// reject the record; unpinned, kgo routes it around them). It returns nil
// if there is none.
func (p *Producer) unkeyedPartLocked(u *unit, parts []*slowPart) *slowPart {
	failed := p.cl.FailedProducePartitions()[u.t.name]
	usable := func(sp *slowPart) bool {
		if ps := u.lparts[sp.part]; ps != nil && ps.stopped != nil {
			return false
		}
		return !slices.Contains(failed, sp.part) && !slices.Contains(failed, -1)
	}
	start := int(u.t.pin.rr.Add(1)/64) % len(parts)
	var fallback *slowPart
	for i := range parts {
		sp := parts[(start+i)%len(parts)]
		if !usable(sp) {
			continue
		}
		if !sp.slow.Load() && sp.inKgo() < p.partCap {
			return sp
		}
		if fallback == nil {
			fallback = sp
		}
	}
	return fallback
}

// stalledLocked returns whether sp is stalled: none of its records in kgo
// finished for StallAfter, since the first time it was asked (with sp at
// its soft cap). It stays stalled until it holds nothing.
func (p *Producer) stalledLocked(sp *slowPart) bool {
	if sp.stalled {
		return true
	}
	now := time.Now()
	last := sp.checked
	sp.checked = now
	if out := sp.out.Load(); out != sp.markOut || now.Sub(last) > 2*p.cfg.stallAfter {
		// Progress, or the first check in a while (what happened
		// since the last one is unknown): count from now.
		sp.markOut, sp.markAt = out, now
		return false
	}
	if now.Sub(sp.markAt) >= p.cfg.stallAfter || sp.inKgo() == 0 && len(sp.queue) > 0 {
		if !sp.stalled {
			p.logf(kgo.LogLevelWarn, "korder: partition stalled, holding its records so that the others keep flowing", "partition", sp.part, "in_kgo", sp.inKgo())
		}
		sp.stalled = true
	}
	return sp.stalled
}

func (p *Producer) setSlowLocked(ts *topicState, sp *slowPart, slow bool) {
	if sp.slow.Load() == slow {
		return
	}
	sp.slow.Store(slow)
	if slow {
		ts.pin.nSlow.Add(1)
	} else {
		ts.pin.nSlow.Add(-1)
		ts.wakeLocked()
	}
}

func (sp *slowPart) wakeLocked() {
	close(sp.space)
	sp.space = make(chan struct{})
}

// slowOut counts out a pinned record whose kgo promise ran.
func (p *Producer) slowOut(u *unit, sp *slowPart) {
	sp.out.Add(1)
	if sp.slow.Load() {
		p.mu.Lock()
		p.serviceLocked(u, sp)
		p.mu.Unlock()
	}
}

// serviceLocked wakes what waits for sp's room, and hands its held records
// to kgo while it has room.
func (p *Producer) serviceLocked(u *unit, sp *slowPart) {
	if sp.waiters > 0 && sp.inKgo() < p.partCap-p.partCap/8 {
		sp.wakeLocked()
	}
	p.kickReleaseLocked(u, sp)
	p.maybeUnslowLocked(u.t, sp)
}

func (p *Producer) maybeUnslowLocked(ts *topicState, sp *slowPart) {
	if len(sp.queue) == 0 && sp.waiters == 0 && !sp.releasing {
		sp.stalled = false
		p.setSlowLocked(ts, sp, false)
	}
}

// kickReleaseLocked starts a goroutine that hands sp's held records to kgo,
// unless one runs, or the unit's gate is closed (openGate kicks every
// partition once it opens), or there is no room. Not on the caller's
// goroutine: that may be kgo's promise goroutine, and kgo's Produce may
// wait for room that only promises free.
func (p *Producer) kickReleaseLocked(u *unit, sp *slowPart) {
	if len(sp.queue) == 0 || sp.releasing || u.gatesLocked(sp.part) || p.closed || sp.inKgo() >= p.partCap {
		return
	}
	sp.releasing = true
	go p.releaseSlow(u, sp)
}

// kickAllLocked kicks the release of every partition of a learned unit.
func (p *Producer) kickAllLocked(u *unit) {
	if u.t.pin == nil {
		return
	}
	if parts := u.t.pin.parts.Load(); parts != nil {
		for _, sp := range *parts {
			p.kickReleaseLocked(u, sp)
		}
	}
}

func (p *Producer) releaseSlow(u *unit, sp *slowPart) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(sp.queue) > 0 && !u.gatesLocked(sp.part) && !p.closed {
		room := int(p.partCap) - int(sp.inKgo())
		if room <= 0 {
			break
		}
		n := min(room, len(sp.queue))
		batch := sp.queue[:n:n]
		sp.queue = sp.queue[n:]
		if len(sp.queue) == 0 {
			sp.queue = nil
			if !sp.since.IsZero() {
				p.addPartHoldLocked(u.t.name, sp.part, time.Since(sp.since))
				sp.since = time.Time{}
			}
		}
		u.t.unholdLocked(batch)
		var (
			gone []*pending
			errs []error
		)
		kept := batch[:0]
		for _, pd := range batch {
			if err := canceled(pd); err != nil {
				gone, errs = append(gone, pd), append(errs, err)
				continue
			}
			u.in.Add(1) // counted in: handed to kgo (the gate waits for it)
			sp.in.Add(1)
			pd.r.Partition = pinnedPartition(sp.part)
			kept = append(kept, pd)
		}
		p.stats.Canceled += int64(len(gone))
		sp.wakeLocked()
		p.mu.Unlock()
		for i, pd := range gone {
			// Its context ended while it was held: kgo would fail
			// it and its partition with it.
			pd.sp = nil
			pd.promise(pd.r, errs[i])
		}
		for _, pd := range kept {
			p.cl.Produce(pd.ctx, pd.r, func(_ *kgo.Record, err error) { p.finished(u, pd, err) })
		}
		p.mu.Lock()
	}
	sp.releasing = false
	sp.wakeLocked()
	p.maybeUnslowLocked(u.t, sp)
}

// eachSlowPartLocked calls fn for each slowPart of the topic.
func (ts *topicState) eachSlowPart(fn func(*slowPart)) {
	if ts.pin == nil {
		return
	}
	if parts := ts.pin.parts.Load(); parts != nil {
		for _, sp := range *parts {
			fn(sp)
		}
	}
}

// waitPinLocked waits, for the Produce of pd, for room in pd.sp (wait is
// its space; until, if set, is when it may count as stalled) or, if pd.sp
// is nil, for the topic's held bytes to shrink. It returns false, with p.mu
// unlocked and the promise called, if the record's context ended; else
// true, with p.mu locked.
func (p *Producer) waitPinLocked(u *unit, pd *pending, wait chan struct{}, until time.Time) bool {
	ts := u.t
	sp := pd.sp
	pd.sp = nil
	if sp != nil {
		sp.waiters++
		p.setSlowLocked(ts, sp, true)
	} else {
		wait = ts.space
		ts.heldWaiters++
	}
	p.mu.Unlock()
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timeout = t.C
	}
	var err error
	select {
	case <-wait:
	case <-timeout:
	case <-pd.ctx.Done():
		err = pd.ctx.Err()
	}
	p.mu.Lock()
	if sp != nil {
		sp.waiters--
		p.maybeUnslowLocked(ts, sp)
	} else {
		ts.heldWaiters--
	}
	if err != nil {
		p.mu.Unlock()
		pd.promise(pd.r, err)
		return false
	}
	return true
}
