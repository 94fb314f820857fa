package korder

// Topics returns how many topics the Producer keeps state for.
func Topics(p *Producer) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.topics)
}

// SetTestHooks sets p's test hooks (see testHooks); call it before any Produce.
func SetTestHooks(p *Producer, called func(n int, keep, accepted bool), parked func()) {
	p.test = &testHooks{called: called, parked: parked}
}
