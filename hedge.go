package retryfuse

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/alarm"
)

// This file sends a hedged attempt: a group of branches of the same
// request, the first sent at once and each other after the hedge delay
// while none has answered well; the first good answer wins, and the others
// are cancelled. Each branch runs on a goroutine of its own; everything
// else (the gates, the hooks, the decisions) stays on the caller's, and no
// branch outlives the group. A hedge enters the gates without waiting
// (enterHedge), and is not sent when one would refuse it.

// hedgePolicy is the resolved hedging of a Transport.
type hedgePolicy struct {
	max      int
	delay    time.Duration
	quantile float64
	methods  []string
}

var defaultHedgeMethods = []string{http.MethodGet, http.MethodHead, http.MethodOptions}

// errHedgeLost is the error a branch is reported with when another
// branch's answer won and it was cancelled.
var errHedgeLost = errors.New("retryfuse: hedge lost: another branch answered first")

// hedges reports whether the call's attempts are hedged, under a policy
// that hedges (its caller checks MaxHedges first): the method is one of
// HedgeMethods, and the request may be sent again at all (the decision
// core's request-safety rule).
func (c *call) hedges() bool {
	h := &c.p.hedge
	if h.max <= 0 || c.passThrough || !slices.Contains(h.methods, c.method) {
		return false
	}
	return c.facts.ReplayableBody && (decide.IdempotentMethod(c.method) || c.facts.IdempotencyKey)
}

// hedgeDelay is how long the group waits before its next hedge, and false
// when no hedge is to be sent (no estimate yet and no HedgeDelay).
func (c *call) hedgeDelay() (time.Duration, bool) {
	h := &c.p.hedge
	if l := c.limits(); h.quantile > 0 && l != nil {
		if d, ok := l.latency.Quantile(h.quantile); ok {
			if h.delay > 0 {
				// HedgeDelay bounds the estimate: a few slow answers
				// recorded never make hedging later than configured.
				d = min(d, h.delay)
			}
			return d, true
		}
	}
	return h.delay, h.delay > 0
}

// branch is one branch of a group: its attempt, and its result, filled in
// by its goroutine.
type branch struct {
	f     *flight // &fl
	fl    flight
	trace attemptTrace
	resp  *http.Response
	err   error
	ps    pass
	panic any // what the base panicked with, to re-panic on the caller's goroutine
	took  time.Duration
	lost  bool // cancelled because another branch won
	ended bool
}

// sendHedged sends the call's next attempt as a hedged group, its first
// branch admitted with first. It returns the winning branch's attempt, or,
// when every branch failed, the last failure; the other branches' results
// are recorded in the call's history before it (a failed branch is a
// failed attempt) or, when cancelled, reported and dropped.
func (c *call) sendHedged(first pass) (attempt, error) {
	h := &c.p.hedge
	// Each branch sends back its number in the group.
	all := make([]*branch, 0, 1+h.max)
	results := make(chan int, cap(all))
	var (
		winner   attempt
		won      bool
		failed   []attempt
		panicked any
		began    = c.p.clock.Now()
	)
	// launch sends branch n with body, admitted with ps.
	launch := func(ps pass, body io.ReadCloser, n int) {
		c.attempt++
		b := &branch{ps: ps}
		b.f = &b.fl
		all = append(all, b)
		c.prepare(b.f, c.ctx, &b.trace, body, true)
		b.f.branch = n
		c.started(b.f)
		base, clk := c.p.base, c.p.clock
		go func() {
			defer func() {
				if v := recover(); v != nil {
					b.panic = v
					b.f.cancel()
				}
				results <- n
			}()
			start := clk.Now()
			b.resp, b.err = b.f.exchange(base)
			b.took = clk.Now().Sub(start)
		}()
	}
	body, err := c.body()
	if err != nil {
		c.leave(first, attempt{result: result{ignored: true}})
		return attempt{}, err
	}
	launch(first, body, 0)

	delay, hedging := c.hedgeDelay()
	var timer alarm.Alarm // the zero Alarm never fires
	if hedging {
		timer = alarm.After(c.p.clock, delay)
	}
	defer func() { timer.Stop() }()

	pending := 1
	for pending > 0 {
		select {
		case <-timer.C:
			timer.Stop()
			timer = alarm.Alarm{}
			if won || len(all) > h.max {
				continue
			}
			ps, err := c.enterHedge()
			var body io.ReadCloser
			if err == nil {
				if body, err = c.body(); err != nil {
					c.leave(ps, attempt{result: result{ignored: true}})
					c.giveBackHedge()
				}
			}
			if err != nil {
				c.policyEventBranch(len(all), actionRefused, c.p.clock.Now().Sub(began), err)
				continue // no more hedges in this group
			}
			c.policyEventBranch(len(all), actionSent, c.p.clock.Now().Sub(began), nil)
			launch(ps, body, len(all))
			pending++
			if len(all) <= h.max {
				timer = alarm.After(c.p.clock, delay)
			}
		case n := <-results:
			b := all[n]
			pending--
			b.ended = true
			if b.panic != nil {
				c.leave(b.ps, attempt{result: result{ignored: true}})
				panicked = b.panic
				c.cancelBranches(all)
				continue
			}
			if won || panicked != nil {
				c.lose(b)
				continue
			}
			a := c.finish(b.f, b.resp, b.err)
			c.leave(b.ps, a)
			if l := c.limits(); l != nil && !a.ignored {
				// Only the dependency's own doing tells its latency.
				l.latency.Observe(b.took)
			}
			if !a.retryable || a.outcome == decide.OutcomeSuccess {
				winner, won = a, true
				c.cancelBranches(all)
				continue
			}
			failed = append(failed, a)
		}
	}
	if panicked != nil {
		for _, a := range failed {
			drain(a.resp, 0)
		}
		if won {
			drain(winner.resp, 0)
		}
		panic(panicked)
	}
	if !won {
		// Every branch failed: the last failure stands for the group, the
		// others are recorded before it.
		last := failed[len(failed)-1]
		for _, a := range failed[:len(failed)-1] {
			c.record(a)
			c.chargeResends(a)
			drain(a.resp, 0)
		}
		return last, nil
	}
	for _, a := range failed {
		c.record(a)
		c.chargeResends(a)
		drain(a.resp, 0)
	}
	return winner, nil
}

