package retryfuse

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
// and the two-step shape (allow, then done with the outcome). State changes
// are returned as BreakerChangeInfo values for the caller to report once the
// lock is released.

// BreakerState is the state of one scope's brake.
type BreakerState uint8

const (
	// BreakerClosed: requests pass and their outcomes are counted.
	BreakerClosed BreakerState = iota + 1
	// BreakerOpen: requests fail fast with a *CircuitOpenError.
	BreakerOpen
	// BreakerHalfOpen: the open interval is over; at most MaxProbes probes
	// may be out at once, and their outcomes decide whether it closes.
	BreakerHalfOpen
)

var breakerStateNames = [...]string{"", "closed", "open", "half_open"}

func (s BreakerState) String() string {
	if s != 0 && int(s) < len(breakerStateNames) {
		return breakerStateNames[s]
	}
	return "BreakerState(" + strconv.Itoa(int(s)) + ")"
}

// BreakerSettings configures a Breaker. A zero field means its default; a
// negative one is invalid.
type BreakerSettings struct {
	// FailureThreshold is the number of consecutive dependency failures
	// that opens a scope. Zero means 5.
	FailureThreshold int
	// MinObservations is the number of outcomes (successes and failures) a
	// scope must have seen since it last closed, or since it was first
	// seen, before it may open, so that a few failures out of a tiny sample
	// do not open it. Zero means FailureThreshold; a value at or below
	// FailureThreshold has no further effect.
	MinObservations int
	// OpenTimeout is how long a scope stays open before probes may run.
	// Zero means 30s.
	OpenTimeout time.Duration
	// MaxProbes is the number of probes let through at once when a scope is
	// half-open. Zero means 1.
	MaxProbes int
	// ProbeSuccesses is the number of consecutive successful probes that
	// close a half-open scope. Zero means 1.
	ProbeSuccesses int
	// MaxScopes bounds the number of scopes remembered. When it is reached,
	// a new scope evicts the least recently used closed scope that has no
	// request in flight, else the least recently used closed scope (the
	// outcomes of its requests in flight are then dropped). Open and
	// half-open scopes are never forgotten: while every remembered scope is
	// open or half-open, a new scope's requests pass unbraked and
	// uncounted. Zero means 1024.
	MaxScopes int
	// Version names these settings, so that every change of a scope's
	// state, every refusal and every event says which settings were in
	// force (BreakerChangeInfo.Settings, CircuitOpenError.Version): a
	// change of thresholds is never mistaken for a recovery. Zero means
	// the next version: 1 for NewBreaker, one above the version in force
	// for Update. A version set must not go backwards (see Update).
	Version uint64
}

// resolve validates s and fills in the defaults.
func (s BreakerSettings) resolve() (BreakerSettings, error) {
	ints := [...]struct {
		name string
		v    int
	}{
		{"FailureThreshold", s.FailureThreshold},
		{"MinObservations", s.MinObservations},
		{"MaxProbes", s.MaxProbes},
		{"ProbeSuccesses", s.ProbeSuccesses},
		{"MaxScopes", s.MaxScopes},
	}
	for _, f := range ints {
		if f.v < 0 {
			return s, invalidPolicy("BreakerSettings."+f.name, "must not be negative, got "+strconv.Itoa(f.v))
		}
	}
	if s.OpenTimeout < 0 {
		return s, invalidPolicy("BreakerSettings.OpenTimeout", "must not be negative, got "+s.OpenTimeout.String())
	}
	orDefault := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	orDefault(&s.FailureThreshold, 5)
	orDefault(&s.MinObservations, s.FailureThreshold)
	orDefault(&s.MaxProbes, 1)
	orDefault(&s.ProbeSuccesses, 1)
	orDefault(&s.MaxScopes, 1024)
	if s.Version == 0 {
		s.Version = 1 // NewBreaker's; Update gives the next
	}
	if s.OpenTimeout == 0 {
		s.OpenTimeout = 30 * time.Second
	}
	return s, nil
}

// observation is what a request told about the dependency.
type observation uint8

const (
	// observeSuccess: the dependency answered well.
	observeSuccess observation = iota + 1
	// observeFailure: the dependency failed.
	observeFailure
	// observeIgnore: the outcome is no evidence about the dependency (the
	// caller cancelled, a retry budget or another local gate refused). It
	// releases a probe slot and counts nothing. Any value other than
	// observeSuccess and observeFailure is treated the same way.
	observeIgnore
)

