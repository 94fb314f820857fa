package korder

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partition is the state machine of one failed partition (or, as partition
// -1, of a topic that failed before its records were partitioned). It exists
// while kgo has the partition failed, while records of it are being settled
// or produced again, and while it is stopped; a healthy partition has none.
//
// kgo rejects every later record of a failed partition; each failed or
// rejected record comes back in its promise, and the partition collects them
// (q, in Produce order) and counts them (seen). One worker settles them
// through the policies and hands records back with RecoverProducePartition
// (buffered at the front, un-failing it in one step; refused while records
// have not come back: the worker waits for them). Everything is under mu;
// the worker waits on cond, which every change signals.
type partition struct {
	p  *Producer
	t  *topic
	id int32

	mu        sync.Mutex
	cond      sync.Cond
	q         queue
	seen      int    // records of kgo's current failure of the partition received
	failure   error  // that failure: the hook's error, which its rejections carry
	failed    bool   // kgo has the partition failed
	organic   bool   // a record that the failure itself failed (not rejected) came back
	stopped   error  // Stop's error (ErrStopped, wrapping the cause): records that come back fail with it
	resumed   uint64 // after Resume until recovered: records up to this seq that come back are stopped
	stopCause error  // the error of the Stop that Resume ended
	worker    bool   // the worker goroutine runs
	holding   bool   // the worker holds the topic: records missing under load
	full      bool   // at MaxHeld (the topic's full count includes it)
	inRound   map[*kgo.Record]*pending
	back      []*pending // the round's records that came back failed, in order: back in q when it ends
	round     uint64     // the last round sent
	failedRd  bool       // a record of the last round failed
	roundRest bool       // the last round was a Retry's first batch: the rest follows
	suspectRd uint64     // the last round that failed: its records still kept are the suspects
	roundHi   uint64     // the number of the last round's last record
	roundKept bool       // the last round kept the partition failed
	suspectHi uint64     // suspectRd's roundHi
	settled   bool       // the first record is settled, or written: the rest goes whole, past the policies
	roundEnd  chan struct{}
	since     time.Time
}

// arriveLocked takes a failed or rejected record of the partition.
func (pt *partition) arriveLocked(pd *pending, err error, rejected bool) (settle error) {
	// Not failed here nor in kgo: kgo failed the record alone (a fatal
	// producer ID error, an abort, a purge), or recovered it since (an abort).
	if !pt.failed && failureOf(pt.p.cl, pt.t.name, pt.id) == nil {
		return err
	}
	pd.err = err
	if rejected && !pt.failed && errors.Is(err, pt.failure) { // kgo kept the topic failed: rejected while its recovery buffered
		pt.organic, pt.settled = true, true // no own record comes: the rest goes whole, past the policies
	}
	if !rejected || pt.currentLocked(err) {
		pt.seen++
	}
	pt.failed = true
	if !rejected || errors.Is(err, kgo.ErrMaxBuffered) { // the failure's own record (MaxBufferedPartitionRecords)
		pt.organic = true
	}
	defer pt.cond.Broadcast()
	switch {
	case pt.p.isClosed():
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case pt.stopped != nil:
		pt.p.st.stopped.Add(1)
		return pt.stopped // made once: a stopped partition rejects at full speed
	case pd.seq <= pt.resumed:
		// Produced before Resume: stopped.
		pt.p.st.stopped.Add(1)
		return pt.stopCause
	case rejected && pt.p.cfg.rejectWhenFull && pt.atBoundLocked():
		pt.p.st.heldFull.Add(1)
		return fmt.Errorf("%w: %w", ErrHeldFull, err)
	}
	if len(pt.inRound) > 0 && pd.round == pt.round && (len(pt.back) == 0 || pt.back[len(pt.back)-1].seq < pd.seq) {
		pt.back = append(pt.back, pd) // kgo fails a round's records in order
	} else {
		pt.q.insert(pd)
	}
	pt.t.heldBytes.Add(pd.size())
	pt.checkFullLocked()
	pt.startLocked()
	return nil
}

// currentLocked takes kgo's failure f (a hook's, or a rejection's): true if
// current, false if kgo dropped it (an abort); a new one restarts the count.
func (pt *partition) currentLocked(f error) bool {
	if !errors.Is(f, pt.failure) {
		if !errors.Is(failureOf(pt.p.cl, pt.t.name, pt.id), f) {
			return false
		}
		pt.failure, pt.seen = f, 0
	}
	return true
}

// recover recovers the partition in kgo with its count, which restarts;
// refused if kgo failed it anew since (its hook is coming): that restarts it.
func (pt *partition) recover(keep bool, rs ...*kgo.Record) error {
	if cur := failureOf(pt.p.cl, pt.t.name, pt.id); pt.failure != nil && missing(cur) && !errors.Is(cur, pt.failure) {
		pt.failure, pt.seen = nil, 0
		return cur
	}
	err := pt.p.cl.RecoverProducePartition(pt.t.name, pt.id, pt.seen, keep, pt.roundPromise, rs...)
	if err == nil {
		pt.seen = 0 // so does kgo's
	}
	return err
}

func (pt *partition) atBoundLocked() bool {
	return (pt.p.cfg.maxHeld > 0 && pt.q.len()+len(pt.back) >= pt.p.cfg.maxHeld) || pt.t.heldBytes.Load() >= pt.p.cfg.maxHeldBytes
}

// checkFullLocked makes Produce for the topic block while the partition is
// at its bound (unless RejectWhenHeldFull).
func (pt *partition) checkFullLocked() {
	full := !pt.p.cfg.rejectWhenFull && pt.atBoundLocked()
	if full != pt.full {
		pt.full = full
		if full {
			pt.t.block(1)
		} else {
			pt.t.block(-1)
		}
	}
}

func (pt *partition) startLocked() {
	if !pt.worker && pt.stopped == nil {
		pt.worker = true
		go pt.run()
	}
}

// run is the worker: it settles the partition's records until the partition
// is healthy, stopped, or the Producer closes.
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
		case len(pt.inRound) > 0, // wait for the round's outcome
			pt.id >= 0 && pt.t.minus.Load(): // the topic's own failure goes first
			pt.cond.Wait()
			continue
		case pt.q.len() == 0:
			if !pt.failed {
				pt.endLocked(nil)
				return
			}
			if err := pt.recoverLocked(0, false); err != nil && !missing(err) { // nothing to produce again: un-fail
				pt.unprotectedLocked(err)
			} else if err != nil {
				pt.cond.Wait()
			}
			continue
		case pt.failed && !pt.organic: // the failure's own records come first
			pt.cond.Wait()
			continue
		}
		pd := pt.q.front()
		if err := pd.canceled(); err != nil {
			pt.settleLocked(pd, err)
			pt.p.st.canceled.Add(1)
			continue
		}
		if pt.p.bound > 0 && errors.Is(pd.err, kgo.ErrMaxBuffered) {
			// Past kgo's MaxBufferedPartitionRecords (a stall): one
			// goes behind kgo's; once it is written, the rest follow
			// in rounds of the bound, not flooding kgo's buffer.
			n := 1
			if pt.settled {
				n = int(pt.p.bound)
			}
			pt.produceLocked(n, true)
			continue
		}
		if pt.settled || errors.Is(pd.err, context.Canceled) || errors.Is(pd.err, context.DeadlineExceeded) {
			// Failed or rejected because of a record now settled,
			// or with another record's context (kgo fails a batch
			// whose first record's is done): not its own fault.
			pt.produceLocked(0, false)
			continue
		}
		suspects, pd, wait := pt.suspectsLocked()
		if wait {
			pt.cond.Wait()
			continue
		}
		c := &call{pd: pd, suspects: suspects, env: pt}
		pt.mu.Unlock()
		a := pt.p.decide(c)
		pt.mu.Lock()
		if pt.p.isClosed() {
			continue
		}
		switch a.kind {
		case actSettle:
			pt.settleLocked(pd, a.err)
			pt.settled = true
		case actStop:
			pt.stopLocked(a.err)
		case actProduce:
			if a.rest && pt.p.bound > 0 && (a.n == 0 || a.n > int(pt.p.bound)) {
				a.n = int(pt.p.bound) // a stall's failed batch is the bound's
			}
			pt.produceLocked(a.n, a.rest)
		}
	}
}

