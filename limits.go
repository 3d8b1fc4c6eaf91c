package retryfuse

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// This file holds the limits an attempt passes after the breaker, in the
// order of the stack (see Transport): the rate limiter, then the bulkhead.
// Each scope has its own, with the latencies that derive the hedge delay.

// limits are one scope's.
type limits struct {
	scope    string
	host     *hostLimits   // its entry as the limits found last; scopeLimits.mu guards it
	rate     *rate.Limiter // nil without a RateLimit
	bulkhead *bulkhead     // nil without a MaxInFlight
	latency  latencies
}

// scopeLimits keeps the limits of each scope, created on first use, at
// most MaxScopes of them. When full, a scope's are dropped to make room:
// one with nothing to forget (its bulkhead idle, its limiter's bucket
// full) if there is one, else one whose bulkhead is idle. A scope with
// attempts in flight or queued is never dropped — a fresh bulkhead would
// admit MaxInFlight more beside them — so that while every scope kept is
// busy, the map grows past MaxScopes, by at most the attempts in flight,
// and shrinks back as they end.
type scopeLimits struct {
	last atomic.Pointer[hostLimits] // the limits found last by host, read without the lock
	mu   sync.Mutex
	m    map[string]*limits
}

// hostLimits are the limits of a default scope, with the scheme and host
// of the request that found them.
type hostLimits struct {
	key hostKey
	l   *limits
}

// forRequest returns the limits of req's scope. With the default scope,
// the limits found last are kept apart, by the request's scheme and host,
// so that most calls neither build the scope's name nor take the lock.
// scope computes the name.
func (s *scopeLimits) forRequest(req *http.Request, scope func() string, p *policy) *limits {
	if p.scope != nil || req.URL == nil {
		return s.get(scope(), p)
	}
	k := hostKeyOf(req)
	if hl := s.last.Load(); hl != nil && hl.key == k {
		return hl.l
	}
	name := scope()
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.getLocked(name, p)
	// Stored under the lock, so that limits dropped meanwhile are never
	// kept apart; each keeps its entry, so that calls alternating between
	// two hosts allocate nothing.
	if l.host == nil || l.host.key != k {
		l.host = &hostLimits{key: k, l: l}
	}
	s.last.Store(l.host)
	return l
}

// get returns the limits of scope.
func (s *scopeLimits) get(scope string, p *policy) *limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.getLocked(scope, p)
}

// getLocked returns the limits of scope, made on first use. s.mu is held.
func (s *scopeLimits) getLocked(scope string, p *policy) *limits {
	if l, ok := s.m[scope]; ok {
		return l
	}
	if s.m == nil {
		s.m = make(map[string]*limits)
	}
	for len(s.m) >= p.maxScopes && s.evictLocked(p.clock.Now()) {
	}
	l := &limits{scope: scope}
	if p.rateLimit > 0 {
		l.rate = rate.NewLimiter(rate.Limit(p.rateLimit), p.rateBurst)
	}
	if p.maxInFlight > 0 {
		l.bulkhead = &bulkhead{limit: p.maxInFlight, maxQueue: p.maxQueued}
	}
	s.m[scope] = l
	return l
}