// Breaker brakes requests to failing dependencies, one brake per scope
// (Transport.Scope names it: by default the host). Set it as
// Transport.Breaker; one Breaker may serve several Transports.
//
// A closed scope opens when it has seen FailureThreshold consecutive
// failures and at least MinObservations outcomes since it last closed.
// While open, requests fail fast with a *CircuitOpenError and nothing is
// sent. After OpenTimeout, the next request moves it to half-open and lets
// at most MaxProbes probes out at once; a failed probe opens it again,
// ProbeSuccesses consecutive successful probes close it. Elapsed time alone
// never closes it. The BreakerChange hook reports every change. A scope
// holds about 900 bytes, and 12 more for each request in flight at once
// beyond 64. A closed scope's requests and their successes take no lock
// (see breaker_quick.go), so one Breaker may serve every call of a busy
// process.
//
// Its settings can be changed while traffic flows (Update), without
// losing any scope's state, and its scopes read (Snapshot).
//
// The zero value is a Breaker with the default settings. A Breaker never
// calls user code. This type is concurrency safe.
type Breaker struct {
	mu     sync.Mutex
	set    BreakerSettings // resolved
	scopes map[string]*scopeState
	// index mirrors scopes, for the quick path to find a scope without
	// the lock; both change together, under it.
	index sync.Map
	uses  atomic.Uint64              // changes of the scope used: their order of use (quickScope.used)
	last  atomic.Pointer[scopeState] // the scope used last; see touch
}

// NewBreaker returns a Breaker with settings s. A negative setting gives an
// error wrapping ErrInvalidPolicy that names the field.
func NewBreaker(s BreakerSettings) (*Breaker, error) {
	set, err := s.resolve()
	if err != nil {
		return nil, err
	}
	return &Breaker{set: set, scopes: make(map[string]*scopeState)}, nil
}

// initLocked makes the zero Breaker usable.
func (b *Breaker) initLocked() {
	if b.scopes == nil {
		b.set, _ = BreakerSettings{}.resolve()
		b.scopes = make(map[string]*scopeState)
	}
}

// stateAt returns the state of scope at now: closed for a scope it does
// not remember. An open scope whose OpenTimeout has elapsed is reported
// half-open, since only a successful probe can close it.
func (b *Breaker) stateAt(scope string, now time.Time) BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scopes[scope]
	if s == nil {
		return BreakerClosed
	}
	if s.state == BreakerOpen && now.Sub(s.openedAt) >= b.set.OpenTimeout {
		return BreakerHalfOpen
	}
	return s.state
}

// openUntil reports whether scope is open and will still be open at t
// (before its OpenTimeout ends), with the *CircuitOpenError that allow
// would give then. It changes nothing: a transport asks it before a wait,
// so that it neither waits nor spends a retry token for an attempt the
// breaker would refuse.
func (b *Breaker) openUntil(scope string, t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scopes[scope]
	if s == nil || s.state != BreakerOpen || t.Sub(s.openedAt) >= b.set.OpenTimeout {
		return nil
	}
	return s.openError(b.set)
}