// cancelBranches cancels the branches still in flight.
func (c *call) cancelBranches(bs []*branch) {
	for _, b := range bs {
		if !b.ended {
			b.f.cancel()
		}
	}
}

// lose reports a branch cancelled because another answered first (or
// that answered after): its response is closed, and its result is no
// evidence about the dependency.
func (c *call) lose(b *branch) {
	b.lost = true
	drain(b.resp, 0)
	c.leave(b.ps, attempt{result: result{ignored: true}})
	if c.t.Hooks.AttemptDone == nil {
		return
	}
	err := b.err
	if err == nil {
		err = errHedgeLost
	} else {
		err = fmt.Errorf("%w: %w", errHedgeLost, err)
	}
	info := AttemptDoneInfo{CallInfo: c.infoOf(b.f, b.f.trace.phase(b.resp, c.p.tracing)), Err: err,
		Outcome: decide.OutcomeUnknown, Duration: b.took, Connections: int(b.f.trace.conns.Load())}
	if b.resp != nil {
		info.StatusCode = b.resp.StatusCode
	}
	c.hookPanicked("Hooks.AttemptDone", emit(c.t.Hooks.AttemptDone, info))
}

// policyEventBranch reports a hedge of branch n, sent or refused after
// the group waited wait. The event is about the hedge: its Attempt is the
// number the hedge has, or would have had.
func (c *call) policyEventBranch(n int, action string, wait time.Duration, err error) {
	if h := c.t.Hooks.Policy; h != nil {
		ci := c.info()
		ci.Attempt, ci.Branch = c.attempt+1, n
		emit(h, PolicyInfo{CallInfo: ci, Policy: policyHedge, Action: action, Wait: wait, Err: err})
	}
}

// validMethod reports whether m is an HTTP method token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		b := m[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case b < 0x80 && b > 0x20 && !isSeparator(b):
		default:
			return false
		}
	}
	return true
}

func isSeparator(b byte) bool {
	switch b {
	case '(', ')', '<', '>', '@', ',', ';', ':', '\\', '"', '/', '[', ']', '?', '=', '{', '}', 0x7f:
		return true
	}
	return false
}

// enterHedge admits a hedge: an attempt left (taken at once, see
// takeHedge), the caller still waiting, the budget's retry, then the
// breaker, the rate limiter and the bulkhead without waiting. The gates
// are asked first whether they would refuse, taking nothing, so that a
// hedge they refuse takes no retry from the budget (as schedule spends
// none on a retry that will not be sent).
func (c *call) enterHedge() (pass, error) {
	c.step() // a hedge is admitted later than its group's first attempt
	if !c.takeHedge() {
		return pass{}, ErrAttemptsExhausted
	}
	ps, err := c.admitHedge()
	if err != nil {
		c.giveBackHedge()
	}
	return ps, err
}

// admitHedge asks the gates after the attempts for a hedge.
func (c *call) admitHedge() (pass, error) {
	if err := c.ctx.Err(); err != nil {
		return pass{}, err
	}
	if err := c.wouldRefuseHedge(); err != nil {
		return pass{}, err
	}
	if c.budget != nil && !c.allowRetry() {
		return pass{}, ErrBudgetExhausted
	}
	return c.enter(true)
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
			return &RateLimitError{Scope: l.name, RetryAfter: wait}
		}
	}
	if l.bulkhead != nil && !l.bulkhead.Free(now) {
		return l.bulkheadFull(now, 0)
	}
	return nil
}
