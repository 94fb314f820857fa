package korder

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Stats counts what the Producer did. Counts are of records unless noted.
type Stats struct {
	Failures     int64 // partition or topic failures kgo reported (hook calls)
	Retries      int64 // records produced again by Retry
	Isolations   int64 // failures narrowed down one record at a time by Isolate
	DeadLettered int64 // records diverted to a dead-letter topic
	Dropped      int64 // records dropped by Drop
	Stopped      int64 // records failed with ErrStopped: by Stop, produced while stopped, or quarantined when the dead-letter topic failed
	HeldFull     int64 // records failed with ErrHeldFull (RejectWhenHeldFull)
	Canceled     int64 // failed or held records settled with their own context's error, outside the policies
	Quarantined  int64 // keys quarantined now (with per-partition holds, per partition)
	Held         int64 // records held now
	HeldBytes    int64 // bytes held now (see MaxHeldBytes)

	// HoldTime is, per topic, the total time the topic held records while
	// recovering. With per-partition holds (see the package
	// documentation), it is the sum of the topic's PartitionHoldTime: a
	// failure of the whole topic that holds three partitions for a second
	// counts three seconds.
	HoldTime map[string]time.Duration

	// PartitionHoldTime is, per topic and partition, the total time the
	// partition held records while recovering, for topics with
	// per-partition holds. It is nil if no topic has them.
	PartitionHoldTime map[string]map[int32]time.Duration

	// TopicHoldTime is, per topic with per-partition holds learned from
	// kgo (any partitioner but kgo.ManualPartitioner(); see the package
	// documentation), the total time the whole topic held its new
	// records: the gates of its partitions' recoveries, and failures not
	// pinned on a partition. It is included in HoldTime.
	TopicHoldTime map[string]time.Duration
}

// Stats returns a snapshot of the Producer's counters.
func (p *Producer) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.TopicHoldTime = maps.Clone(p.stats.TopicHoldTime)
	s.HoldTime = make(map[string]time.Duration, len(p.topics))
	for name, ts := range p.topics {
		if d, ok := p.stats.HoldTime[name]; ok {
			s.HoldTime[name] = d
		}
		if ts.whole == nil || ts.whole.learn {
			if s.PartitionHoldTime == nil {
				s.PartitionHoldTime = make(map[string]map[int32]time.Duration)
			}
			s.PartitionHoldTime[name] = make(map[int32]time.Duration, len(ts.units))
			for partition, d := range p.partHold[name] {
				s.PartitionHoldTime[name][partition] = d
			}
		}
		s.HeldBytes += ts.heldBytes
		ts.eachSlowPart(func(sp *slowPart) { s.Held += int64(len(sp.queue)) })
		ts.eachUnit(func(u *unit) {
			s.Held += int64(len(u.held))
			s.Quarantined += int64(len(u.quarantined))
			for part, ps := range u.lparts {
				s.Held += int64(ps.held)
				if !ps.since.IsZero() {
					d := time.Since(ps.since)
					s.HoldTime[name] += d
					s.PartitionHoldTime[name][part] += d
				}
			}
			if !u.recovering {
				return
			}
			d := time.Since(u.holdStart)
			s.HoldTime[name] += d
			if u.learn {
				if s.TopicHoldTime == nil {
					s.TopicHoldTime = make(map[string]time.Duration)
				}
				s.TopicHoldTime[name] += d
			}
			if u.perPartition() {
				s.PartitionHoldTime[name][u.partition] += d
			}
		})
	}
	return s
}