// allow asks to send one request in scope at now. It returns a ticket to
// mark done with the request's outcome, or a *CircuitOpenError (nothing may be
// sent) when the scope is open, or half-open with MaxProbes probes out. The
// transition is non-zero when this call moved the scope from open to
// half-open, or is the first request of the scope under settings of a new
// version (From == To).
func (b *Breaker) allow(scope string, now time.Time) (breakerTicket, BreakerChangeInfo, error) {
	if s := b.findQuick(scope); s != nil {
		if t, ok := b.allowQuick(s); ok {
			return t, BreakerChangeInfo{}, nil // closed (breaker_quick.go)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scopeLocked(scope, now)
	if s == nil {
		return breakerTicket{}, BreakerChangeInfo{}, nil // not remembered: see MaxScopes
	}
	s.quickFoldLocked()
	defer s.quickPublishLocked()
	var tr BreakerChangeInfo
	if s.version != b.set.Version {
		// The first request under new settings reports them; a
		// transition below reports them instead.
		tr = b.settingsChangedLocked(s, now)
	}
	switch s.state {
	case BreakerClosed:
		b.touch(s)
		return s.issue(), tr, nil
	case BreakerOpen:
		if now.Sub(s.openedAt) < b.set.OpenTimeout {
			return breakerTicket{}, tr, s.openError(b.set)
		}
		tr = b.moveLocked(s, BreakerHalfOpen, now, nil)
	}
	if s.probes >= b.set.MaxProbes {
		return breakerTicket{}, tr, s.openError(b.set)
	}
	s.probes++
	return s.issue(), tr, nil
}

// breakerTicket is the permission, given by allow, to send one request.
// The zero value is a ticket whose done does nothing.
type breakerTicket struct {
	s     *scopeState
	gen   uint64 // the scope's generation when the ticket was issued; its low 32 bits for a quick one
	seq   uint64 // the ticket's number, held in its slot until done
	slot  int32
	quick bool // issued without the lock, in s.q.slots (breaker_quick.go)
}

// done reports, at now, the outcome of the ticket's request, with the dependency
// failure as cause for observeFailure. It returns a non-zero transition
// when the outcome closed or opened the scope. A ticket issued before the
// scope last changed state is ignored, and so is a second done.
func (t breakerTicket) done(o observation, cause error, now time.Time) BreakerChangeInfo {
	s := t.s
	if s == nil {
		return BreakerChangeInfo{}
	}
	if t.quick {
		if !s.releaseQuick(t) {
			return BreakerChangeInfo{} // done before
		}
		switch o {
		case observeSuccess:
			if s.countQuick(t.gen) {
				return BreakerChangeInfo{}
			}
		case observeFailure:
		default:
			return BreakerChangeInfo{} // issued closed: an ignored outcome counts nothing
		}
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.quick {
		if t.gen != s.gen&0xffffffff {
			return BreakerChangeInfo{} // from an older state
		}
	} else if !s.release(t) || t.gen != s.gen {
		return BreakerChangeInfo{} // done before, or from an older state
	}
	s.quickFoldLocked()
	defer s.quickPublishLocked()
	switch s.state {
	case BreakerClosed:
		switch o {
		case observeSuccess:
			s.observed++
			s.failures = 0
		case observeFailure:
			s.observed++
			s.failures++
			if s.failures >= b.set.FailureThreshold && s.observed >= b.set.MinObservations {
				return b.moveLocked(s, BreakerOpen, now, cause)
			}
		}
	case BreakerHalfOpen:
		s.probes--
		switch o {
		case observeSuccess:
			s.successes++
			if s.successes >= b.set.ProbeSuccesses {
				return b.moveLocked(s, BreakerClosed, now, nil)
			}
		case observeFailure:
			return b.moveLocked(s, BreakerOpen, now, cause)
		}
	}
	return BreakerChangeInfo{}
}

// moveLocked moves s to state to and returns the transition.
func (b *Breaker) moveLocked(s *scopeState, to BreakerState, now time.Time, cause error) BreakerChangeInfo {
	from := s.state
	s.state, s.from, s.since, s.version = to, from, now, b.set.Version
	s.gen++
	s.failures, s.successes, s.probes = 0, 0, 0
	switch to {
	case BreakerOpen:
		s.openedAt, s.cause = now, cause
	case BreakerClosed:
		s.observed, s.openedAt, s.cause = 0, time.Time{}, nil
		b.touch(s)
	}
	return b.infoLocked(s)
}

// settingsChangedLocked notes that s is now under the settings in force,
// and returns the event that says so: its state unchanged (From == To).
func (b *Breaker) settingsChangedLocked(s *scopeState, now time.Time) BreakerChangeInfo {
	s.version = b.set.Version
	info := b.infoLocked(s)
	info.From, info.At = s.state, now
	return info
}

// infoLocked describes s as it stands: its last change (From, To, At; At
// is when it was first seen when it has not changed), the settings in
// force, and its counts.
func (b *Breaker) infoLocked(s *scopeState) BreakerChangeInfo {
	info := BreakerChangeInfo{Scope: s.name, From: s.from, To: s.state, At: s.since, Settings: b.set,
		InFlight: s.inFlight()}
	switch s.state {
	case BreakerClosed:
		info.Failures, info.Observed = s.failures, s.observed
	case BreakerOpen:
		info.Cause = s.cause
	case BreakerHalfOpen:
		info.Successes, info.Probes = s.successes, s.probes
	}
	return info
}

func (s *scopeState) openError(set BreakerSettings) error {
	return &CircuitOpenError{Scope: s.name, OpenedAt: s.openedAt, ProbeAt: s.openedAt.Add(set.OpenTimeout), Cause: s.cause, Version: set.Version}
}
