package korder

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Learned per-partition holds.
//
// With any partitioner but kgo.ManualPartitioner() (and without
// TopicHolds), a record's partition is not known before kgo partitions it,
// so every record of a topic goes through one unit, and the Producer learns
// a record's partition from its promise. kgo does the holding: once a
// partition P failed, kgo rejects every later record to P, in produce
// order, with kgo.ErrProducePartitionFailed and the record's Partition set,
// and routes unkeyed records around P. The Producer collects P's failed and
// rejected records (collectLocked), and the topic's other partitions keep
// flowing for P's whole recovery: its policies, Retry's backoffs, an outage
// of P's broker, a Stop.
//
// The topic is held only at the gate, a short moment before each produce
// round of the recovery (gateLearned, openGate): no new record of the
// topic reaches kgo from when the gate closes until the round has been
// handed to kgo. While it is closed, the Producer waits until every record
// of the topic that it handed to kgo has finished: a record of P produced
// before the failure, or rejected since, is then among the collected ones,
// and none can be in flight toward P. Only then is P recovered in kgo and
// the round (P's records, in produce order) produced; new records of P
// follow the round in kgo, behind it, and the gate opens. The records to
// wait for are the topic's, not only P's, since a record's partition is
// known only once kgo has promised it: the gate lasts what kgo takes to
// write or fail what it has of the topic, about one produce round trip
// (plus the linger, and what is buffered ahead). Records of the other
// partitions produced meanwhile are held, in order, and handed to kgo when
// it opens.
//
// With pinned partitions (pin.go), the gate is partial: it waits for the
// records that may go to a failed partition only (gateInflightLocked), and
// holds only those partitions' new records, in their slowPart's queue
// (throttle.go); records pinned to other partitions, and unkeyed records,
// which are then pinned to them, go on while it is closed.
//
// The gate stays closed for a whole recovery when a failure is not pinned
// on a partition (kgo's partition -1, or a record that failed before kgo
// partitioned it), and while Isolate bisects (its rounds produce part of
// the failed records only, with the partitions recovered).

// partState is a partition of a topic with learned holds, while records of
// it are held (collected) or it is stopped.
type partState struct {
	since   time.Time // the first record held since its records were last handed back; zero if none
	held    int       // records kgo rejected, held (MaxHeld)
	stopped error     // Stop: kgo keeps the partition failed until Resume
}

func (u *unit) partLocked(partition int32) *partState {
	ps := u.lparts[partition]
	if ps == nil {
		if u.lparts == nil {
			u.lparts = make(map[int32]*partState)
		}
		ps = &partState{}
		u.lparts[partition] = ps
	}
	return ps
}

// hookLearnedLocked handles kgo's report of a failure of the topic's
// partition (or, with -1, of the whole topic).
func (p *Producer) hookLearnedLocked(u *unit, partition int32, err error) {
	if partition < 0 {
		p.logf(kgo.LogLevelWarn, "korder: produce failed before partitioning, holding the topic until its records are recovered", "topic", u.t.name, "err", err)
		u.whole = true
		p.beginRecoveryLocked(u)
	} else {
		p.logf(kgo.LogLevelWarn, "korder: produce failed, holding the partition's records until they are recovered", "topic", u.t.name, "partition", partition, "err", err)
	}
	u.kick = true
	p.maybeRecoverLocked(u)
}

// collectLocked takes a record of a learned unit that kgo failed or
// rejected, and unlocks p.mu.
func (p *Producer) collectLocked(u *unit, pd *pending, err error) {
	part := pd.r.Partition
	rejected := errors.Is(err, kgo.ErrProducePartitionFailed)
	var ps *partState
	if part >= 0 {
		ps = u.partLocked(part)
	}
	stop := u.stopped
	if ps != nil && ps.stopped != nil {
		stop = ps.stopped
	}
	if stop != nil && rejected {
		p.stats.Stopped++
		p.mu.Unlock()
		pd.promise(pd.r, fmt.Errorf("%w: %w", ErrStopped, stop))
		u.countOut()
		return
	}
	if rejected && ps != nil {
		size := heldSize(pd.r)
		full := (p.cfg.maxHeld > 0 && ps.held >= p.cfg.maxHeld) || (u.t.heldBytes > 0 && u.t.heldBytes+size > p.cfg.maxHeldBytes)
		if full && p.cfg.rejectWhenFull {
			p.stats.HeldFull++
			p.mu.Unlock()
			pd.promise(pd.r, ErrHeldFull)
			u.countOut()
			return
		}
		pd.rejected, pd.size = true, size
		ps.held++
		u.rejBytes += size
		u.t.heldBytes += size
		if full {
			// The held records are bounded: hold the topic, so that
			// Produce blocks, until the partition's records are
			// handed back.
			p.beginRecoveryLocked(u)
		}
	}
	if ps != nil && ps.since.IsZero() {
		ps.since = time.Now()
	}
	if part < 0 {
		u.whole = true
		p.beginRecoveryLocked(u)
	}
	pd.err = err
	u.failed = append(u.failed, pd)
	u.out.Add(1)
	p.maybeRecoverLocked(u)
	p.mu.Unlock()
}

