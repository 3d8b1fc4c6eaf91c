package retryfuse

import "time"

// This file is the breaker's memory of scopes: the state of each, the
// MaxScopes bound and its eviction order, and the tickets each has out.

// scopeState is one scope's brake. Guarded by b.mu.
type scopeState struct {
	b     *Breaker
	name  string
	state BreakerState
	from  BreakerState // the state before the last change; 0 before any
	since time.Time    // when it entered its state, or was first seen
	// version is the version of the settings the scope was last reported
	// under (see allow).
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
	slots      []uint64
	free       []int32
	seq        uint64
	prev, next *scopeState // links in b.closed
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
	s := &scopeState{b: b, name: name, state: BreakerClosed, since: now, version: b.set.Version, gen: 1}
	b.scopes[name] = s
	b.closed.pushFront(s)
	return s
}

// evictLocked forgets the least recently used closed scope, preferring
// one with no ticket out. It reports false when no scope is closed.
func (b *Breaker) evictLocked() bool {
	victim := b.closed.tail
	for s := victim; s != nil; s = s.prev {
		if len(s.slots) == len(s.free) {
			victim = s
			break
		}
	}
	if victim == nil {
		return false
	}
	b.closed.remove(victim)
	delete(b.scopes, victim.name)
	victim.gen++ // its tickets out now count nothing
	return true
}

// issue hands out a ticket of the current generation.
func (s *scopeState) issue() breakerTicket {
	s.seq++
	var slot int32
	if n := len(s.free); n > 0 {
		slot, s.free = s.free[n-1], s.free[:n-1]
	} else {
		slot = int32(len(s.slots))
		s.slots = append(s.slots, 0)
	}
	s.slots[slot] = s.seq
	return breakerTicket{s: s, gen: s.gen, seq: s.seq, slot: slot}
}

// release frees t's slot; it reports false when t was done before.
func (s *scopeState) release(t breakerTicket) bool {
	if s.slots[t.slot] != t.seq {
		return false
	}
	s.slots[t.slot] = 0
	s.free = append(s.free, t.slot)
	return true
}

// scopeList is an intrusive doubly linked list of scopes.
type scopeList struct{ head, tail *scopeState }

func (l *scopeList) pushFront(s *scopeState) {
	s.prev, s.next = nil, l.head
	if l.head != nil {
		l.head.prev = s
	} else {
		l.tail = s
	}
	l.head = s
}

func (l *scopeList) remove(s *scopeState) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		l.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		l.tail = s.prev
	}
	s.prev, s.next = nil, nil
}

func (l *scopeList) touch(s *scopeState) {
	if l.head != s {
		l.remove(s)
		l.pushFront(s)
	}
}
