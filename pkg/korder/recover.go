package korder

import (
	"context"
	"errors"
	"fmt"
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
	Stopped      int64 // records failed by Stop
	Quarantined  int64 // keys quarantined now
	Held         int64 // records held now

	// HoldTime is, per topic, the total time the topic held records while
	// recovering. Holds are per topic (see the package documentation).
	HoldTime map[string]time.Duration
}

// Stats returns a snapshot of the Producer's counters.
func (p *Producer) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.HoldTime = make(map[string]time.Duration, len(p.topics))
	for name, ts := range p.topics {
		s.Held += int64(len(ts.held))
		if d, ok := p.stats.HoldTime[name]; ok {
			s.HoldTime[name] = d
		}
		if ts.recovering {
			s.HoldTime[name] += time.Since(ts.holdStart)
		}
	}
	return s
}

// recover runs one recovery of the topic: it settles the failed records
// through the policies, in order, then releases the held records in order.
// Only one runs per topic at a time (ts.running).
func (p *Producer) recover(ts *topicState) {
	p.mu.Lock()
	queue := ts.failed
	ts.failed = nil
	p.mu.Unlock()
	slices.SortFunc(queue, func(a, b *pending) int { return cmpSeq(a.seq, b.seq) })

	p.resolve(ts, queue)

	p.mu.Lock()
	defer p.mu.Unlock()
	if ts.stopped != nil {
		held := ts.held
		ts.held = nil
		p.stats.Stopped += int64(len(held))
		p.endHoldLocked(ts)
		ts.running = false
		p.updateSlowLocked(ts)
		ts.wakeLocked()
		cause := ts.stopped
		p.mu.Unlock()
		for _, pd := range held {
			pd.promise(pd.r, fmt.Errorf("%w: %w", ErrStopped, cause))
		}
		p.mu.Lock()
		return
	}
	// Release the held records in order. Produce appends to held while
	// we release, since the topic is still recovering; a release that
	// fails adds to failed, and we stop and recover again.
	for len(ts.held) > 0 && len(ts.failed) == 0 && !p.closed {
		pd := ts.held[0]
		ts.held = ts.held[1:]
		ts.wakeLocked()
		if cause, ok := ts.quarantined[string(pd.r.Key)]; ok && pd.r.Key != nil {
			// Held while the quarantine began: divert it as Produce
			// would have.
			p.mu.Unlock()
			p.deadLetterQuarantined(pd, cause, nil)
			p.mu.Lock()
			continue
		}
		ts.inflight.Add(1)
		p.mu.Unlock()
		p.cl.Produce(pd.ctx, pd.r, func(_ *kgo.Record, err error) { p.finished(ts, pd, err) })
		p.mu.Lock()
	}
	if p.closed {
		held := ts.held
		ts.held = nil
		p.mu.Unlock()
		for _, pd := range held {
			pd.promise(pd.r, ErrClosed)
		}
		p.mu.Lock()
	}
	ts.running = false
	if len(ts.failed) == 0 {
		p.endHoldLocked(ts)
	}
	p.updateSlowLocked(ts)
	p.maybeRecoverLocked(ts)
}

