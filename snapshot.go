package retryfuse

import (
	"slices"
	"strings"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/bulkhead"
)

// This file is a Transport's scopes as a reader sees them (Snapshot): for
// a status page (package debugpage), a health endpoint or a test. It reads
// the records of scopes.go and the state each control keeps in them, under
// the controls' own locks, and adds nothing to the path of a call.

// ScopeState is one scope of a Transport as it stands: the state of each
// control the scope meets, nil for a control that is off.
type ScopeState struct {
	// Scope is the scope's name (see Transport.Scope).
	Scope string
	// Breaker is the scope at the Breaker (see breaker.Breaker.Snapshot:
	// To is its state, At since when, Settings.Version the settings in
	// force): one Change, or, with BrakePolicy.Route, one for each of its
	// divisions the Breaker remembers, sorted by name. Nil without a
	// Breaker; empty, not nil, when the Breaker does not remember the
	// scope (it has not heard of it yet, or forgot it past its MaxScopes).
	Breaker []breaker.Change
	// Budget is the retry budget the scope spends (the one every scope
	// shares when RetryPolicy.Budget is set); nil when it tells nothing
	// (budget.Unlimited, or a Budget without a Snapshot method).
	Budget *budget.Snapshot
	// Bulkhead is the attempts in flight and their limit; nil when the
	// scope keeps no count of them (no MaxInFlight, Adaptive, or
	// SlowStart beside a Breaker: a Breaker alone keeps none).
	Bulkhead *BulkheadState
	// RateLimit is the scope's rate limiter; nil without Load.RateLimit.
	RateLimit *RateLimitState
	// Throttle is the throttle of new calls; nil unless Load.Throttle
	// is on.
	Throttle *ThrottleState
	// Pace is the pace of new calls learnt from 429s; nil unless
	// Load.Pace is on.
	Pace *PaceState
}

// BulkheadState is a scope's attempts in flight and their limit.
type BulkheadState struct {
	InFlight int // attempts sent and not yet done
	Queued   int // attempts waiting for a slot
	// Limit is MaxInFlight, or the learnt limit (Learnt); zero when
	// nothing bounds the attempts but slow start (a Breaker's).
	Limit int
	// Allowed is the attempts admitted at once now: Limit, or fewer
	// during slow start (SlowStart); zero when nothing bounds them.
	Allowed   int
	SlowStart bool
	// Learnt says that Limit is learnt (Load.Adaptive), between Floor
	// and Ceiling (zero otherwise).
	Learnt         bool
	Floor, Ceiling int
}

// RateLimitState is a scope's rate limiter.
type RateLimitState struct {
	Limit  float64 // attempts per second (Load.RateLimit)
	Burst  int
	Tokens float64 // available now; negative while waiters hold reservations
}

// ThrottleState is a scope's throttle of new calls.
type ThrottleState struct {
	// Refusing is the share of new calls refused now, from 0 to 0.9.
	Refusing float64
	// Requests, Accepted and Rejected are the throttle's window: the
	// attempts sent (and calls refused), those the dependency accepted,
	// and those it rejected (a 503, no answer).
	Requests, Accepted, Rejected uint64
}

// PaceState is a scope's pace of new calls, learnt from 429s.
type PaceState struct {
	// Rate is the rate of new calls learnt from 429s, per second; zero
	// while no 429 came lately.
	Rate float64
	// HeldUntil is when a 429's Retry-After stops holding new calls; zero
	// when none holds them.
	HeldUntil time.Time
}