// suspectsLocked returns how many records from the front are suspects, and
// the first, which the policies decide on: the last failed round's records,
// or a first failure's failed records (not those rejected after it), with
// the rejected records of other goroutines numbered between them. wait: one
// alone is the culprit once all came back (kgo takes a no-record recovery).
func (pt *partition) suspectsLocked() (n int, first *pending, wait bool) {
	hi, f := pt.suspectHi, func(pd *pending) bool { return pd.round == pt.suspectRd }
	if pt.suspectRd == 0 {
		hi, f = math.MaxUint64, func(pd *pending) bool { return !errors.Is(pd.err, kgo.ErrProducePartitionFailed) }
	}
	if n, first = pt.q.span(hi, f); first == nil {
		first = pt.q.front()
	}
	return n, first, pt.suspectRd == 0 && n == 1 && missing(pt.recover(true))
}

// settleLocked removes pd and calls its promise with err, without the lock.
func (pt *partition) settleLocked(pd *pending, err error) {
	if !pt.q.remove(pd) {
		return
	}
	pt.t.heldBytes.Add(-pd.size())
	pt.checkFullLocked()
	pt.mu.Unlock()
	pt.p.finish(pd, err)
	pt.mu.Lock()
}

// stopLocked stops the partition: kgo keeps it failed, and every record of
// it, collected or yet to come back, fails with ErrStopped wrapping cause
// (the record's error, never nil).
func (pt *partition) stopLocked(cause error) {
	pt.stopped = fmt.Errorf("%w: %w", ErrStopped, cause)
	pt.p.logf(kgo.LogLevelWarn, "korder: stopping partition", "topic", pt.t.name, "partition", pt.id, "err", cause)
	pt.releaseLocked()
	// Only the records kept now: a Resume while the lock is released for
	// a promise keeps the records produced after it (arriveLocked).
	rs, err := pt.q.take(0, pt.q.len()), pt.stopped
	for _, pd := range rs {
		pt.t.heldBytes.Add(-pd.size())
	}
	pt.checkFullLocked()
	for _, pd := range rs {
		pt.p.st.stopped.Add(1)
		pt.mu.Unlock()
		pt.p.finish(pd, err)
		pt.mu.Lock()
	}
}