func (p *Producer) endHoldLocked(ts *topicState) {
	if ts.recovering {
		ts.recovering = false
		if p.stats.HoldTime == nil {
			p.stats.HoldTime = make(map[string]time.Duration)
		}
		p.stats.HoldTime[ts.name] += time.Since(ts.holdStart)
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

// resolve settles queue, the topic's failed records in produce order.
//
// The head of the queue is the earliest record that failed. The policies
// decide its fate from the error it failed with; until it is settled,
// nothing after it is written. When a policy asks for records to be produced
// again (Retry, or Isolate one at a time), the queue is produced again in
// order and the earliest record that fails is the next head.
func (p *Producer) resolve(ts *topicState, queue []*pending) {
	oneByOne := false
	produce := false // the first decision is on the original errors
	for {
		p.recoverKgo(ts.name)
		if len(queue) == 0 {
			return
		}
		if p.isClosed() {
			for _, pd := range queue {
				pd.promise(pd.r, fmt.Errorf("%w: %w", ErrClosed, pd.err))
			}
			return
		}
		queue = p.divertQuarantined(ts, queue)
		if len(queue) == 0 {
			return
		}
		// A head that was only rejected, because an earlier record of
		// its partition failed and was settled, has no failure of its
		// own yet: produce it again.
		if !produce && errors.Is(queue[0].err, kgo.ErrProducePartitionFailed) {
			produce = true
		}

		failed := 0
		if produce {
			// Produce the queue again, in order (or only its
			// head, while isolating), and settle what is written.
			round := queue
			if oneByOne {
				round = queue[:1]
			}
			errs := p.produceRound(round)
			kept := queue[:0]
			for i, pd := range queue {
				if i < len(round) {
					if errs[i] == nil {
						pd.promise(pd.r, nil)
						continue
					}
					pd.err = errs[i]
					failed++
				}
				kept = append(kept, pd)
			}
			queue = kept
			if failed == 0 {
				continue // everything in the round was written
			}
		} else {
			for _, pd := range queue {
				if !errors.Is(pd.err, kgo.ErrProducePartitionFailed) {
					failed++
				}
			}
		}
		produce = true

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
				if !oneByOne && failed > 1 && perRecordCause(pd.err) {
					// From now on, one record at a time: the
					// head's own attempts restart.
					oneByOne = true
					pd.attempts = 0
					p.count(func(s *Stats) { s.Isolations++ })
					p.logf(kgo.LogLevelInfo, "korder: isolating a batch failure one record at a time", "topic", ts.name, "err", pd.err)
					settled = true
				}
			case policyDeadLetter:
				if err := p.deadLetter(ts, pol, pd); err == nil {
					queue = queue[1:]
					settled = true
				} else {
					p.logf(kgo.LogLevelWarn, "korder: could not divert a record to the dead-letter topic", "topic", ts.name, "dead_letter_topic", pol.topic, "err", err)
				}
			case policyDrop:
				p.count(func(s *Stats) { s.Dropped++ })
				p.logf(kgo.LogLevelWarn, "korder: dropping a record that failed to produce", "topic", ts.name, "partition", pd.r.Partition, "err", pd.err)
				pd.promise(pd.r, fmt.Errorf("%w: %w", ErrDropped, pd.err))
				queue = queue[1:]
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
			p.stop(ts, pd.err, queue)
			return
		}
	}
}

// stop stops the topic with cause and fails queue with ErrStopped. The
// failed kgo partitions stay failed until Resume.
func (p *Producer) stop(ts *topicState, cause error, queue []*pending) {
	p.mu.Lock()
	ts.stopped = cause
	p.stats.Stopped += int64(len(queue))
	p.updateSlowLocked(ts)
	p.mu.Unlock()
	p.logf(kgo.LogLevelError, "korder: stopping the topic after a produce failure; call Resume to continue", "topic", ts.name, "err", cause)
	for _, pd := range queue {
		// A record that failed on its own reports its own error;
		// one that was only rejected behind another, the stop's.
		err := cause
		if pd.err != nil && !errors.Is(pd.err, kgo.ErrProducePartitionFailed) {
			err = pd.err
		}
		pd.promise(pd.r, fmt.Errorf("%w: %w", ErrStopped, err))
	}
}

// produceRound produces rs in order and waits for all of them.
func (p *Producer) produceRound(rs []*pending) []error {
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	wg.Add(len(rs))
	for i, pd := range rs {
		p.cl.Produce(pd.ctx, pd.r, func(_ *kgo.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	return errs
}

// recoverKgo recovers the topic's failed partitions in kgo, and the topic
// itself if it failed before partitioning.
func (p *Producer) recoverKgo(topic string) {
	if parts := p.cl.FailedProducePartitions()[topic]; len(parts) > 0 {
		p.cl.RecoverProducePartitions(map[string][]int32{topic: parts})
	}
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
func (p *Producer) divertQuarantined(ts *topicState, queue []*pending) []*pending {
	kept := queue[:0]
	for _, pd := range queue {
		p.mu.Lock()
		cause, ok := ts.quarantined[string(pd.r.Key)]
		p.mu.Unlock()
		if ok && pd.r.Key != nil {
			var wg sync.WaitGroup
			wg.Add(1)
			p.deadLetterQuarantined(pd, cause, wg.Done)
			wg.Wait()
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
			p.recoverKgo(topic)
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
func (p *Producer) deadLetter(ts *topicState, pol Policy, pd *pending) error {
	if err := p.produceDeadLetter(pol.topic, pd); err != nil {
		return err
	}
	p.mu.Lock()
	p.stats.DeadLettered++
	if pol.quarantine && pd.r.Key != nil {
		if ts.quarantined == nil {
			ts.quarantined = make(map[string]error)
		}
		if _, ok := ts.quarantined[string(pd.r.Key)]; !ok {
			ts.quarantined[string(pd.r.Key)] = pd.err
			p.stats.Quarantined++
			p.updateSlowLocked(ts)
		}
	}
	p.mu.Unlock()
	p.logf(kgo.LogLevelWarn, "korder: diverted a record to the dead-letter topic", "topic", ts.name, "dead_letter_topic", pol.topic, "err", pd.err)
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
	err := p.cl.ProduceSync(context.WithoutCancel(pd.ctx), p.deadLetterRecord(topic, pd)).FirstErr()
	if err != nil {
		p.recoverKgo(topic)
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
