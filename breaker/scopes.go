package breaker

import "time"

// This file is the breaker's memory of scopes: the state of each, the
// MaxScopes bound and its eviction order, and the tickets each has out
// under the lock (those of the quick path are in quick.go).

// scopeState is one scope's brake. Guarded by b.mu.
type scopeState struct {
	b     *Breaker
	name  string
	state State
	from  State     // the state before the last change; 0 before any
	since time.Time // when it entered its state, or was first seen
	// version is the version of the settings the scope was last reported
	// under (see Allow).
	version uint64
	// gen changes with every change of state; tickets of an older
	// generation count nothing.
	gen       uint64
	failures  int // consecutive failures (closed)
	observed  int // outcomes since the scope last closed (closed)
	successes int // consecutive successful probes (half-open)
	probes    int // probes out (half-open)
	openedAt  time.Time
	cause     error // the failure that opened it
	// Tickets out: slots[i] holds the seq of the ticket owning slot i, 0
	// when free, so a second done of a ticket finds its slot not its own.
	slots     []uint64
	free      []int32
	seq       uint64
	forgotten bool       // evicted (MaxScopes): its tickets count nothing
	q         quickScope // the closed path without the lock; see quick.go
}

// scopeLocked returns the state of scope, remembering it if need be. It
// returns nil when the scope cannot be remembered (see MaxScopes).
func (b *Breaker) scopeLocked(name string, now time.Time) *scopeState {
	if s, ok := b.scopes[name]; ok {
		return s
	}
	b.initLocked()
	if len(b.scopes) >= b.set.MaxScopes && !b.evictLocked() {
		return nil
	}
	s := &scopeState{b: b, name: name, state: Closed, since: now, version: b.set.Version, gen: 1}
	b.touch(s)
	b.scopes[name] = s
	b.index.Store(name, s)
	return s
}

// evictLocked forgets the least recently used closed scope, preferring
// one with no ticket out. It reports false when no scope is closed. It
// looks at every scope: it runs only when a new scope meets MaxScopes.
func (b *Breaker) evictLocked() bool {
	var lru, idle *scopeState
	for _, s := range b.scopes {
		if s.state == Closed && (lru == nil || s.q.used.Load() < lru.q.used.Load()) {
			lru = s
		}
	}
	if lru == nil {
		return false
	}
	if lru.inFlight() > 0 {
		for _, s := range b.scopes {
			if s.state == Closed && s.inFlight() == 0 && (idle == nil || s.q.used.Load() < idle.q.used.Load()) {
				idle = s
			}
		}
	}
	victim := lru
	if idle != nil {
		victim = idle
	}
	delete(b.scopes, victim.name)
	b.index.Delete(victim.name)
	victim.forgotten = true
	victim.q.word.Store(0)
	victim.gen++ // its tickets out now count nothing
	return true
}

// inFlight is the number of s's tickets out. b.mu is held.
func (s *scopeState) inFlight() int {
	return len(s.slots) - len(s.free) + s.quickOut()
}

// issue hands out a ticket of the current generation.
func (s *scopeState) issue() Ticket {
	s.seq++
	var slot int32
	if n := len(s.free); n > 0 {
		slot, s.free = s.free[n-1], s.free[:n-1]
	} else {
		slot = int32(len(s.slots))
		s.slots = append(s.slots, 0)
	}
	s.slots[slot] = s.seq
	return Ticket{s: s, gen: s.gen, seq: s.seq, slot: slot}
}

// release frees t's slot; it reports false when t was done before.
func (s *scopeState) release(t Ticket) bool {
	if s.slots[t.slot] != t.seq {
		return false
	}
	s.slots[t.slot] = 0
	s.free = append(s.free, t.slot)
	return true
}

// Heard reports whether scope's breaker is closed and has heard what its
// settings ask for before it may open: MinObservations outcomes since it
// last closed, or FailureThreshold when that is more. An open or
// half-open scope has not: the breaker decides its calls (it refuses
// them, or lets its probes out), and a scope it does not remember has
// heard nothing.
func (b *Breaker) Heard(scope string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	s := b.scopes[scope]
	if s == nil || s.state != Closed {
		return false
	}
	s.quickFoldLocked()
	defer s.quickPublishLocked()
	return s.observed >= max(b.set.MinObservations, b.set.FailureThreshold)
}
