package korder

import (
	"sync"
	"time"
)

// topic is what the Producer keeps for a topic with a failed partition or a
// quarantined key: its partitions' state machines (partition -1 for a failure
// of the whole topic, before its records were partitioned), and what makes
// Produce for the topic leave the no-failure path. A topic with neither is
// forgotten.
//
// Lock order: Producer.mu, topic.mu, partition.mu, topic.amu.
type topic struct {
	p    *Producer
	name string

	mu    sync.Mutex
	parts map[int32]*partition

	amu        sync.Mutex
	quarantine quarantine
	dlTopic    map[string]string // quarantined key: its dead-letter topic
	attn       bool              // counted in Producer.attn
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
	p := t.p
	p.mu.Lock()
	defer p.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	pt.mu.Lock()
	idle := !pt.worker && pt.stopped == nil && pt.failure == nil && pt.q.len() == 0 && len(pt.inRound) == 0
	pt.mu.Unlock()
	if !idle || t.parts[pt.id] != pt {
		return
	}
	delete(t.parts, pt.id)
	addHoldTime(p.holdTime, t.name, pt.id, time.Since(pt.since))
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

// setAttnLocked keeps the Producer's count of topics off the no-failure path.
func (t *topic) setAttnLocked() {
	attn := len(t.quarantine) > 0
	if attn != t.attn {
		t.attn = attn
		if attn {
			t.p.attn.Add(1)
		} else {
			t.p.attn.Add(-1)
		}
	}
}

// admit tells a Produce of the topic whether to divert the record to the
// dead-letter topic (quarantined key, with its cause) or go on (as for a topic
// with nothing kept, nil).
func (t *topic) admit(key []byte) (dlTopic string, cause error) {
	if t == nil {
		return "", nil
	}
	t.amu.Lock()
	defer t.amu.Unlock()
	if key != nil {
		if cause := t.quarantine[string(key)]; cause != nil {
			return t.dlTopic[string(key)], cause
		}
	}
	return "", nil
}

func (t *topic) quarantineRoom(key []byte) bool {
	t.amu.Lock()
	defer t.amu.Unlock()
	return t.roomLocked(key)
}

// roomLocked: key needs no room (nil, or quarantined), or has it. Under amu.
func (t *topic) roomLocked(key []byte) bool {
	_, ok := t.quarantine[string(key)]
	return key == nil || ok || len(t.quarantine) < t.p.cfg.maxQuarantined
}

func (t *topic) addQuarantine(key []byte, dlTopic string, cause error) {
	t.amu.Lock()
	defer t.amu.Unlock()
	if _, ok := t.quarantine[string(key)]; ok || !t.roomLocked(key) {
		return
	}
	if t.quarantine == nil {
		t.quarantine, t.dlTopic = quarantine{}, map[string]string{}
	}
	t.quarantine[string(key)], t.dlTopic[string(key)] = cause, dlTopic
	t.setAttnLocked()
}

func (t *topic) release(key []byte) bool {
	t.amu.Lock()
	defer t.amu.Unlock()
	_, ok := t.quarantine[string(key)]
	delete(t.quarantine, string(key))
	delete(t.dlTopic, string(key))
	t.setAttnLocked()
	return ok
}
