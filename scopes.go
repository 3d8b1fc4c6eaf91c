package retryfuse

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/bulkhead"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/internal/latency"
	"github.com/retryfuse/retryfuse/internal/throttle"
	"golang.org/x/time/rate"
)

// This file is the scopes of a Transport: how a request's scope is named
// (the default, its key, the scope at the breaker), and what a Transport
// keeps per scope, in one record: the retry budget, the rate limiter, the
// bulkhead (its limit fixed or learnt, and its slow start), the throttle,
// and the latencies that derive the hedge delay. The records live in one
// bounded registry, with one eviction rule, and a call finds its scope's
// once and hands it to every gate.

// scopeRecord is one scope's record. Its fields are set when it is made and
// never replaced; each is safe for concurrent use.
type scopeRecord struct {
	name     string
	key      hostKey
	budget   budget.Budget      // nil when the Transport's budget.Budget is shared by every scope
	rate     *rate.Limiter      // nil without a RateLimit
	bulkhead *bulkhead.Bulkhead // nil without MaxInFlight, Adaptive or a breaker.Breaker (slow start)
	adaptive *bulkhead.Learnt   // nil without a learnt limit
	throttle *throttle.Throttle // nil without the throttle or the pace
	latency  latency.Histogram
	honour   honour.State // whether its server honours Idempotency-Key, learnt
}

// scopes keeps the record of each scope, made on first use, at most
// MaxScopes of them. When full, a scope's record is dropped to make room:
// one with nothing to forget (its bulkhead idle, its limiter's bucket
// full) if there is one, else one whose bulkhead is idle; a dropped scope
// that returns gets a fresh record (a fresh budget among it). A scope with
// attempts in flight or queued is never dropped — a fresh bulkhead would
// admit MaxInFlight more beside them — so that while every scope kept is
// busy, the map grows past MaxScopes, by at most the attempts in flight,
// and shrinks back as they end.
//
// Most Transports call one dependency, so the record found last is kept
// apart and read first without the lock: most calls then touch neither the
// lock nor the map. Calls to several take the read lock only, and build no
// string with the default scope (the key is the request's scheme and host
// as its URL writes them): a scope's name is built once, with its record.
type scopes struct {
	last atomic.Pointer[scopeRecord] // the record found last, read without the lock
	mu   sync.RWMutex                // read to find a record, written to make or drop one
	m    map[hostKey]*scopeRecord
}

// find returns the record of req's scope, made on first use. Making it
// asks p.newBudget for the scope's budget, under the lock, so that a
// scope's budget is made once (a factory that keeps what it makes, to read
// Snapshots, sees exactly the budgets in use); its error is returned.
func (s *scopes) find(req *http.Request, p *policy) (*scopeRecord, error) {
	byName := p.scope != nil || req.URL == nil
	var k hostKey
	if byName {
		k = hostKey{scope: p.scopeOf(req)} // user code: called before the lock
	} else {
		k = hostKeyOf(req)
	}
	if st := s.last.Load(); st != nil && st.key == k {
		return st, nil
	}
	s.mu.RLock()
	st, ok := s.m[k]
	s.mu.RUnlock()
	if ok {
		s.last.Store(st)
		return st, nil
	}
	name := k.scope
	if !byName {
		name = hostScope(req) // a new scope's name, built once
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[k]; ok {
		s.last.Store(st)
		return st, nil
	}
	st, err := newScopeRecord(name, k, p)
	if err != nil {
		return nil, err
	}
	if s.m == nil {
		s.m = make(map[hostKey]*scopeRecord)
	}
	for len(s.m) >= p.maxScopes && s.evictLocked(p.clock.Now()) {
	}
	s.m[k] = st
	s.last.Store(st)
	return st, nil
}

// holds reports whether st is still the record of its scope: not dropped
// to make room (a record made anew knows nothing of what st learnt).
func (s *scopes) holds(st *scopeRecord) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[st.key] == st
}

// newScopeRecord makes the record of scope name under key k.
func newScopeRecord(name string, k hostKey, p *policy) (*scopeRecord, error) {
	st := &scopeRecord{name: name, key: k}
	if p.budget == nil {
		b, err := p.newBudget(name)
		if err != nil {
			return nil, err
		}
		if typedNil(b) {
			return nil, invalidPolicy("Retry.NewBudget", fmt.Sprintf("returned a nil %T for scope %s: return nil for no budget, or a usable one", b, name))
		}
		if b == nil {
			b = budget.Unlimited()
		}
		st.budget = budgetOn(b, p.clock)
	}
	if p.rateLimit > 0 {
		st.rate = rate.NewLimiter(rate.Limit(p.rateLimit), p.rateBurst)
	}
	switch {
	case p.adaptive:
		st.adaptive = bulkhead.NewLearnt(p.minInFlight, p.maxInFlight)
		maxQueue := p.maxQueued
		if maxQueue == 0 {
			maxQueue = -1 // a quarter of the learnt limit, and no standing queue
		}
		st.bulkhead = bulkhead.New(st.adaptive.Current(), maxQueue)
	case p.maxInFlight > 0:
		st.bulkhead = bulkhead.New(p.maxInFlight, p.maxQueued)
	case p.breaker != nil && p.slowStart > 0:
		st.bulkhead = bulkhead.New(bulkhead.NoLimit, -1) // bounds attempts only during slow start, which queues them
	}
	if p.throttle || p.pace {
		st.throttle = throttle.New(p.throttleRatio, p.throttleWindow)
	}
	return st, nil
}

