package retryfuse

// This file holds the package's test seams: what its tests need to reach
// that its users do not.

// settings returns the breaker's settings in force, defaults resolved.
func (b *Breaker) settings() BreakerSettings {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	return b.set
}

// len returns the number of keys held, after dropping the expired ones.
// It takes time proportional to that number when some may have expired.
func (l *MemoryLedger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lazyInit()
	l.sweep(l.clock())
	return len(l.m)
}