// recover runs one recovery of the unit: it settles the failed records
// through the policies, in order, then releases the held records in order.
// Only one runs per unit at a time (u.running).
func (p *Producer) recover(u *unit) {
	var queue []*pending
	if !u.learn { // a learned recovery collects them in its gate
		p.mu.Lock()
		queue = u.failed
		u.failed = nil
		p.mu.Unlock()
		slices.SortFunc(queue, func(a, b *pending) int { return cmpSeq(a.seq, b.seq) })
	}

	p.resolve(u, queue)

	p.mu.Lock()
	defer p.mu.Unlock()
	if u.stopped != nil {
		held := p.takeStoppedLocked(u)
		p.endHoldLocked(u)
		u.running = false
		p.updateSlowLocked(u)
		u.wakeLocked()
		cause := u.stopped
		p.mu.Unlock()
		p.failStopped(held, cause)
		p.mu.Lock()
		return
	}
	p.releaseLocked(u)
	if p.closed {
		held := u.held
		u.t.unholdLocked(held)
		u.held = nil
		p.mu.Unlock()
		for _, pd := range held {
			pd.promise(pd.r, ErrClosed)
		}
		p.mu.Lock()
	}
	u.running = false
	if u.learn && len(u.held) > 0 && !p.closed {
		// Not released: the topic failed as a whole meanwhile, or a
		// Resume ended a Stop of the topic before this recovery saw
		// it. Recover again: its gate finds out which, and releases
		// them.
		u.kick = true
	} else if (len(u.failed) == 0 || u.learn && !u.whole) && (!u.t.topicFailed || p.closed) {
		p.endHoldLocked(u)
	}
	p.updateSlowLocked(u)
	p.maybeRecoverLocked(u)
}

// releaseLocked hands the unit's held records to kgo, in order. Produce
// appends to held while we release, since the unit is still recovering; a
// release that fails adds to failed, and we stop and recover again, as we
// do if the whole topic fails meanwhile (with learned holds, only a failure
// not pinned on a partition stops it: kgo rejects a failed partition's
// records, which the recovery collects).
func (p *Producer) releaseLocked(u *unit) {
	if u.learn {
		p.releaseBatchesLocked(u)
		return
	}
	for len(u.held) > 0 && len(u.failed) == 0 && !u.t.topicFailed && !p.closed {
		pd := u.held[0]
		u.held = u.held[1:]
		u.t.unholdLocked([]*pending{pd})
		u.wakeLocked()
		if err := canceled(pd); err != nil {
			// Its context ended while it was held: kgo would fail it
			// and its partition with it.
			p.stats.Canceled++
			p.mu.Unlock()
			pd.promise(pd.r, err)
			p.mu.Lock()
			continue
		}
		if cause := u.quarantineCause(pd.r.Key); cause != nil {
			// Held while the quarantine began: divert it as Produce
			// would have.
			u.in.Add(1) // counted in: handed to kgo, for the dead-letter topic
			p.mu.Unlock()
			p.deadLetterQuarantined(pd, cause, u.countOut)
			p.mu.Lock()
			continue
		}
		u.in.Add(1) // counted in: handed to kgo
		p.mu.Unlock()
		p.cl.Produce(pd.ctx, pd.r, func(_ *kgo.Record, err error) { p.finished(u, pd, err) })
		p.mu.Lock()
	}
}

// releaseBatchesLocked is releaseLocked for learned holds, where the gate
// holds every partition of the topic at full speed: it hands the held
// records to kgo as one batch, while Produce waits, so that the release
// is bounded by what was held when it began. A record
// that fails meanwhile, or whose topic fails as a whole, is rejected or
// failed by kgo and collected, in produce order, as any other.
func (p *Producer) releaseBatchesLocked(u *unit) {
	// While it releases, Produce waits (u.releasing) rather than hold
	// more, so that the release ends: the producers would otherwise add to
	// held as fast as it is released.
	u.releasing = true
	defer func() {
		u.releasing = false
		u.wakeLocked()
	}()
	for len(u.held) > 0 && !u.whole && !p.closed {
		batch := u.held
		u.held = nil
		u.t.unholdLocked(batch)
		u.wakeLocked()
		causes := make([]error, len(batch))
		queued := make([]bool, len(batch))
		for i, pd := range batch {
			causes[i] = u.quarantineCause(pd.r.Key)
			if causes[i] == nil && u.t.pin != nil {
				// Behind the held records of its partition, if it
				// has some (see throttle.go).
				act, _, _ := p.routeLocked(u, pd, false)
				queued[i] = act == pinQueued
			}
		}
		p.mu.Unlock()
		for i, pd := range batch {
			if queued[i] {
				continue
			}
			if err := canceled(pd); err != nil {
				// Its context ended while it was held: kgo would
				// fail it and its partition with it.
				p.count(func(s *Stats) { s.Canceled++ })
				pd.promise(pd.r, err)
				continue
			}
			u.in.Add(1) // counted in: handed to kgo
			if causes[i] != nil {
				// Held while the quarantine began: divert it as
				// Produce would have.
				p.deadLetterQuarantined(pd, causes[i], u.countOut)
				continue
			}
			if pd.sp == nil && u.t.pin != nil {
				pd.up = true
				u.unpinned.Add(1)
			}
			p.cl.Produce(pd.ctx, pd.r, func(_ *kgo.Record, err error) { p.finished(u, pd, err) })
		}
		p.mu.Lock()
	}
}

