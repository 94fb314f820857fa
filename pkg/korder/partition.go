package korder

import (
	"cmp"
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partition is the state machine of a failed partition (-1: a topic) while kgo
// has it failed, its records are settled or produced again, or it is stopped.
// Failed and rejected records come into q (handOver); one worker settles them
// and hands records back with kgo's recovery, refused until every promise of
// the failure returned. mu is never held across a kgo call: while the worker is
// in one (calling), a record that comes back waits (parked), keeping kgo from
// recovering without it, as does a promise of the round the call hands kgo.
type partition struct {
	p  *Producer
	t  *topic
	id int32

	mu        sync.Mutex
	cond      sync.Cond // signals every change
	q         queue
	failure   *kgo.ErrProducePartitionFailed // kgo's current failure of the partition, as far as known here; nil: not failed
	ownOf     *kgo.ErrProducePartitionFailed // the last failure a record came back failed with (not rejected)
	probed    *kgo.ErrProducePartitionFailed // the failure a no-record recovery started: every promise before it returned
	calling   bool                           // the worker is in a recovery call, mu released: records that come back wait
	parked    int                            // records waiting in arriveLocked for calling to end: the partition is not idle (forget)
	stopped   error                          // Stop's error (ErrStopped, wrapping the cause): records that come back fail with it
	resumed   uint64                         // after Resume until recovered: records produced up to this seq that come back are stopped
	slow      int32                          // 1, counted in Producer.attn: stopped, or resumed and not recovered
	stopCause error                          // the error of the Stop that Resume ended
	worker    bool                           // the worker goroutine runs
	bytes     int64                          // the size of the records kept: in q, back and inRound (MaxHeldBytes)
	arrived   uint64                         // records that came back (failed or rejected)
	numbered  *kgo.ErrProducePartitionFailed // the failure of the first record numbered in it, not buffered before it (numberLocked)
	first     uint64                         // that record's number
	before    uint64                         // the records buffered before numbered, numbered below first
	wait      time.Duration                  // the next wait after a recovery refused for promises not returned
	inRound   map[*kgo.Record]*pending       // the records of the round in flight
	later     []held                         // records of a key it quarantined, produced since: diverted after the key's earlier ones (behind)
	rs        []*kgo.Record                  // the records of a recovery call, kept while kgo refuses it for promises not returned
	rsGen     uint64                         // q.gen when rs was made
	back      []*pending                     // the round's records that came back failed, in order: back in q when it ends
	from      int                            // narrowing down, or settling a failed batch: the policy to start from (call.from)
	settled   bool                           // the first record is settled, or written: the rest goes whole, past the policies
	roundEnd  chan struct{}                  // closed when the round in flight ends; nil once it did
	since     time.Time

	round, roundHi       uint64 // the last round sent (numbered over the Producer), and the number of its last record
	roundN               int    // the last round's records
	roundRest, roundKept bool   // the last round was a Retry's first batch (the rest follows); it kept the partition failed
	failedRd             bool   // a record of the last round came back failed
	suspectRd, suspectHi uint64 // the last round that failed (its records still kept are the suspects), and its roundHi
}

// The waits after kgo.ErrRecoveryPending, doubling while no record comes back.
const minPendingWait, maxPendingWait = time.Millisecond, 50 * time.Millisecond

// arriveLocked takes a record failed (err wraps fe) or rejected (err is fe).
func (pt *partition) arriveLocked(pd *pending, fe *kgo.ErrProducePartitionFailed, err error) (settle error) {
	pt.waitCallLocked()
	pd.err, pd.rejected = err, err == error(fe)
	pt.failure = fe                 // kgo may have failed it anew
	round := pt.inRound[pd.r] == pd // counted already
	pt.arrived++
	defer pt.cond.Broadcast()
	switch {
	case pt.p.isClosed():
		return wrap(ErrClosed, err)
	case pt.stopped != nil:
		pt.p.st.stopped.Add(1)
		return pt.stopped // made once: a stopped partition rejects at full speed
	case pt.resumed > 0 && pd.produced <= pt.resumed: // produced before Resume (0: before the Stop)
		pt.p.st.stopped.Add(1)
		return pt.stopCause
	case !round && pt.fullLocked(pd):
		pt.p.st.heldFull.Add(1)
		return wrap(ErrHeldFull, err)
	}
	if !pd.rejected {
		pt.ownOf = fe
	}
	pt.bytes += pd.size()
	if round {
		pd.round, pt.failedRd = pt.round, true // numbered here: a topic's records may be another partition's once its worker is back from kgo
	}
	if round && (len(pt.back) == 0 || pt.back[len(pt.back)-1].seq < pd.seq) {
		pt.back = append(pt.back, pd) // kgo fails a round's records in order
	} else {
		pt.q.insert(pd)
	}
	pt.p.hold(1) // before the worker may settle it
	pt.startLocked()
	return nil
}

// fullLocked: keeping pd would pass MaxHeld or MaxHeldBytes.
func (pt *partition) fullLocked(pd *pending) bool {
	n := pt.q.len() + len(pt.back) + len(pt.inRound) + len(pt.later)
	return n >= pt.p.cfg.maxHeld || pt.bytes+pd.size() > pt.p.cfg.maxHeldBytes
}

func (pt *partition) startLocked() {
	if !pt.worker && pt.stopped == nil {
		pt.worker = true
		go pt.run()
	}
}

// run is the worker, the only caller of kgo's recovery for the partition.
func (pt *partition) run() {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for {
		switch {
		case pt.p.isClosed():
			pt.endLocked(ErrClosed)
			return
		case pt.stopped != nil:
			pt.endLocked(nil)
			return
		case len(pt.inRound) > 0: // wait for the round's outcome
			pt.cond.Wait()
			continue
		case len(pt.later) > 0 && pt.failure == nil: // recovered: kgo returned the key's earlier records, diverted first
			pt.divertLaterLocked()
			continue
		case pt.q.len() == 0: // nothing to produce again: end, or one attempt to un-fail it
			if pt.failure == nil {
				pt.endLocked(nil)
				return
			}
			pt.from = 0 // no half is left to keep it failed for
			pt.recoverLocked(0, false)
			continue
		case pt.failure == nil: // records kept, and no failure of kgo's to recover
			pt.unprotectedLocked(errors.New("korder: records kept for a partition that kgo does not have failed"))
			continue
		case pt.ownOf != pt.failure: // kgo promises a failure's failed records before those it rejected
			if pt.barrierLocked() { // none came once every promise returned: what is kept goes whole, past the policies
				pt.settled = true
			}
			continue
		}
		pd := pt.q.rs[0]
		if pt.p.bound > 0 && errors.Is(pd.err, kgo.ErrMaxBuffered) { // a stall: one behind kgo's, then rounds of the bound
			n := 1
			if pt.settled {
				n = int(pt.p.bound)
			}
			pt.produceLocked(n, true)
			continue
		}
		if pt.settled || errors.Is(pd.err, context.Canceled) || errors.Is(pd.err, context.DeadlineExceeded) {
			pt.from = 0 // not its own fault: a record now settled, or another's context (kgo fails a batch whose first record's is done)
			n := 0
			if pt.p.bound > 0 && pt.q.len() > int(pt.p.bound) {
				n = int(pt.p.bound) // more would fail it again, past kgo.MaxBufferedPartitionRecords
			}
			pt.produceLocked(n, n > 0)
			continue
		}
		suspects, pd, probe := pt.suspectsLocked()
		switch {
		case probe: // one failed record is the culprit only once all came back
			pt.barrierLocked()
			continue
		case suspects == 0: // nothing that failed is kept: the first alone (as it may fail too), then the rest whole
			pt.from = 0
			pt.produceLocked(1, true)
			continue
		case pd.canceled() != nil:
			pt.p.st.canceled.Add(1)
			pt.settleLocked(pd, pd.canceled())
			continue
		}
		alone := suspects == 1 && (pt.suspectRd == 0 && pt.from == 0 || pt.suspectRd == pt.round && pt.roundN == 1) // alone in a failure, or in a round
		c := &call{pd: pd, cause: pd.err, suspects: suspects, alone: alone, from: pt.from, env: pt}
		pt.mu.Unlock()
		a := pt.p.decide(c)
		pt.mu.Lock()
		if a.kind != actProduce && alone && perRecordCause(pd.err) {
			pt.p.st.isolations.Add(1)
		}
		switch {
		case a.kind == actSettle: // even if the Producer closed meanwhile; the others that failed with it go to the same policy
			pt.settleLocked(pd, a.err)
			pt.from = c.at
		case pt.p.isClosed():
		case a.kind == actStop:
			pt.stopLocked(a.err)
		case !a.rest: // narrowing down: the halves start there too
			pt.from = c.at
			pt.produceLocked(a.n, false)
		default:
			if pt.p.bound > 0 && a.n > int(pt.p.bound) {
				a.n = int(pt.p.bound) // a stall's failed batch is the bound's
			}
			pt.produceLocked(a.n, true)
		}
	}
}

// suspectsLocked counts the suspects from the front (the last failed round's, or
// a first failure's failed records, and those between) and returns the first.
func (pt *partition) suspectsLocked() (n int, first *pending, probe bool) {
	hi, f := pt.suspectHi, func(pd *pending) bool { return pd.round == pt.suspectRd }
	if pt.suspectRd == 0 {
		hi, f = math.MaxUint64, func(pd *pending) bool { return !pd.rejected }
	}
	for i := 0; i < pt.q.len() && pt.q.rs[i].seq <= hi; i++ { // through the last one up to seq hi for which f holds
		if f(pt.q.rs[i]) {
			n, first = i+1, cmp.Or(first, pt.q.rs[i])
		}
	}
	return n, first, pt.suspectRd == 0 && n == 1 && pt.probed != pt.failure // probe: a lone suspect needs a barrier first
}

// settleLocked removes pd and calls its promise with err, without the lock.
func (pt *partition) settleLocked(pd *pending, err error) {
	if !pt.q.remove(pd) {
		return
	}
	pt.bytes -= pd.size()
	pt.mu.Unlock()
	pt.p.finish(pd, err)
	pt.mu.Lock()
}

// stopLocked stops the partition: kgo keeps it failed; its records fail.
func (pt *partition) stopLocked(cause error) {
	pt.stopped, pt.from = wrap(ErrStopped, cause), 0
	pt.slowLocked(1)
	pt.p.logf(kgo.LogLevelWarn, "korder: stopping partition", "topic", pt.t.name, "partition", pt.id, "err", cause)
	rs, err := pt.q.take(0, pt.q.len()), pt.stopped // only those kept now: a Resume meanwhile keeps later ones
	for _, pd := range rs {
		pt.bytes -= pd.size()
		pt.p.st.stopped.Add(1)
		pt.mu.Unlock()
		pt.p.finish(pd, err)
		pt.mu.Lock()
	}
}

// endLocked ends the worker: with err (closing), what it holds fails.
func (pt *partition) endLocked(err error) {
	for len(pt.later) > 0 { // stopped (the key's earlier records fail), or closing
		pt.divertLaterLocked()
	}
	pt.q.insertFront(pt.back)
	pt.back, pt.rs = nil, nil
	for err != nil && pt.q.len() > 0 {
		pd := pt.q.rs[0]
		pt.settleLocked(pd, wrap(err, pd.err))
	}
	pt.worker = false
	pt.mu.Unlock()
	pt.t.forget(pt) // if idle: forget checks under every lock
	pt.mu.Lock()
}

// produceLocked hands the first n kept records (0: all) back to kgo (see
// recoverLocked), trying again after a refusal for promises to return.
func (pt *partition) produceLocked(n int, rest bool) {
	for pt.settleCanceledLocked(n) {
	}
	for !pt.p.isClosed() && pt.failure != nil && pt.q.len() > 0 {
		if pt.quarantinedLocked() {
			continue // the lock was released: records may have come back
		}
		if err := pt.recoverLocked(n, rest); err == nil || pt.failure == nil { // recovered, or kgo refused for good
			return
		} // else again: after the wait for promises to return, or with kgo's new failure
	}
}

// recoverLocked recovers the partition with its first n records (0: all);
// nil if kgo took them, else the refusal, handled (refusedLocked).
func (pt *partition) recoverLocked(n int, rest bool) error {
	n = pt.q.head(n)
	keep := n < pt.q.len() || rest || pt.from > 0 // a part, a Retry's first batch and a half keep the partition failed
	if len(pt.rs) != n || pt.rsGen != pt.q.gen {  // else the same as the last refused call's
		pt.rs = pt.rs[:0] // kgo keeps the records, not the slice
		for _, pd := range pt.q.rs[:n] {
			pd.mark() // its promise is roundPromise: see handOver
			pt.rs = append(pt.rs, pd.r)
		}
		pt.rsGen = pt.q.gen
	}
	f := pt.failure
	still, err := pt.callLocked(f, keep, pt.rs)
	if !errors.Is(err, kgo.ErrRecoveryPending) {
		pt.rs = nil
	}
	if err != nil {
		pt.refusedLocked(f, err)
		return err
	}
	pt.acceptedLocked(f, still)
	if n == 0 {
		return nil
	}
	pt.round = pt.p.rounds.Add(1) // its promises wait for the lock (see callLocked)
	pt.roundRest, pt.roundKept, pt.roundN = rest, keep, n
	pt.p.moved.Add(1) // before held: see Flush
	pt.p.hold(-int64(n))
	pt.roundEnd = make(chan struct{})
	if pt.p.manual { // else the round lingers as any record: a flush would stop every partition's batching
		pt.p.flushUntil(pt.roundEnd)
	}
	return nil
}

// barrierLocked makes a no-record recovery that keeps the partition failed.
func (pt *partition) barrierLocked() bool {
	f := pt.failure
	still, err := pt.callLocked(f, true, nil)
	if err != nil {
		pt.refusedLocked(f, err)
		return false
	}
	pt.acceptedLocked(f, still)
	pt.probed = pt.failure
	return true // accepted: every promise of the failure has returned
}

// callLocked calls kgo's recovery of f with rs, the first kept records, the
// lock released: still is the failure the partition is still failed with; an
// error, a refusal. Accepted, rs leave q for inRound before their promises run.
func (pt *partition) callLocked(f *kgo.ErrProducePartitionFailed, keep bool, rs []*kgo.Record) (still *kgo.ErrProducePartitionFailed, err error) {
	pt.calling, pt.failedRd = true, false // failedRd: of the round the call may start
	pt.mu.Unlock()
	if keep {
		still, err = pt.p.cl.RecoverProducePartitionKeepFailed(f, pt.roundPromise, rs...)
	} else if err = pt.p.cl.RecoverProducePartition(f, pt.roundPromise, rs...); err != nil { // the failure itself: rs were taken; a refusal wraps one
		if g := (*kgo.ErrProducePartitionFailed)(nil); errors.As(err, &g) && err == error(g) {
			still, err = g, nil
		}
	}
	if pt.p.testCalled != nil {
		pt.p.testCalled(len(rs), keep, err == nil)
	}
	pt.mu.Lock()
	if n := len(rs); err == nil && n > 0 {
		pt.inRound = make(map[*kgo.Record]*pending, n)
		for _, pd := range pt.q.take(0, n) {
			pt.inRound[pd.r], pt.roundHi = pd, pd.seq
		}
	}
	pt.calling = false
	pt.cond.Broadcast() // records that came back meanwhile
	return still, err
}

// acceptedLocked takes kgo's acceptance of a recovery of f: the partition is
// now failed with still, or recovered (nil).
func (pt *partition) acceptedLocked(f, still *kgo.ErrProducePartitionFailed) {
	pt.settled, pt.wait = false, 0
	pt.resumed, pt.stopCause = 0, nil // every record produced before Resume came back
	pt.slowLocked(0)
	switch {
	case still == f: // a topic's records rejected during its recovery: whole
		pt.ownOf, pt.settled = f, true
	case still != nil: // a new failure (a record of rs that failed it comes back)
		pt.failure, pt.ownOf = still, still
	default:
		pt.failure = nil // recovered
	}
}

// refusedLocked takes kgo's refusal of a recovery of f.
func (pt *partition) refusedLocked(f *kgo.ErrProducePartitionFailed, err error) {
	var g *kgo.ErrProducePartitionFailed
	switch {
	case errors.Is(err, kgo.ErrRecoveryPending): // every caller tries again, after this wait
		pt.waitPendingLocked()
	case errors.As(err, &g) && g != f: // failed anew (an abort recovered f): the new failure is the partition's; kept records go first
		pt.failure, pt.wait = g, 0
	default: // a refusal for good settles the kept records
		pt.unprotectedLocked(err)
	}
}

// waitPendingLocked waits after ErrRecoveryPending until a record comes back.
func (pt *partition) waitPendingLocked() {
	d := max(pt.wait, minPendingWait)
	pt.wait = min(2*d, maxPendingWait)
	arrived := pt.arrived
	tm := time.AfterFunc(d, func() { pt.mu.Lock(); pt.cond.Broadcast(); pt.mu.Unlock() }) // or a timer: the last promise may be returning already
	pt.cond.Wait()
	tm.Stop()
	if pt.arrived != arrived {
		pt.wait = 0 // records still come back: their last one returns soon
	}
}

// unprotectedLocked settles the kept records with their kgo errors once kgo
// refuses the recovery for good (an abort, a purge): nothing orders them.
func (pt *partition) unprotectedLocked(err error) {
	pt.p.logf(kgo.LogLevelWarn, "korder: kgo refuses to recover the partition (a transaction abort, a purge?), failing its kept records", "topic", pt.t.name, "partition", pt.id, "records", pt.q.len(), "err", err)
	pt.failure, pt.ownOf, pt.probed, pt.settled, pt.suspectRd, pt.from, pt.wait = nil, nil, nil, false, 0, 0, 0
	for pt.q.len() > 0 {
		pd := pt.q.rs[0]
		pt.settleLocked(pd, pd.err)
	}
}

// quarantinedLocked diverts the kept records of quarantined keys; false: none.
func (pt *partition) quarantinedLocked() bool {
	var rs []*pending
	var qs []quarantined
	pt.t.amu.Lock()
	for i := 0; i < pt.q.len() && len(pt.t.quarantine) > 0; i++ { // (none quarantined: nothing to look up)
		pd := pt.q.rs[i]
		if q, ok := pt.t.quarantinedLocked(pd.r.Key, pd.seq); ok {
			rs, qs = append(rs, pd), append(qs, q)
		}
	}
	pt.t.amu.Unlock()
	for i, pd := range rs {
		pt.q.remove(pd)
		pt.bytes -= pd.size()
		pt.mu.Unlock()
		pt.p.divertKeyed(pt.t, pd, qs[i], func(err error) { pt.p.finish(pd, err) })
		pt.mu.Lock()
	}
	return len(rs) > 0
}

type held struct {
	pd *pending
	q  quarantined // the quarantine it was produced under (behind)
}

// behind keeps pd, whose key failed pt quarantines (q), until pt recovers: kgo
// has then returned the key's earlier records, which go first. Not kept: pt
// holds none (or is closing), or it is full (at MaxHeld or MaxHeldBytes).
func (pt *partition) behind(pd *pending, q quarantined) (kept, full bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.waitCallLocked()
	switch {
	case pt.p.isClosed() || len(pt.later) == 0 && (pt.failure == nil || !pt.worker || pt.stopped != nil):
		return false, false
	case pt.fullLocked(pd):
		return false, true
	}
	pt.later, pt.bytes = append(pt.later, held{pd, q}), pt.bytes+pd.size()
	return true, false
}

// divertLaterLocked diverts the first record kept behind its key, even if the
// key was released since, or the Producer is closing (the copy's outcome).
func (pt *partition) divertLaterLocked() {
	h := pt.later[0]
	pt.mu.Unlock()
	pt.p.divertKeyed(pt.t, h.pd, h.q, func(err error) { pt.p.finish(h.pd, err) })
	pt.mu.Lock()
	pt.later, pt.bytes = pt.later[1:], pt.bytes-h.pd.size() // popped once diverted: a record produced meanwhile is kept behind it
}

// waitCallLocked waits for the worker's recovery call to end (see partition).
func (pt *partition) waitCallLocked() {
	for pt.calling {
		pt.parked++ // forget must not drop pt meanwhile: the record would come back to a partition no longer kept
		pt.cond.Wait()
		pt.parked--
	}
}

// settleCanceledLocked settles the first of n records whose context is done.
func (pt *partition) settleCanceledLocked(n int) bool {
	for _, pd := range pt.q.rs[:pt.q.head(n)] {
		if err := pd.canceled(); err != nil {
			pt.p.st.canceled.Add(1)
			pt.settleLocked(pd, err)
			return true
		}
	}
	return false
}

// roundPromise is the promise of the records produced again.
func (pt *partition) roundPromise(r *kgo.Record, err error) {
	pt.mu.Lock()
	for pt.calling { // see callLocked
		pt.cond.Wait()
	}
	pd := pt.inRound[r]   // every record kgo took (see callLocked)
	pt.bytes -= pd.size() // counted again if it comes back here
	if err == nil {
		pt.leaveRoundLocked(r) // written: no longer kept once its promise runs
	}
	pt.mu.Unlock()
	pt.p.result(pd, r, err) // kept before it leaves the round
	if err != nil {
		pt.mu.Lock() // no call meanwhile: the worker waits for the round's records (run)
		pt.leaveRoundLocked(r)
		pt.mu.Unlock()
	}
}

// leaveRoundLocked takes r out of the round; the last ends it, back first in q.
func (pt *partition) leaveRoundLocked(r *kgo.Record) {
	if delete(pt.inRound, r); len(pt.inRound) > 0 {
		return
	}
	pt.q.insertFront(pt.back)
	close(pt.roundEnd)
	pt.inRound, pt.back, pt.roundEnd = nil, nil, nil
	if pt.failedRd && !pt.roundKept {
		pt.suspectRd = 0 // later records may have failed with it: as a first failure
	} else if pt.failedRd {
		pt.suspectRd, pt.suspectHi = pt.round, pt.roundHi
	} else if pt.roundRest {
		pt.settled = true // the rest follows, past the policies
	}
	pt.cond.Broadcast()
}

// slowLocked counts the partition (1) in Producer.attn while stopped, and after
// Resume until recovered: records produced meanwhile are numbered (resumed).
func (pt *partition) slowLocked(slow int32) {
	pt.p.attn.Add(slow - pt.slow)
	pt.slow = slow
}

// resumeLocked ends a Stop: records up to seq still fail with ErrStopped.
func (pt *partition) resumeLocked(seq uint64) {
	pt.p.logf(kgo.LogLevelInfo, "korder: resumed stopped partition", "topic", pt.t.name, "partition", pt.id)
	pt.resumed, pt.stopCause, pt.stopped = seq, pt.stopped, nil
	pt.settled, pt.ownOf = true, pt.failure // rejected for the Stop, not its own fault: whole, past the policies
	pt.startLocked()
	pt.cond.Broadcast()
}

// backoff and deadLetter make the partition its policies' stepEnv.
func (pt *partition) backoff(d time.Duration) bool {
	select {
	case <-time.After(d):
		return !pt.p.isClosed()
	case <-pt.p.closing:
		return false
	}
}

func (pt *partition) deadLetter(topic string, pd *pending, cause error, quarantine bool) error {
	var e *quarantined
	if quarantine && pd.r.Key != nil {
		var ok bool
		if e, ok = pt.t.reserve(pt, pd.r.Key, topic, pd.seq); !ok {
			return errors.New("korder: quarantine full")
		}
	}
	done, ch := make(chan struct{}), make(chan error, 1)
	if pt.p.manual {
		pt.p.flushUntil(done)
	}
	pt.p.dl.divert(topic, pd, cause, func(err error) { ch <- err })
	err := <-ch
	close(done)
	if t := pt.t; e != nil {
		t.amu.Lock()
		if t.quarantine[string(pd.r.Key)] == e { // not released meanwhile
			if e.cause = cause; err != nil {
				delete(t.quarantine, string(pd.r.Key))
			}
			t.setAttnLocked()
		}
		t.amu.Unlock()
	}
	return err
}

const seqStep = 1 << 20 // room below each number for as many records buffered before a failure, less one (numberLocked); more keep their arrival order

// numberLocked numbers a record as it first comes back with failure f, in
// Produce order: kgo returns a partition's records in that order, but for those
// buffered before f (kgo.ErrBufferedBeforeFailure), numbered below f's first.
func (pt *partition) numberLocked(f *kgo.ErrProducePartitionFailed, err error) uint64 {
	before := errors.Is(err, kgo.ErrBufferedBeforeFailure)
	if before && pt.numbered == f && pt.before < seqStep-1 {
		pt.before++
		return pt.first - seqStep + pt.before
	}
	seq := pt.p.seq.Add(seqStep)
	if !before && pt.numbered != f {
		pt.numbered, pt.first, pt.before = f, seq, 0
	}
	return seq
}
