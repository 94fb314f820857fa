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