// endLocked ends the worker: with err (closing), what it holds fails.
func (pt *partition) endLocked(err error) {
	pt.releaseLocked()
	pt.q.insertFront(pt.back)
	pt.back = nil
	for err != nil && pt.q.len() > 0 {
		pd := pt.q.front()
		pt.settleLocked(pd, fmt.Errorf("%w: %w", err, pd.err))
	}
	pt.worker = false
	if pt.stopped == nil && !pt.failed && pt.q.len() == 0 {
		pt.mu.Unlock()
		pt.t.forget(pt)
		pt.mu.Lock()
	}
}

// produceLocked hands the first n records (0: all) back to kgo, at the
// partition's front, un-failing it (a part, or with rest, keeps it failed:
// the rest follows once the part is written, with rest past the policies),
// once every record kgo failed or rejected in it came back.
func (pt *partition) produceLocked(n int, rest bool) {
	for refused := 0; ; refused++ {
		if pt.p.isClosed() || pt.q.len() == 0 {
			return
		}
		if refused == refusalsBeforeHold && !pt.holding {
			// Producers keep the partition rejecting faster than its
			// records come back: hold the topic until they all did.
			pt.holding = true
			pt.mu.Unlock()
			pt.t.block(1)
			pt.mu.Lock()
			continue
		}
		if refused == 0 && pt.settleCanceledLocked(n) {
			refused = -1
			continue
		}
		err := pt.recoverLocked(n, rest)
		if err == nil {
			return
		}
		if !missing(err) {
			pt.unprotectedLocked(err)
			return
		}
		pt.cond.Wait()
	}
}

// failureOf returns kgo's current failure of a partition (or topic, -1),
// which a recovery that has seen nothing is refused with; nil if none.
func failureOf(cl *kgo.Client, topic string, id int32) error {
	return cl.RecoverProducePartition(topic, id, -1, false, nil)
}

// missing returns whether a refusal is for records not back yet.
func missing(err error) bool { return errors.Is(err, kgo.ErrProducePartitionFailed) }

// unprotectedLocked settles the kept records, each with its kgo error, once
// kgo refuses to recover the partition for good (an abort recovered it, a
// purge forgot it): nothing orders them, and they belong to what was undone.
func (pt *partition) unprotectedLocked(err error) {
	pt.p.logf(kgo.LogLevelWarn, "korder: kgo refuses to recover the partition (a transaction abort, a purge?), failing its kept records", "topic", pt.t.name, "partition", pt.id, "records", pt.q.len(), "err", err)
	pt.failed, pt.seen, pt.organic, pt.settled, pt.suspectRd = false, 0, false, false, 0
	pt.releaseLocked()
	for pt.q.len() > 0 {
		pd := pt.q.front()
		pt.settleLocked(pd, pd.err)
	}
}

