package throttle

import "time"

// This file is the throttle and the pace as a reader sees them, for a
// page or a health endpoint: read under their locks, changing nothing
// (the window is not moved on, an idle pace is not marked idle), and
// never on the path of a call.

// State is a scope's throttle and pace as they stand.
type State struct {
	// Share is the share of new calls the throttle refuses now, from 0
	// to throttleMaxShare.
	Share float64
	// Requests, Accepted and Rejected are the window's counts: the
	// attempts sent and the calls refused here, those the dependency
	// accepted, and those it rejected.
	Requests, Accepted, Rejected uint64
	// Pace is the rate learnt from 429s, in calls per second; zero while
	// the pace is idle.
	Pace float64
	// HeldUntil is when a 429's Retry-After stops holding new calls;
	// zero when none holds them at now.
	HeldUntil time.Time
}

// StateAt returns the throttle and its pace as they stand at now.
func (t *Throttle) StateAt(now time.Time) State {
	var s State
	if t.started.Load() {
		t.mu.Lock()
		last := max(t.newest, t.tickOf(now))
		var w throttleCounts
		for i := range t.ring {
			b := &t.ring[i]
			if tick := b.tick.Load(); tick == noTick || tick <= last-Buckets || tick > last {
				continue
			}
			sent := b.sent.Load()
			w.calls += sent >> (2 * throttlePackBits)
			w.requests += sent >> throttlePackBits & throttlePackMask
			w.accepts += sent & throttlePackMask
			w.rejects += b.rejects.Load()
		}
		t.mu.Unlock()
		s.Share = t.share(w)
		s.Requests, s.Accepted, s.Rejected = w.requests, w.accepts, w.rejects
	}
	s.Pace, s.HeldUntil = t.pace.stateAt(now)
	return s
}

// stateAt returns the pace's rate at now, zero when idle, and when a
// Retry-After stops holding new calls, zero when none holds them.
func (p *Pace) stateAt(now time.Time) (perSecond float64, heldUntil time.Time) {
	if !p.active.Load() {
		return 0, time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.lastRej
	if p.holdUntil.After(last) {
		last = p.holdUntil
	}
	if p.lim == nil || now.Sub(last) >= p.quiet || p.lastRej.Sub(now) > p.quiet {
		return 0, time.Time{} // idle: the next call would find it so
	}
	if p.holdUntil.After(now) {
		heldUntil = p.holdUntil
	}
	return float64(p.lim.Limit()), heldUntil
}