// evictLocked drops one scope's limits, and reports false when none may
// go (see scopeLimits). It looks at a few scopes past the first that may
// go, for one with nothing to forget, rather than at them all: the map
// is large when it is full. s.mu is held.
func (s *scopeLimits) evictLocked(now time.Time) bool {
	const lookFurther = 8
	victim, found, looked := "", false, 0
	for k, l := range s.m {
		if found {
			if looked++; looked > lookFurther {
				break
			}
		}
		if l.bulkhead != nil && !l.bulkhead.idle() {
			continue
		}
		if l.rate == nil || l.rate.TokensAt(now) >= float64(l.rate.Burst()) {
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

// dropLocked drops the limits of scope, and forgets them if they were the
// ones found last. s.mu is held.
func (s *scopeLimits) dropLocked(scope string) {
	if hl := s.last.Load(); hl != nil && hl.l == s.m[scope] {
		s.last.Store(nil)
	}
	delete(s.m, scope)
}

// usesLimits reports whether attempts pass per-scope limits at all.
func (p *policy) usesLimits() bool {
	return p.rateLimit > 0 || p.maxInFlight > 0 || p.hedge.max > 0
}

// pass is what an admitted attempt holds until it is over: the breaker's
// ticket and the bulkhead's slot.
type pass struct {
	ticket breakerTicket
	slot   *bulkhead // nil without a slot
}

// enter lets the next attempt through the breaker, the rate limiter and
// the bulkhead, in that order. A hedge waits for none of them. A refusal
// gives back what the gates before it granted.
func (c *call) enter(hedge bool) (pass, error) {
	ticket, err := c.admit()
	if err != nil {
		return pass{}, err
	}
	ps := pass{ticket: ticket}
	if l := c.limits(); l != nil {
		if err := c.rateLimit(l, hedge); err != nil {
			c.leave(ps, attempt{result: result{ignored: true}})
			return pass{}, err
		}
		if l.bulkhead != nil {
			if err := c.bulkhead(l, hedge); err != nil {
				c.leave(ps, attempt{result: result{ignored: true}})
				return pass{}, err
			}
			ps.slot = l.bulkhead
		}
	}
	return ps, nil
}

// leave ends an attempt's pass: the breaker hears what it showed, and its
// bulkhead slot is free again.
func (c *call) leave(ps pass, a attempt) {
	if ps.slot != nil {
		ps.slot.release()
	}
	c.observe(ps.ticket, a)
}

// limits returns the limits of the call's scope, nil when none apply.
func (c *call) limits() *limits {
	if c.lim == nil && c.p.usesLimits() {
		c.lim = c.t.limits.forRequest(c.req, c.scopeName, c.p)
	}
	return c.lim
}

// rateLimit takes a token from the scope's limiter, waiting for it when
// that fits within MaxLimitWait and ends before the caller's deadline (a
// wait that ends at the deadline leaves no time for the attempt; a hedge
// never waits); otherwise it takes none and refuses with a
// *RateLimitError.
func (c *call) rateLimit(l *limits, hedge bool) error {
	if l.rate == nil {
		return nil
	}
	now := c.p.clock.Now()
	r := l.rate.ReserveN(now, 1)
	if !r.OK() {
		return &RateLimitError{Scope: l.scope, RetryAfter: rate.InfDuration}
	}
	d := r.DelayFrom(now)
	if d == 0 {
		return nil
	}
	tooLong := d > c.p.maxLimitWait
	if dl, ok := c.ctx.Deadline(); ok && d >= dl.Sub(now) {
		tooLong = true
	}
	if hedge || tooLong {
		r.CancelAt(now)
		err := &RateLimitError{Scope: l.scope, RetryAfter: d}
		if !hedge {
			c.policyEvent(policyRateLimit, actionRejected, 0, err)
		}
		return err
	}
	if err := c.wait(d); err != nil {
		r.CancelAt(c.p.clock.Now())
		return err
	}
	c.policyEvent(policyRateLimit, actionWaited, d, nil)
	return nil
}

// wouldRefuseHedge returns the refusal the breaker, the rate limiter or
// the bulkhead would give a hedge now, taking nothing from any of them:
// the scope open, no token in the limiter, no free slot. Another call may
// take what it saw free before the hedge enters; then enter refuses it.
func (c *call) wouldRefuseHedge() error {
	now := c.p.clock.Now()
	if err := c.openThrough(now); err != nil {
		return err
	}
	l := c.limits()
	if l == nil {
		return nil
	}
	if l.rate != nil {
		if tokens := l.rate.TokensAt(now); tokens < 1 {
			wait := time.Duration((1 - tokens) / float64(l.rate.Limit()) * float64(time.Second))
			return &RateLimitError{Scope: l.scope, RetryAfter: wait}
		}
	}
	if l.bulkhead != nil && !l.bulkhead.free() {
		return &BulkheadFullError{Scope: l.scope, MaxInFlight: l.bulkhead.limit}
	}
	return nil
}

// bulkhead takes a slot of the scope's bulkhead, waiting in its queue
// unless the attempt is a hedge.
func (c *call) bulkhead(l *limits, hedge bool) error {
	maxWait := c.p.maxLimitWait
	if hedge {
		maxWait = -1
	}
	waited, ok := l.bulkhead.acquire(c.ctx, c.p.clock, maxWait)
	if ok {
		if waited > 0 {
			c.policyEvent(policyBulkhead, actionQueued, waited, nil)
		}
		return nil
	}
	if err := c.ctx.Err(); err != nil {
		return err
	}
	err := &BulkheadFullError{Scope: l.scope, MaxInFlight: l.bulkhead.limit, QueueWait: waited}
	if !hedge {
		c.policyEvent(policyBulkhead, actionRejected, waited, err)
	}
	return err
}

// policyEvent reports an action of the hedge, the bulkhead, the rate
// limiter or the fallback.
func (c *call) policyEvent(policy, action string, wait time.Duration, err error) {
	if h := c.t.Hooks.Policy; h != nil {
		emit(h, PolicyInfo{CallInfo: c.info(), Policy: policy, Action: action, Wait: wait, Err: err})
	}
}
