package korder

import (
	"sync/atomic"
	"time"
)

type stats struct {
	failures, retries, isolations, deadLettered, dropped, stopped, heldFull, canceled atomic.Int64
}

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

	// PartitionHoldTime is, per topic and partition (-1: the topic), the
	// total time the partition was failed or recovering.
	PartitionHoldTime map[string]map[int32]time.Duration
}

func addHoldTime(m map[string]map[int32]time.Duration, topic string, part int32, d time.Duration) {
	if m[topic] == nil {
		m[topic] = map[int32]time.Duration{}
	}
	m[topic][part] += d
}

// Stats returns a snapshot of the Producer's counters.
func (p *Producer) Stats() Stats {
	s := Stats{
		Failures:          p.st.failures.Load(),
		Retries:           p.st.retries.Load(),
		Isolations:        p.st.isolations.Load(),
		DeadLettered:      p.st.deadLettered.Load(),
		Dropped:           p.st.dropped.Load(),
		Stopped:           p.st.stopped.Load(),
		HeldFull:          p.st.heldFull.Load(),
		Canceled:          p.st.canceled.Load(),
		PartitionHoldTime: map[string]map[int32]time.Duration{},
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for topic, m := range p.holdTime {
		for part, d := range m {
			addHoldTime(s.PartitionHoldTime, topic, part, d)
		}
	}
	for _, t := range p.topics {
		t.mu.Lock()
		for _, pt := range t.parts {
			pt.mu.Lock()
			s.Held += int64(pt.q.len() + len(pt.back) + len(pt.inRound))
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