// busy reports whether the scope has attempts in flight or queued: its
// bulkhead, learnt limit and slow start are in use, and a fresh record
// would admit as many again beside them.
func (st *scopeRecord) busy() bool { return st.bulkhead != nil && !st.bulkhead.Idle() }

// owes reports whether the scope's limiter has given out tokens not yet
// refilled at now, or its throttle remembers rejections: something a
// fresh record would forget.
func (st *scopeRecord) owes(now time.Time) bool {
	return st.rate != nil && st.rate.TokensAt(now) < float64(st.rate.Burst()) ||
		st.throttle != nil && st.throttle.Active()
}

// evictLocked drops one scope's record, and reports false when none may
// go (see scopes). It looks at a few scopes past the first that may go, for
// one with nothing to forget, rather than at them all: the map is large
// when it is full. s.mu is held.
func (s *scopes) evictLocked(now time.Time) bool {
	const lookFurther = 8
	var victim hostKey
	found, looked := false, 0
	for k, st := range s.m {
		if found {
			if looked++; looked > lookFurther {
				break
			}
		}
		if st.busy() {
			continue
		}
		if !st.owes(now) {
			s.dropLocked(k)
			return true
		}
		if !found {
			victim, found = k, true
		}
	}
	if found {
		s.dropLocked(victim)
	}
	return found
}

// dropLocked drops the record under k, and forgets it if it was the one
// found last. s.mu is held.
func (s *scopes) dropLocked(k hostKey) {
	if st := s.last.Load(); st != nil && st == s.m[k] {
		s.last.Store(nil)
	}
	delete(s.m, k)
}

// keepsScopes reports whether the Transport keeps records per scope: for
// a budget per scope, for limits per scope, for the throttle of new
// calls or the pace, to learn whether a scope's
// server honours Idempotency-Key, or to name the scope for a Breaker
// without building the name on every call.
func (p *policy) keepsScopes() bool {
	return p.budget == nil || p.throttle || p.pace || p.usesLimits() || p.breaker != nil || p.honourMemory > 0 || p.honoursKeys
}

// hostScope is the default scope of a request: its scheme, host and port,
// the port written even when it is the scheme's default
// ("https://api.example.com:443"), so that one failing dependency neither
// spends another's retry budget nor opens its breaker.
func hostScope(req *http.Request) string {
	return hostScopeWith(req, "", "")
}

// hostScopeWith returns hostScope(req) followed by sep and suffix, built
// in one allocation: hostScope(req) is its prefix, to be sliced off
// without another.
func hostScopeWith(req *http.Request, sep, suffix string) string {
	if req == nil || req.URL == nil {
		return sep + suffix
	}
	scheme, host, port := req.URL.Scheme, req.URL.Hostname(), req.URL.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	bracket := port != "" && strings.IndexByte(host, ':') >= 0 // an IPv6 address, as net.JoinHostPort writes it
	var b strings.Builder
	b.Grow(len(scheme) + len("://[]:") + len(host) + len(port) + len(sep) + len(suffix))
	b.WriteString(scheme)
	b.WriteString("://")
	if bracket {
		b.WriteByte('[')
	}
	b.WriteString(host)
	if bracket {
		b.WriteByte(']')
	}
	if port != "" {
		b.WriteByte(':')
		b.WriteString(port)
	}
	b.WriteString(sep)
	b.WriteString(suffix)
	return b.String()
}

// hostKey identifies a scope: by the request's scheme and host (as
// written in its URL) for the default scope, so that finding its record
// (scopes.go) builds no string; by name for a custom Scope.
type hostKey struct{ scheme, host, scope string }

// hostKeyOf is the key of req's default scope; req.URL is not nil.
func hostKeyOf(req *http.Request) hostKey {
	return hostKey{scheme: req.URL.Scheme, host: withoutDefaultPort(req.URL.Scheme, req.URL.Host)}
}

// withoutDefaultPort returns host without the scheme's default port
// (":80" for http, ":443" for https), so that "h" and "h:80" find the same
// record, as hostScope names them both "http://h:80". It slices host and
// builds no string.
func withoutDefaultPort(scheme, host string) string {
	var port string
	switch scheme {
	case "http":
		port = ":80"
	case "https":
		port = ":443"
	default:
		return host
	}
	if strings.HasSuffix(host, port) {
		return host[:len(host)-len(port)]
	}
	return host
}

// breakerScopeName returns the call's scope at the breaker: its scope, or,
// with Brake.Route, the scope divided by the function's value. It is
// computed on first use.
func (c *call) breakerScopeName() string {
	if c.p.breakerScope == nil {
		return c.scopeName()
	}
	if c.bscope == "" {
		c.bscope = breakerScopeOf(c.p.breakerScope, c.req, c.scopeName())
	}
	return c.bscope
}

// breakerScopeOf returns scope divided by f's value for req: scope, a
// space and the value, or scope alone when f returns empty or panics.
func breakerScopeOf(f func(*http.Request) string, req *http.Request, scope string) (name string) {
	defer func() {
		if recover() != nil {
			name = scope
		}
	}()
	if v := f(req); v != "" {
		return scope + " " + v
	}
	return scope
}

// scopeRecord returns the record of the call's scope, found on first use:
// once per call, before the gates that read it (run), or by whichever
// gate asks first.
func (c *call) scopeRecord() (*scopeRecord, error) {
	if c.st == nil {
		st, err := c.t.scopes.find(c.req, c.p)
		if err != nil {
			return nil, err
		}
		c.st = st
		if c.scope == "" {
			c.scope = st.name // named once, for the breaker and the ledger too
		}
	}
	return c.st, nil
}
