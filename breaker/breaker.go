// Package breaker is the circuit breaker of retryfuse: one brake per scope
// (a dependency, or a route of one) that opens after consecutive failures,
// fails fast while open, and closes only after probes pass. Set a Breaker as
// a Transport's BrakePolicy.Breaker; the Transport asks it before every
// attempt and tells it each attempt's outcome. Its settings change live
// under a version (Update), and Snapshot reads its scopes.
//
// Time is an argument of the methods a Transport calls (Allow, Ticket.Done,
// StateAt, OpenUntil), so that a Breaker runs on the Transport's clock, and
// a test's.
package breaker

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the circuit breaker: one brake per scope for a failing
// dependency.
//
// It is written by hand rather than taken from github.com/sony/gobreaker/v2
// for two reasons: gobreaker reads time.Now itself, so its timing cannot be
// driven by an injected clock, and it calls OnStateChange while holding its
// mutex, which runs user code under a lock. Its two good ideas are kept: a
// generation counter, so that a late result from an older state is dropped,
// and the two-step shape (Allow, then done with the outcome). State changes
// are returned as Change values for the caller to report once the
// lock is released.

// State is the state of one scope's brake.
type State uint8

const (
	// Closed: requests pass and their outcomes are counted.
	Closed State = iota + 1
	// Open: requests fail fast with a *OpenError.
	Open
	// HalfOpen: the open interval is over; at most MaxProbes probes
	// may be out at once, and their outcomes decide whether it closes.
	HalfOpen
)

var stateNames = [...]string{"", "closed", "open", "half_open"}

