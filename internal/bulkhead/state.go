package bulkhead

import "time"

// This file is the bulkhead and the learnt limit as a reader sees them,
// for a page or a health endpoint: read under their locks, changing
// nothing, and never on the path of a call.

// State is a bulkhead as it stands.
type State struct {
	InFlight int // attempts holding a slot
	Queued   int // attempts waiting for one
	// Limit is MaxInFlight or the learnt limit; NoLimit for a bulkhead
	// that bounds attempts only during slow start.
	Limit int
	// Allowed is the attempts admitted at once now: Limit, or fewer
	// during slow start (Ramping).
	Allowed int
	Ramping bool
}

// StateAt returns the bulkhead as it stands at now. Unlike the admission
// of an attempt, it does not end a ramp whose window is over: it reads.
func (b *Bulkhead) StateAt(now time.Time) State {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := State{InFlight: int(b.inFlight.Load()), Queued: len(b.queue), Limit: b.limit, Allowed: b.limit}
	if b.ramp.on {
		r := b.ramp // a copy: capAt turns the ramp off once its window is over
		if c := r.capAt(now); r.on {
			s.Allowed, s.Ramping = min(b.limit, c), true
		}
	}
	return s
}

// Bounds returns the floor and the ceiling of the learnt limit.
func (l *Learnt) Bounds() (floor, ceiling int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.floor), int(l.ceiling)
}
