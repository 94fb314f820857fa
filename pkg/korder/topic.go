package korder

import (
	"math"
	"sync"
	"time"
)

// topic is what the Producer keeps for a topic with a failed partition or a
// quarantined key. Lock order: Producer.mu, topic.mu, partition.mu, topic.amu.
type topic struct {
	p    *Producer
	name string

	mu    sync.Mutex
	parts map[int32]*partition

	amu        sync.Mutex
	quarantine quarantine
	attn       int32 // 1, counted in Producer.attn: it quarantines keys
}

// partitionLocked returns partition id's state machine, made if need be.
func (t *topic) partitionLocked(id int32) *partition {
	pt := t.parts[id]
	if pt == nil {
		pt = &partition{p: t.p, t: t, id: id, since: time.Now()}
		pt.cond.L = &pt.mu
		t.parts[id] = pt
	}
	return pt
}

// forget drops pt once it is healthy, and the topic once it has nothing.
func (t *topic) forget(pt *partition) {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	pt.mu.Lock()
	idle := !pt.worker && pt.parked == 0 && pt.stopped == nil && pt.failure == nil && pt.q.len() == 0 && len(pt.inRound) == 0 && len(pt.later) == 0
	pt.mu.Unlock()
	if !idle || t.parts[pt.id] != pt {
		return
	}
	delete(t.parts, pt.id)
	pt.mu.Lock()
	pt.slowLocked(0) // resumed, then refused for good
	pt.mu.Unlock()
	addHoldTime(t.p.holdTime, t.name, pt.id, time.Since(pt.since))
	t.forgetLocked()
}

// forgetLocked drops the topic if it has nothing. Under p.mu and t.mu.
func (t *topic) forgetLocked() {
	t.amu.Lock()
	empty := len(t.parts) == 0 && len(t.quarantine) == 0
	t.amu.Unlock()
	if empty && t.p.topics[t.name] == t {
		delete(t.p.topics, t.name)
	}
}

// setAttnLocked counts the topic in Producer.attn while it quarantines keys.
func (t *topic) setAttnLocked() {
	n := int32(min(len(t.quarantine), 1))
	t.p.attn.Add(n - t.attn)
	t.attn = n
}

// admit tells Produce whether a record's key is quarantined (ok).
func (t *topic) admit(key []byte) (q quarantined, ok bool) {
	if t == nil {
		return q, false
	}
	t.amu.Lock()
	defer t.amu.Unlock()
	return t.quarantinedLocked(key, math.MaxUint64) // a record produced now is after the one that quarantined it, whatever its number
}