func (s State) String() string {
	if s != 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Change reports a change of a breaker scope's state, or,
// with From == To, the first request of a scope under settings of a new
// version (see Breaker.Update): the state did not change, the settings
// did. It is not about one call: it names no request.
//
// Breaker.Snapshot describes each scope as it stands with the same type:
// To is its state, At since when (when it was first seen, for a scope
// that has not changed), From the state before (zero when it has not
// changed).
type Change struct {
	Scope    string
	From, To State
	// At is when the scope changed state; for a change of settings
	// (From == To), when its first request under them came.
	At time.Time
	// Cause is the dependency failure behind an opening (To == Open);
	// nil for other transitions.
	Cause error
	// Settings are the breaker's settings in force, defaults resolved;
	// Settings.Version names them.
	Settings Settings
	// The scope's counts as they stand after the change, each counted in
	// one state only and zero in the others: Failures, the consecutive
	// failures, and Observed, the outcomes since it last closed (closed);
	// Successes, the consecutive successful probes, and Probes, the
	// probes out (half-open). InFlight is the requests let through and
	// not yet done, in any state.
	Failures, Observed int
	Successes, Probes  int
	InFlight           int
}

// Outcome is what a request told about the dependency.
type Outcome uint8

const (
	// Success: the dependency answered well.
	Success Outcome = iota + 1
	// Failure: the dependency failed.
	Failure
	// Ignore: the outcome is no evidence about the dependency (the
	// caller cancelled, a retry budget or another local gate refused). It
	// releases a probe slot and counts nothing. Any value other than
	// Success and Failure is treated the same way.
	Ignore
)

// Breaker brakes requests to failing dependencies, one brake per scope
// (ScopePolicy.Of names it: by default the host). Set it as
// BrakePolicy.Breaker; one Breaker may serve several Transports.
//
// A closed scope opens when it has seen FailureThreshold consecutive
// failures and at least MinObservations outcomes since it last closed.
// While open, requests fail fast with a *OpenError and nothing is
// sent. After OpenTimeout, the next request moves it to half-open and lets
// at most MaxProbes probes out at once; a failed probe opens it again,
// ProbeSuccesses consecutive successful probes close it. Elapsed time alone
// never closes it. The BreakerChange hook reports every change. A scope
// holds about 900 bytes, and 12 more for each request in flight at once
// beyond 64. A closed scope's requests and their successes take no lock
// (see quick.go), so one Breaker may serve every call of a busy
// process.
//
// Its settings can be changed while traffic flows (Update), without
// losing any scope's state, and its scopes read (Snapshot).
//
// The zero value is a Breaker with the default settings. A Breaker never
// calls user code. This type is concurrency safe.
type Breaker struct {
	mu     sync.Mutex
	set    Settings // resolved
	scopes map[string]*scopeState
	// index mirrors scopes, for the quick path to find a scope without
	// the lock; both change together, under it.
	index sync.Map
	uses  atomic.Uint64              // changes of the scope used: their order of use (quickScope.used)
	last  atomic.Pointer[scopeState] // the scope used last; see touch
}

// New returns a Breaker with settings s. A negative setting gives an
// error wrapping retryfuse.ErrInvalidPolicy that names the field.
func New(s Settings) (*Breaker, error) {
	set, err := s.resolve()
	if err != nil {
		return nil, err
	}
	return &Breaker{set: set, scopes: make(map[string]*scopeState)}, nil
}

// initLocked makes the zero Breaker usable.
func (b *Breaker) initLocked() {
	if b.scopes == nil {
		b.set, _ = Settings{}.resolve()
		b.scopes = make(map[string]*scopeState)
	}
}

// StateAt returns the state of scope at now: closed for a scope it does
// not remember. An open scope whose OpenTimeout has elapsed is reported
// half-open, since only a successful probe can close it.
func (b *Breaker) StateAt(scope string, now time.Time) State {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scopes[scope]
	if s == nil {
		return Closed
	}
	if s.state == Open && now.Sub(s.openedAt) >= b.set.OpenTimeout {
		return HalfOpen
	}
	return s.state
}

// OpenUntil reports whether scope is open and will still be open at t
// (before its OpenTimeout ends), with the *OpenError that Allow
// would give then. It changes nothing: a transport asks it before a wait,
// so that it neither waits nor spends a retry token for an attempt the
// breaker would refuse.
func (b *Breaker) OpenUntil(scope string, t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scopes[scope]
	if s == nil || s.state != Open || t.Sub(s.openedAt) >= b.set.OpenTimeout {
		return nil
	}
	return s.openError(b.set)
}

// Allow asks to send one request in scope at now. It returns a ticket whose
// Done must be called with the request's outcome (see Ticket), or a *OpenError (nothing may be
// sent) when the scope is open, or half-open with MaxProbes probes out. The
// transition is non-zero when this call moved the scope from open to
// half-open, or is the first request of the scope under settings of a new
// version (From == To).
func (b *Breaker) Allow(scope string, now time.Time) (Ticket, Change, error) {
	if s := b.findQuick(scope); s != nil {
		if t, ok := b.allowQuick(s); ok {
			return t, Change{}, nil // closed (quick.go)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scopeLocked(scope, now)
	if s == nil {
		return Ticket{}, Change{}, nil // not remembered: see MaxScopes
	}
	s.quickFoldLocked()
	defer s.quickPublishLocked()
	var tr Change
	if s.version != b.set.Version {
		// The first request under new settings reports them; a
		// transition below reports them instead.
		tr = b.settingsChangedLocked(s, now)
	}
	switch s.state {
	case Closed:
		b.touch(s)
		return s.issue(), tr, nil
	case Open:
		if now.Sub(s.openedAt) < b.set.OpenTimeout {
			return Ticket{}, tr, s.openError(b.set)
		}
		tr = b.moveLocked(s, HalfOpen, now, nil)
	}
	if s.probes >= b.set.MaxProbes {
		return Ticket{}, tr, s.openError(b.set)
	}
	s.probes++
	return s.issue(), tr, nil
}

// Ticket is the permission, given by Allow, to send one request. Its Done
// must be called once the request's outcome is known, with Ignore when the
// outcome says nothing about the dependency (the caller's cancellation, a
// local refusal): a half-open scope counts its probes out until their
// tickets are done, and a probe's ticket never done keeps the scope from
// letting another probe through. The zero value is a ticket whose Done
// does nothing.
type Ticket struct {
	s     *scopeState
	gen   uint64 // the scope's generation when the ticket was issued; its low 32 bits for a quick one
	seq   uint64 // the ticket's number, held in its slot until done
	slot  int32
	quick bool // issued without the lock, in s.q.slots (quick.go)
}

// Done reports, at now, the outcome of the ticket's request, with the dependency
// failure as cause for Failure. It returns a non-zero transition
// when the outcome closed or opened the scope. A ticket issued before the
// scope last changed state is ignored, and so is a second done.
func (t Ticket) Done(o Outcome, cause error, now time.Time) Change {
	s := t.s
	if s == nil {
		return Change{}
	}
	if t.quick {
		if !s.releaseQuick(t) {
			return Change{} // done before
		}
		switch o {
		case Success:
			if s.countQuick(t.gen) {
				return Change{}
			}
		case Failure:
		default:
			return Change{} // issued closed: an ignored outcome counts nothing
		}
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.quick {
		if t.gen != s.gen&0xffffffff {
			return Change{} // from an older state
		}
	} else if !s.release(t) || t.gen != s.gen {
		return Change{} // done before, or from an older state
	}
	s.quickFoldLocked()
	defer s.quickPublishLocked()
	switch s.state {
	case Closed:
		switch o {
		case Success:
			s.observed++
			s.failures = 0
		case Failure:
			s.observed++
			s.failures++
			if s.failures >= b.set.FailureThreshold && s.observed >= b.set.MinObservations {
				return b.moveLocked(s, Open, now, cause)
			}
		}
	case HalfOpen:
		s.probes--
		switch o {
		case Success:
			s.successes++
			if s.successes >= b.set.ProbeSuccesses {
				return b.moveLocked(s, Closed, now, nil)
			}
		case Failure:
			return b.moveLocked(s, Open, now, cause)
		}
	}
	return Change{}
}

// moveLocked moves s to state to and returns the transition.
func (b *Breaker) moveLocked(s *scopeState, to State, now time.Time, cause error) Change {
	from := s.state
	s.state, s.from, s.since, s.version = to, from, now, b.set.Version
	s.gen++
	s.failures, s.successes, s.probes = 0, 0, 0
	switch to {
	case Open:
		s.openedAt, s.cause = now, cause
	case Closed:
		s.observed, s.openedAt, s.cause = 0, time.Time{}, nil
		b.touch(s)
	}
	return b.infoLocked(s)
}

// settingsChangedLocked notes that s is now under the settings in force,
// and returns the event that says so: its state unchanged (From == To).
func (b *Breaker) settingsChangedLocked(s *scopeState, now time.Time) Change {
	s.version = b.set.Version
	info := b.infoLocked(s)
	info.From, info.At = s.state, now
	return info
}

// infoLocked describes s as it stands: its last change (From, To, At; At
// is when it was first seen when it has not changed), the settings in
// force, and its counts.
func (b *Breaker) infoLocked(s *scopeState) Change {
	info := Change{Scope: s.name, From: s.from, To: s.state, At: s.since, Settings: b.set,
		InFlight: s.inFlight()}
	switch s.state {
	case Closed:
		info.Failures, info.Observed = s.failures, s.observed
	case Open:
		info.Cause = s.cause
	case HalfOpen:
		info.Successes, info.Probes = s.successes, s.probes
	}
	return info
}

func (s *scopeState) openError(set Settings) error {
	return &OpenError{Scope: s.name, OpenedAt: s.openedAt, ProbeAt: s.openedAt.Add(set.OpenTimeout), Cause: s.cause, Version: set.Version}
}