func (p *Producer) endHoldLocked(u *unit) {
	if !u.recovering {
		return
	}
	u.recovering = false
	d := time.Since(u.holdStart)
	if p.stats.HoldTime == nil {
		p.stats.HoldTime = make(map[string]time.Duration)
	}
	p.stats.HoldTime[u.t.name] += d
	if u.learn {
		p.kickAllLocked(u) // the gate is open: the stalled partitions' held records may go
		if p.stats.TopicHoldTime == nil {
			p.stats.TopicHoldTime = make(map[string]time.Duration)
		}
		p.stats.TopicHoldTime[u.t.name] += d
	}
	if u.perPartition() {
		if p.partHold == nil {
			p.partHold = make(map[string]map[int32]time.Duration)
		}
		if p.partHold[u.t.name] == nil {
			p.partHold[u.t.name] = make(map[int32]time.Duration)
		}
		p.partHold[u.t.name][u.partition] += d
	}
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// resolve settles queue, the unit's failed records in produce order.
//
// The head of the queue is the earliest record that failed. The policies
// decide its fate from the error it failed with; until it is settled,
// nothing after it is written. When a policy asks for records to be produced
// again (Retry), the queue is produced again in order and the earliest
// record that fails is the next head.
//
// Isolate bisects: span is then how many records at the head of the queue
// hold one that fails on its own. Each round produces the first half of
// the span: if it is written, the failing record is in the other half; if
// it fails, it is in this half. A span of one record that fails is the
// failing record, and goes on through the policies; once it is settled, the
// queue is produced whole again (and bisected again if another record of it
// fails). One failing record among n costs about log2(n) rounds.
func (p *Producer) resolve(u *unit, queue []*pending) {
	span := 0          // while isolating, see above; 0 otherwise
	isolated := false  // Isolate has bisected in this recovery
	produce := false   // the first decision is on the original errors
	recovered := false // learned holds: kgo recovered since the gate closed
	for {
		if u.learn {
			var closed bool
			if queue, closed = p.gateLearned(u, queue); closed {
				recovered = false
			}
		} else {
			p.recoverKgo(u)
		}
		if len(queue) == 0 {
			if u.learn {
				p.endLearned(u)
			}
			return
		}
		if p.isClosed() {
			for _, pd := range queue {
				pd.promise(pd.r, fmt.Errorf("%w: %w", ErrClosed, pd.err))
			}
			return
		}
		// A record whose own context is done is settled alone, with
		// its context's error, before any policy sees it: producing it
		// again cannot work, diverting it would write what the
		// application gave up on, and it says nothing about the
		// partition.
		queue = p.settleCanceled(queue)
		queue = p.divertQuarantined(u, queue)
		if len(queue) == 0 {
			if u.learn {
				p.endLearned(u)
			}
			return
		}
		// A head that has no failure of its own yet (it was only
		// rejected because an earlier record of its partition failed,
		// or failed only because the record heading its batch had its
		// context cancelled) is produced again.
		if !produce && !ownFailure(queue[0]) {
			produce = true
		}

		// suspects: the records at the head, up to the last one that
		// failed on its own.
		suspects := 0
		if produce {
			// Produce the queue again, in order (or, while
			// isolating, the first half of the span), and settle
			// what is written.
			round := queue
			if span > 0 {
				span = min(span, len(queue))
				round = queue[:max(1, span/2)]
			}
			// Once Isolate has bisected, a round flushes rather
			// than wait out the linger: there are about log2(n)
			// of them, and the round that produces the rest after
			// the failing record. A Retry round does not, since
			// flushing stops every partition of the client from
			// lingering while it lasts, and a long outage is a
			// long series of rounds; it waits its backoff anyway.
			// With manual flushing, nothing is sent without a
			// flush.
			var handed func()
			if u.learn {
				// The gate is closed: nothing of the topic that
				// may go to the partitions it waited for is in
				// kgo. Recover them, hand the round to kgo, and
				// open the gate if the round is the whole
				// queue: new records of the failed partitions
				// then follow it. A partial round (Isolate)
				// keeps the gate closed.
				p.recoverKgoLearned(u)
				recovered = true
				if len(round) == len(queue) {
					handed = func() { p.openGate(u, round) }
				}
			}
			errs := p.produceRound(u, round, isolated || p.manualFlush, handed)
			kept := queue[:0]
			failed := false
			for i, pd := range queue {
				if i < len(round) {
					if errs[i] == nil {
						pd.promise(pd.r, nil)
						continue
					}
					pd.err = errs[i]
					failed = true
					if ownFailure(pd) {
						suspects = len(kept) + 1
					}
				}
				kept = append(kept, pd)
			}
			queue = kept
			if !failed {
				// Everything in the round was written. While
				// isolating, the rest of the span holds the
				// failing record; if nothing is left of it,
				// the failure did not come back.
				if span > 0 {
					span -= len(round)
				}
				continue
			}
			if span > 0 && suspects > 1 && perRecordCause(queue[0].err) {
				span = suspects // the failing record is in this half
				continue
			}
		} else {
			for i, pd := range queue {
				if ownFailure(pd) {
					suspects = i + 1
				}
			}
		}
		produce = true
		if u.learn && !recovered {
			// Decide with the failed partitions still failed in
			// kgo, which rejects their records: the topic flows
			// meanwhile.
			p.openGate(u, nil)
		}
		if u.perPartition() && errors.Is(queue[0].err, kgo.ErrProducePartitionFailed) && p.kgoTopicFailed(u.t.name) {
			// The head was only rejected, because the whole topic
			// failed (in another partition): it has no failure of
			// its own. Wait for the topic's recovery in gate, and
			// produce it again.
			continue
		}

		// The round starts at the queue's head, so the head is the
		// earliest record that failed in it. Settle it before anything
		// after it can be written.
		pd := queue[0]
		pd.attempts++
		settled, stop := false, true
	policies:
		for _, pol := range p.cfg.policies {
			switch pol.kind {
			case policyRetry:
				if pd.attempts <= pol.attempts {
					p.count(func(s *Stats) { s.Retries += int64(len(queue)) })
					p.sleep(pol.backoff)
					settled = true // produced again next round
				}
			case policyIsolate:
				if span == 0 && suspects > 1 && perRecordCause(pd.err) {
					// Bisect the records that failed: the
					// head's own attempts restart.
					span, isolated = suspects, true
					pd.attempts = 0
					p.count(func(s *Stats) { s.Isolations++ })
					p.logf(kgo.LogLevelInfo, "korder: isolating a batch failure by bisecting it", u.logKVs("records", suspects, "err", pd.err)...)
					settled = true
				}
			case policyDeadLetter:
				if err := p.deadLetter(u, pol, pd); err == nil {
					queue = queue[1:]
					span = 0
					settled = true
				} else {
					p.logf(kgo.LogLevelWarn, "korder: could not divert a record to the dead-letter topic", u.logKVs("dead_letter_topic", pol.topic, "err", err)...)
				}
			case policyDrop:
				p.count(func(s *Stats) { s.Dropped++ })
				p.logf(kgo.LogLevelWarn, "korder: dropping a record that failed to produce", "topic", u.t.name, "partition", pd.r.Partition, "err", pd.err)
				pd.promise(pd.r, fmt.Errorf("%w: %w", ErrDropped, pd.err))
				queue = queue[1:]
				span = 0
				settled = true
			case policyStop:
				break policies
			}
			if settled {
				stop = false
				break
			}
		}
		if stop {
			if p.isClosed() {
				// A policy failed because the Producer is
				// closing: the loop's head fails the queue with
				// ErrClosed rather than stopping the topic.
				continue
			}
			if part := pd.r.Partition; u.learn && part >= 0 && !p.learnedWhole(u) {
				queue = p.stopPartition(u, part, pd.err, queue)
				span = 0
				continue
			}
			p.stop(u, pd.err, queue)
			return
		}
	}
}

// stop stops the unit with cause and fails queue with ErrStopped. The
// failed kgo partitions stay failed until Resume.
func (p *Producer) stop(u *unit, cause error, queue []*pending) {
	p.mu.Lock()
	u.stopped = cause
	// The records held now fail with the stop, here: a Resume that comes
	// before the recovery ends would otherwise find them still held, and
	// they would be written although they were produced before it.
	held := p.takeStoppedLocked(u)
	u.wakeLocked()
	p.updateSlowLocked(u)
	p.mu.Unlock()
	queue = append(queue, held...)
	slices.SortFunc(queue, func(a, b *pending) int { return cmpSeq(a.seq, b.seq) })
	if u.perPartition() {
		p.logf(kgo.LogLevelError, "korder: stopping the partition after a produce failure; call Resume to continue", u.logKVs("err", cause)...)
	} else {
		p.logf(kgo.LogLevelError, "korder: stopping the topic after a produce failure; call Resume to continue", u.logKVs("err", cause)...)
	}
	p.failStopped(queue, cause)
}

// failStopped fails records of a stopped unit with ErrStopped, in order. A
// record that failed on its own reports its own error; one that was only
// rejected behind another, or held, the stop's cause. A record whose own
// context is done gets its context's error instead: it takes no part in
// the stop.
func (p *Producer) failStopped(queue []*pending, cause error) {
	for _, pd := range queue {
		if err := canceled(pd); err != nil {
			p.count(func(s *Stats) { s.Canceled++ })
			pd.promise(pd.r, err)
			continue
		}
		err := cause
		if pd.err != nil && !errors.Is(pd.err, kgo.ErrProducePartitionFailed) {
			err = pd.err
		}
		p.count(func(s *Stats) { s.Stopped++ })
		pd.promise(pd.r, fmt.Errorf("%w: %w", ErrStopped, err))
	}
}

// canceled returns the error of pd's own context (the context given to
// Produce, or the record's Context) if it is done, else nil.
func canceled(pd *pending) error {
	if err := pd.ctx.Err(); err != nil {
		return err
	}
	if c := pd.r.Context; c != nil {
		return c.Err()
	}
	return nil
}

// ownFailure returns whether pd failed for a reason of its own, one the
// policies decide on: not when it was only rejected behind an earlier
// failure of its partition, nor when it failed with a context error while
// its own context is alive (kgo fails a whole batch when the context of the
// record heading it is done).
func ownFailure(pd *pending) bool {
	if errors.Is(pd.err, kgo.ErrProducePartitionFailed) {
		return false
	}
	if errors.Is(pd.err, context.Canceled) || errors.Is(pd.err, context.DeadlineExceeded) {
		return canceled(pd) != nil
	}
	return true
}

// settleCanceled settles, alone and in order, the records of queue whose
// own context is done, with their context's error, and returns the others.
func (p *Producer) settleCanceled(queue []*pending) []*pending {
	kept := queue[:0]
	for _, pd := range queue {
		if err := canceled(pd); err != nil {
			p.count(func(s *Stats) { s.Canceled++ })
			pd.promise(pd.r, err)
			continue
		}
		kept = append(kept, pd)
	}
	return kept
}

// produceRound produces rs in order and waits for all of them; if flush,
// without waiting for the linger (see flushUntil). handed, if not nil, is
// called once they are all handed to kgo.
func (p *Producer) produceRound(u *unit, rs []*pending, flush bool, handed func()) []error {
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	wg.Add(len(rs))
	for i, pd := range rs {
		if u.learn {
			pd.r.Partition = -1 // kgo sets it if it partitions the record
		}
		p.cl.Produce(pd.ctx, pd.r, func(_ *kgo.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	if handed != nil {
		handed()
	}
	if flush {
		p.flushUntil(wg.Wait)
	} else {
		wg.Wait()
	}
	return errs
}

// flushUntil returns once wait returns, and makes kgo send what it buffers
// without lingering meanwhile, if the client lingers (or flushes manually):
// a recovery round waits for every record it produces, with the unit held,
// so a linger only holds the unit longer, and an isolation waits once per
// round. It flushes the client with a context that it cancels once wait
// returns: kgo lingers for no partition while it flushes, so other
// partitions send without lingering meanwhile, and the flush does not wait
// for their records.
func (p *Producer) flushUntil(wait func()) {
	if !p.lingers {
		wait()
		return
	}
	ctx, cancel := context.WithCancel(p.cl.Context())
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		p.cl.Flush(ctx)
	}()
	wait()
	cancel()
	<-flushed
}

// recoverKgo recovers u's failed state in kgo before its recovery produces
// anything again. With per-topic holds, that is every failed partition of
// the topic and the topic itself. With per-partition holds, it is u's
// partition, after the topic itself if it failed as a whole: see gate.
func (p *Producer) recoverKgo(u *unit) {
	if !u.perPartition() {
		p.recoverKgoTopic(u.t.name)
		return
	}
	p.gate(u)
	if u.partition >= 0 {
		p.recoverKgoPartitions(map[string][]int32{u.t.name: {u.partition}})
	}
}

// recoverKgoTopic recovers the topic's failed partitions in kgo, and the
// topic itself if it failed before partitioning.
func (p *Producer) recoverKgoTopic(topic string) {
	if parts := p.cl.FailedProducePartitions()[topic]; len(parts) > 0 {
		p.recoverKgoPartitions(map[string][]int32{topic: parts})
	}
}

// recoverKgoPartitions recovers partitions in kgo. A kgo that refuses to
// recover a partition while its HookProducePartitionFailed hooks run (and
// says so with an error) is asked again, after a short wait, until the
// hooks have returned or the client is closed: the promises of the failed
// records may run first, on another goroutine, and the recovery they
// complete would otherwise produce again into a partition that is still
// failed, and see its head rejected as if it had failed again.
func (p *Producer) recoverKgoPartitions(parts map[string][]int32) {
	wait := 20 * time.Microsecond
	for p.cl.RecoverProducePartitions(parts) != nil && p.cl.Context().Err() == nil {
		p.sleep(wait)
		wait = min(2*wait, time.Millisecond)
	}
}

// gate returns once u's topic is not failed as a whole, recovering the
// topic in kgo if u is the last of its units to get here. It is how the
// units of a topic with per-partition holds get through a failure of the
// whole topic (kgo's partition -1), which rejects the records of every
// partition until the topic is recovered.
//
// The topic may be recovered in kgo only once no unit has anything in kgo:
// otherwise a record of partition P produced before the recovery but
// buffered after it would be written ahead of P's records the failed topic
// rejected, which P has not produced again yet. So every unit holds from
// the failure on (failTopicLocked, and unitLocked for new units), and its
// recovery waits here, parked, once what it had in flight has finished and
// been collected. A unit in the middle of a recovery gets here at the
// start of its next round; a stopped unit has nothing in kgo. Once every
// unit is parked or stopped, the unit that sees it recovers the topic,
// before any unit produces again, and wakes the others.
//
// The hook may tell the Producer of the topic's failure after some of its
// records were rejected, so gate also asks kgo.
func (p *Producer) gate(u *unit) {
	ts := u.t
	p.mu.Lock()
	defer p.mu.Unlock()
	u.parked = true
	defer func() { u.parked = false }()
	for !p.closed {
		if !ts.topicFailed && p.kgoTopicFailed(ts.name) {
			p.failTopicLocked(ts)
		}
		if !ts.topicFailed {
			return
		}
		if !ts.healing && ts.quiescentLocked() {
			ts.healing = true
			p.mu.Unlock()
			p.recoverKgoPartitions(map[string][]int32{ts.name: {-1}})
			p.mu.Lock()
			ts.healing, ts.topicFailed = false, false
			ts.wakeLocked()
			p.logf(kgo.LogLevelInfo, "korder: recovered the topic after a failure before partitioning; its partitions recover on their own", "topic", ts.name)
			return
		}
		wait := ts.space
		p.mu.Unlock()
		<-wait
		p.mu.Lock()
	}
}

// quiescentLocked returns whether no unit of the topic has anything in
// kgo or can hand anything to it: each is parked in gate, or stopped.
func (ts *topicState) quiescentLocked() bool {
	for _, u := range ts.units {
		if !u.parked && (u.stopped == nil || u.running || u.inflight() > 0) {
			return false
		}
	}
	return true
}

func (p *Producer) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Producer) count(fn func(*Stats)) {
	p.mu.Lock()
	fn(&p.stats)
	p.mu.Unlock()
}

// sleep waits d, or less if the Producer closes.
func (p *Producer) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	ctx := p.cl.Context()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// divertQuarantined diverts, in order, the records of queue whose key is
// quarantined.
func (p *Producer) divertQuarantined(u *unit, queue []*pending) []*pending {
	kept := queue[:0]
	for _, pd := range queue {
		p.mu.Lock()
		cause := u.quarantineCause(pd.r.Key)
		p.mu.Unlock()
		if cause != nil {
			var wg sync.WaitGroup
			wg.Add(1)
			p.deadLetterQuarantined(pd, cause, wg.Done)
			p.flushUntil(wg.Wait)
			continue
		}
		kept = append(kept, pd)
	}
	return kept
}

// deadLetterQuarantined diverts a record whose key is quarantined, calling
// done once its promise has run.
func (p *Producer) deadLetterQuarantined(pd *pending, cause error, done func()) {
	topic := ""
	for _, pl := range p.cfg.policies {
		if pl.kind == policyDeadLetter && pl.quarantine {
			topic = pl.topic
		}
	}
	pd.err = fmt.Errorf("key quarantined after an earlier record with it failed: %w", cause)
	p.cl.Produce(context.WithoutCancel(pd.ctx), p.deadLetterRecord(topic, pd), func(_ *kgo.Record, err error) {
		if err != nil {
			// The dead-letter topic failed: the record cannot go
			// anywhere without overtaking the quarantined one.
			p.recoverKgoTopic(topic)
			p.count(func(s *Stats) { s.Stopped++ })
			pd.promise(pd.r, fmt.Errorf("%w: dead-letter topic %s: %w", ErrStopped, topic, err))
		} else {
			p.count(func(s *Stats) { s.DeadLettered++ })
			pd.promise(pd.r, fmt.Errorf("%w: %w", ErrDeadLettered, pd.err))
		}
		if done != nil {
			done()
		}
	})
}

// deadLetter diverts pd under pol and settles its promise if that works.
func (p *Producer) deadLetter(u *unit, pol Policy, pd *pending) error {
	if err := p.produceDeadLetter(pol.topic, pd); err != nil {
		return err
	}
	p.mu.Lock()
	p.stats.DeadLettered++
	if pol.quarantine && pd.r.Key != nil {
		if u.quarantined == nil {
			u.quarantined = make(map[string]error)
		}
		if _, ok := u.quarantined[string(pd.r.Key)]; !ok {
			u.quarantined[string(pd.r.Key)] = pd.err
			p.updateSlowLocked(u)
		}
	}
	p.mu.Unlock()
	p.logf(kgo.LogLevelWarn, "korder: diverted a record to the dead-letter topic", u.logKVs("dead_letter_topic", pol.topic, "err", pd.err)...)
	pd.promise(pd.r, fmt.Errorf("%w: %w", ErrDeadLettered, pd.err))
	return nil
}

// Header keys added to dead-lettered records.
const (
	HeaderCause     = "korder-cause"
	HeaderTopic     = "korder-topic"
	HeaderPartition = "korder-partition"
)

func (p *Producer) produceDeadLetter(topic string, pd *pending) error {
	var (
		err error
		wg  sync.WaitGroup
	)
	wg.Add(1)
	p.cl.Produce(context.WithoutCancel(pd.ctx), p.deadLetterRecord(topic, pd), func(_ *kgo.Record, perr error) {
		err = perr
		wg.Done()
	})
	p.flushUntil(wg.Wait)
	if err != nil {
		p.recoverKgoTopic(topic)
	}
	return err
}

// deadLetterRecord returns the copy of pd's record for the dead-letter
// topic.
func (*Producer) deadLetterRecord(topic string, pd *pending) *kgo.Record {
	r := pd.r
	return &kgo.Record{
		Topic:     topic,
		Key:       r.Key,
		Value:     r.Value,
		Timestamp: r.Timestamp,
		Headers: append(slices.Clip(r.Headers),
			kgo.RecordHeader{Key: HeaderCause, Value: []byte(pd.err.Error())},
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
		),
	}
}

// takeStoppedLocked takes the records a stopped unit holds, and, with
// learned holds, those it collected since its gate: they fail with the
// stop.
func (p *Producer) takeStoppedLocked(u *unit) []*pending {
	held := u.held
	u.t.unholdLocked(held)
	u.held = nil
	if u.learn {
		held = append(held, u.failed...)
		u.failed = nil
		p.recountLocked(u, nil)
	}
	return held
}