// gateLearned closes the gate (holds the topic), waits until nothing the
// unit handed to kgo is in flight, and adds the records collected meanwhile
// to queue, in produce order. It returns whether it closed the gate (it may
// have been closed already). If there is nothing to recover, it returns
// queue empty without closing the gate.
func (p *Producer) gateLearned(u *unit, queue []*pending) ([]*pending, bool) {
	p.mu.Lock()
	if len(queue) == 0 && len(u.failed) == 0 && !u.recovering && !u.resume && !u.kick && !p.kgoFailedLearned(u) {
		p.mu.Unlock()
		return queue, false
	}
	closed := !u.recovering
	u.kick = false
	p.beginRecoveryLocked(u)
	for !p.closed && p.gateInflightLocked(u) > 0 {
		wait := u.space
		p.mu.Unlock()
		<-wait
		p.mu.Lock()
	}
	queue = append(queue, u.failed...)
	u.failed = nil
	slices.SortFunc(queue, func(a, b *pending) int { return cmpSeq(a.seq, b.seq) })
	if u.resume {
		// Every rejection of a stopped partition has been promised:
		// recovering it now lets no earlier record through.
		u.resume = false
		for part, ps := range u.lparts {
			if ps.stopped != nil {
				ps.stopped = nil
				p.logf(kgo.LogLevelInfo, "korder: resumed stopped partition", "topic", u.t.name, "partition", part)
			}
		}
	}
	var (
		stopped []*pending
		causes  []error
	)
	kept := queue[:0]
	for _, pd := range queue {
		if ps := u.lparts[pd.r.Partition]; pd.r.Partition >= 0 && ps != nil && ps.stopped != nil {
			stopped, causes = append(stopped, pd), append(causes, ps.stopped)
			continue
		}
		kept = append(kept, pd)
	}
	queue = kept
	u.whole = p.kgoTopicFailed(u.t.name) || slices.ContainsFunc(queue, func(pd *pending) bool { return pd.r.Partition < 0 })
	p.recountLocked(u, queue)
	p.mu.Unlock()
	for i, pd := range stopped {
		p.failStopped([]*pending{pd}, causes[i])
	}
	return queue, closed
}

// kgoFailedLearned returns whether kgo has the unit's topic, or a
// partition of it that is not stopped, failed. Under p.mu (it takes only
// kgo's leaf locks).
func (p *Producer) kgoFailedLearned(u *unit) bool {
	for _, part := range p.cl.FailedProducePartitions()[u.t.name] {
		if ps := u.lparts[part]; part < 0 || ps == nil || ps.stopped == nil {
			return true
		}
	}
	return false
}

// gateInflightLocked returns how many records the gate waits for: those
// of the unit in flight that may go to a partition kgo has failed, that is
// every one, but those pinned to a partition that is not failed (see
// pin.go). It adds the failed partitions to u.gated (nil: the whole
// topic), the partitions the gate holds until it opens, which are the ones
// the recovery recovers in kgo: a partition that fails later may still
// have records in flight.
//
// A record on the lock-free path is counted in its slowPart, or in
// u.unpinned, before it checks whether the gate closed (u.slow), so the
// gate, which closes before it counts, sees every record that went on.
// While it is closed, only records pinned to partitions it does not hold
// go on (routeLocked), and they cannot go to one it holds.
func (p *Producer) gateInflightLocked(u *unit) uint64 {
	ps := u.t.pin
	if ps == nil {
		return u.inflight()
	}
	parts := ps.slowPartsLocked()
	failed := p.cl.FailedProducePartitions()[u.t.name]
	if len(parts) == 0 || u.whole || u.gateWhole || slices.Contains(failed, -1) {
		// The whole topic, for the rest of this gate: a partition
		// recovered for a round meanwhile would otherwise no longer
		// count as failed, while records of it are in the recovery.
		u.gateWhole = true
		u.gated = nil
		return u.inflight()
	}
	// Gated partitions stay gated until the gate opens, for the same
	// reason.
	if u.gated == nil {
		u.gated = []int32{}
	}
	for _, part := range failed {
		if !slices.Contains(u.gated, part) {
			u.gated = append(u.gated, part)
		}
	}
	n := uint64(max(u.unpinned.Load(), 0))
	for _, sp := range parts {
		if slices.Contains(u.gated, sp.part) {
			n += sp.inKgo()
		}
	}
	return n
}

// partialGateLocked returns whether the unit's gate is closed for some of
// its partitions only (u.gated): records pinned to the others go on.
func (u *unit) partialGateLocked() bool {
	return u.recovering && u.gated != nil && !u.whole && !u.gateWhole
}

// gatesLocked returns whether the unit's closed gate holds partition part.
func (u *unit) gatesLocked(part int32) bool {
	return u.recovering && (u.gated == nil || u.whole || u.gateWhole || slices.Contains(u.gated, part))
}

