package korder

// Topics returns how many topics the Producer keeps state for.
func Topics(p *Producer) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.topics)
}

// SetTestHooks sets p's test hook (see Producer.testCalled); call it before
// any Produce.
func SetTestHooks(p *Producer, called func(n int, keep, accepted bool)) {
	p.testCalled = called
}

// Parked returns how many records wait for a recovery call of a partition.
func Parked(p *Producer, topic string, partition int32) int {
	pt := p.lockPartition(topic, partition)
	defer pt.mu.Unlock()
	return pt.parked
}

// LaterState returns what a partition keeps behind quarantined keys, whether
// its worker runs and whether it is failed (-1 later: no such partition).
func LaterState(p *Producer, topic string, partition int32) (later int, worker, failed bool) {
	p.mu.Lock()
	t := p.topics[topic]
	p.mu.Unlock()
	if t == nil {
		return -1, false, false
	}
	t.mu.Lock()
	pt := t.parts[partition]
	t.mu.Unlock()
	if pt == nil {
		return -1, false, false
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return len(pt.later), pt.worker, pt.failure != nil
}