// Snapshot returns every scope whose record the Transport keeps, sorted
// by name (at most Scope.Max of them, more only while all are busy). A
// Transport that has made no call gives none, and Snapshot resolves no
// setting (the first RoundTrip does); nor does one that keeps no record
// per scope (a RetryPolicy.Budget shared by every scope and no control
// per scope), or whose settings are invalid.
//
// Snapshot is safe to call concurrently with calls: it takes the scopes'
// lock for reading while it copies their list, then each control's own
// lock in turn, for a time that grows with the number of scopes.
func (t *Transport) Snapshot() []ScopeState {
	t.scopes.mu.RLock()
	if len(t.scopes.m) == 0 {
		t.scopes.mu.RUnlock()
		return nil
	}
	recs := make([]*scopeRecord, 0, len(t.scopes.m))
	for _, st := range t.scopes.m {
		recs = append(recs, st)
	}
	t.scopes.mu.RUnlock()
	// A record is made by a call, after the settings were resolved: the
	// lock orders their resolution before this read.
	p := &t.p
	slices.SortFunc(recs, func(a, b *scopeRecord) int { return strings.Compare(a.name, b.name) })

	now := p.clock.Now()
	var brakes []breaker.Change
	if p.breaker != nil {
		brakes = p.breaker.Snapshot() // sorted by scope
	}
	var shared *budget.Snapshot
	if p.budget != nil {
		shared = budgetSnapshot(p.budget, now)
	}
	out := make([]ScopeState, len(recs))
	for i, st := range recs {
		s := &out[i]
		s.Scope = st.name
		if p.breaker != nil {
			s.Breaker = breakerScopes(brakes, st.name)
		}
		if s.Budget = shared; st.budget != nil {
			s.Budget = budgetSnapshot(st.budget, now)
		}
		if st.bulkhead != nil {
			s.Bulkhead = bulkheadState(st, now)
		}
		if st.rate != nil {
			s.RateLimit = &RateLimitState{Limit: float64(st.rate.Limit()), Burst: st.rate.Burst(), Tokens: st.rate.TokensAt(now)}
		}
		if st.throttle != nil {
			// One throttle.Throttle holds both: each is shown by its own
			// setting.
			th := st.throttle.StateAt(now)
			if p.throttle {
				s.Throttle = &ThrottleState{Refusing: th.Share, Requests: th.Requests, Accepted: th.Accepted, Rejected: th.Rejected}
			}
			if p.pace {
				s.Pace = &PaceState{Rate: th.Pace, HeldUntil: th.HeldUntil}
			}
		}
	}
	return out
}

// breakerScopes returns the changes of brakes (sorted by scope) that are
// scope name's, none but not nil when there are none: its own, and its divisions by Brake.Route (the name, a
// space and the value). They are together in sorted order, from the
// first at or after name.
func breakerScopes(brakes []breaker.Change, name string) []breaker.Change {
	i, _ := slices.BinarySearchFunc(brakes, name, func(c breaker.Change, n string) int { return strings.Compare(c.Scope, n) })
	out := []breaker.Change{} // not nil: the scope has a Breaker
	for ; i < len(brakes) && strings.HasPrefix(brakes[i].Scope, name); i++ {
		if s := brakes[i].Scope; len(s) == len(name) || s[len(name)] == ' ' {
			out = append(out, brakes[i])
		}
	}
	return out
}

// budgetSnapshot reads b at now, when it tells its state: a budget of
// package budget on the Transport's clock, or any with a Snapshot method.
func budgetSnapshot(b budget.Budget, now time.Time) *budget.Snapshot {
	var s budget.Snapshot
	switch b := b.(type) {
	case clockedBudget:
		at, ok := b.b.(interface {
			SnapshotAt(time.Time) budget.Snapshot
		})
		if !ok {
			return nil
		}
		s = at.SnapshotAt(now)
	case interface{ Snapshot() budget.Snapshot }:
		s = b.Snapshot()
	default:
		return nil
	}
	return &s
}

// bulkheadState reads the scope's bulkhead, and its learnt limit, at now.
func bulkheadState(st *scopeRecord, now time.Time) *BulkheadState {
	b := st.bulkhead.StateAt(now)
	s := &BulkheadState{InFlight: b.InFlight, Queued: b.Queued, Limit: b.Limit, Allowed: b.Allowed, SlowStart: b.Ramping}
	if b.Limit == bulkhead.NoLimit {
		s.Limit = 0
		if !b.Ramping {
			s.Allowed = 0
		}
	}
	if st.adaptive != nil {
		s.Learnt = true
		s.Floor, s.Ceiling = st.adaptive.Bounds()
	}
	return s
}