// recoverKgoLearned recovers, in kgo, the unit's topic and its failed
// partitions that are not stopped and that the gate waited for (u.gated).
// The gate must be closed.
func (p *Producer) recoverKgoLearned(u *unit) {
	failed := p.cl.FailedProducePartitions()[u.t.name]
	p.mu.Lock()
	failed = slices.DeleteFunc(failed, func(part int32) bool {
		ps := u.lparts[part]
		return part >= 0 && ps != nil && ps.stopped != nil || u.gated != nil && !slices.Contains(u.gated, part)
	})
	p.mu.Unlock()
	if len(failed) > 0 {
		p.recoverKgoPartitions(map[string][]int32{u.t.name: failed})
	}
}

// endLearned ends a learned recovery that has nothing left to produce: the
// gate is closed, and kgo is recovered, so that the topic has no failure
// left that is not pinned on a partition.
func (p *Producer) endLearned(u *unit) {
	p.recoverKgoLearned(u)
	p.mu.Lock()
	u.whole = false
	p.mu.Unlock()
}

// recountLocked recounts the records held by the unit's partitions: the
// rejected records of held (and of the unit's collected records).
func (p *Producer) recountLocked(u *unit, held []*pending) {
	for _, ps := range u.lparts {
		ps.held = 0
	}
	var n int64
	for _, pds := range [][]*pending{held, u.failed} {
		for _, pd := range pds {
			if pd.rejected && pd.r.Partition >= 0 {
				n += pd.size
				u.partLocked(pd.r.Partition).held++
			}
		}
	}
	freed := u.rejBytes > n
	u.t.heldBytes += n - u.rejBytes
	u.rejBytes = n
	if freed && u.t.heldWaiters > 0 {
		u.t.wakeLocked()
	}
}

// openGate opens the gate after the recovery handed the records it
// collected back to kgo (handed), or before it waits with the failed
// partitions still failed in kgo (handed nil): the held records are
// released in order, and the topic flows again. A gate closed for a
// failure not pinned on a partition stays closed.
func (p *Producer) openGate(u *unit, handed []*pending) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if handed != nil {
		for _, pd := range handed {
			pd.rejected = false
		}
		p.recountLocked(u, nil)
		p.endPartHoldsLocked(u)
	}
	if u.whole || !u.recovering {
		return
	}
	p.releaseLocked(u)
	if len(u.held) == 0 && !p.closed && !u.whole {
		p.endHoldLocked(u)
		p.updateSlowLocked(u)
	}
}

// endPartHoldsLocked ends the holds of the unit's partitions: their
// records were handed back to kgo, or settled.
func (p *Producer) endPartHoldsLocked(u *unit) {
	for part, ps := range u.lparts {
		if !ps.since.IsZero() {
			p.addPartHoldLocked(u.t.name, part, time.Since(ps.since))
			ps.since = time.Time{}
		}
	}
}

func (p *Producer) addPartHoldLocked(topic string, partition int32, d time.Duration) {
	if p.stats.HoldTime == nil {
		p.stats.HoldTime = make(map[string]time.Duration)
	}
	p.stats.HoldTime[topic] += d
	if p.partHold == nil {
		p.partHold = make(map[string]map[int32]time.Duration)
	}
	if p.partHold[topic] == nil {
		p.partHold[topic] = make(map[int32]time.Duration)
	}
	p.partHold[topic][partition] += d
}

// stopPartition stops the partition of a learned unit with cause: kgo keeps
// it failed, so that its later records are rejected (and fail with
// ErrStopped) until Resume. The records of queue that went to it fail with
// ErrStopped; the others are returned.
func (p *Producer) stopPartition(u *unit, partition int32, cause error, queue []*pending) []*pending {
	p.mu.Lock()
	ps := u.partLocked(partition)
	ps.stopped = cause
	if !ps.since.IsZero() {
		p.addPartHoldLocked(u.t.name, partition, time.Since(ps.since))
		ps.since = time.Time{}
	}
	p.mu.Unlock()
	p.logf(kgo.LogLevelError, "korder: stopping the partition after a produce failure; call Resume to continue", "topic", u.t.name, "partition", partition, "err", cause)
	var stopped, kept []*pending
	for _, pd := range queue {
		if pd.r.Partition == partition {
			stopped = append(stopped, pd)
		} else {
			kept = append(kept, pd)
		}
	}
	p.failStopped(stopped, cause)
	p.mu.Lock()
	p.recountLocked(u, kept)
	p.mu.Unlock()
	return kept
}

// resumeLearnedLocked asks the recovery of a learned unit to resume its
// stopped partitions, at its gate. It returns whether any was stopped.
func (p *Producer) resumeLearnedLocked(u *unit) bool {
	if !u.learn || !slices.ContainsFunc(mapValues(u.lparts), func(ps *partState) bool { return ps.stopped != nil }) {
		return false
	}
	u.resume = true
	p.beginRecoveryLocked(u)
	p.maybeRecoverLocked(u)
	return true
}

func mapValues(m map[int32]*partState) []*partState {
	vs := make([]*partState, 0, len(m))
	for _, v := range m {
		vs = append(vs, v)
	}
	return vs
}

func (p *Producer) learnedWhole(u *unit) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return u.whole
}
