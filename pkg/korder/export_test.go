package korder

// Topics returns how many topics the Producer keeps state for.
func Topics(p *Producer) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.topics)
}