// recoverLocked recovers the partition with its first n records (0: all).
func (pt *partition) recoverLocked(n int, rest bool) error {
	if n <= 0 || n > pt.q.len() {
		n = pt.q.len()
	}
	// A part keeps the partition failed, and so does a Retry's first
	// batch (rest) even when it is all: until it is written, unkeyed
	// records go around the partition, and keyed ones come back.
	keep := n < pt.q.len() || rest
	rs := make([]*kgo.Record, n)
	inRound := make(map[*kgo.Record]*pending, n)
	for i, pd := range pt.q.rs[:n] {
		rs[i] = pd.r
		inRound[pd.r] = pd // known before kgo may promise them
	}
	pt.inRound = inRound
	if err := pt.recover(keep, rs...); err != nil {
		pt.inRound = nil
		return err
	}
	pt.settled, pt.failed = false, keep
	pt.resumed, pt.stopCause = 0, nil // every record produced before Resume came back
	pt.releaseLocked()                // nothing is missing any more
	if !keep {
		pt.organic = false
	}
	if n == 0 {
		pt.inRound = nil
		return nil
	}
	pt.round++
	pt.failedRd, pt.roundRest, pt.roundKept, pt.roundHi = false, rest, keep, pt.q.rs[n-1].seq
	for _, pd := range pt.q.take(0, n) {
		pd.round = pt.round
		pt.t.heldBytes.Add(-pd.size())
	}
	pt.checkFullLocked()
	pt.roundEnd = make(chan struct{})
	if !rest || pt.p.manual { // a flush for each Retry stops every partition's batching
		pt.p.flushUntil(pt.roundEnd)
	}
	return nil
}

// settleCanceledLocked settles, each alone with its context's error, the
// first n kept records (0: all) whose context is done, before a round would
// produce them.
func (pt *partition) settleCanceledLocked(n int) bool {
	if n <= 0 || n > pt.q.len() {
		n = pt.q.len()
	}
	for _, pd := range pt.q.rs[:n] {
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
	pd := pt.inRound[r]
	pt.mu.Unlock()
	if pd == nil {
		return
	}
	pt.p.result(pd, r, err) // a failure comes back to its partition first
	pt.mu.Lock()
	defer pt.mu.Unlock()
	delete(pt.inRound, r)
	pt.failedRd = pt.failedRd || err != nil
	if len(pt.inRound) > 0 {
		return
	}
	pt.q.insertFront(pt.back)
	pt.back = nil
	close(pt.roundEnd)
	if pt.failedRd && !pt.roundKept {
		pt.suspectRd = 0 // records produced after it may have failed with it: as a first failure
	} else if pt.failedRd {
		pt.suspectRd, pt.suspectHi = pt.round, pt.roundHi
	} else if pt.roundRest {
		pt.settled = true // the rest follows, past the policies
	}
	pt.cond.Broadcast()
}

// releaseLocked ends the worker's hold of the topic.
func (pt *partition) releaseLocked() {
	if pt.holding {
		pt.holding = false
		pt.t.block(-1)
	}
}

// resumeLocked ends a Stop: the records produced up to seq (before Resume)
// still fail with ErrStopped when they come back; those produced after it,
// which kgo rejects until its failure is recovered, are kept, and the worker
// recovers the partition with them, in order, once all of those came back.
func (pt *partition) resumeLocked(seq uint64) {
	pt.p.logf(kgo.LogLevelInfo, "korder: resumed stopped partition", "topic", pt.t.name, "partition", pt.id)
	if pt.q.len() == 0 && len(pt.inRound) == 0 && pt.recover(false) == nil {
		// Every record kgo failed or rejected came back: kgo resumes
		// the partition now, and the worker ends at once.
		pt.stopped, pt.failed, pt.organic, pt.settled, pt.seen, pt.resumed = nil, false, false, false, 0, 0
	} else {
		// What is kept from now on was rejected for the Stop, not
		// for a fault of its own: it goes whole, past the policies.
		pt.resumed, pt.stopCause, pt.stopped = seq, pt.stopped, nil
		pt.settled, pt.organic = true, true
	}
	pt.startLocked()
	pt.cond.Broadcast()
}

// The partition is its policies' stepEnv.

func (pt *partition) backoff(d time.Duration) bool {
	if d <= 0 {
		return !pt.p.isClosed()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-pt.p.closing:
		return false
	}
}

func (pt *partition) deadLetter(topic string, pd *pending, quarantine bool) error {
	if quarantine && !pt.t.quarantineRoom(pd.r.Key) {
		return errQuarantineFull
	}
	done, ch := make(chan struct{}), make(chan error, 1)
	pt.p.flushUntil(done)
	pt.p.dl.divert(topic, pd, func(err error) { ch <- err })
	err := <-ch
	close(done)
	if err == nil && quarantine {
		pt.t.addQuarantine(pd.r.Key, topic, pd.err)
	}
	return err
}

// refusalsBeforeHold is how many refused recoveries in a row make the worker
// hold the topic, so that its records in flight can all come back.
const refusalsBeforeHold = 1000
