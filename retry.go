package retryfuse

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse/decide"
)

// This file is the retry stage as a call meets it: the decision core's
// verdict on the call's history, and the wait before a retry: its delay
// (backoff, or the server's Retry-After: retry_after.go), the gates that
// must agree before it starts (the breaker, the retry budget: budget.go),
// and the wait itself. The other gates an attempt passes are admission's
// (admission.go) and the key ledger's (ledger_gate.go).

// record adds an attempt's result to the history the decision core reads.
func (c *call) record(a attempt) {
	c.phase = a.phase
	cost := 1.0
	if a.outcome == decide.OutcomeTimeout {
		cost = c.p.timeoutCost
	}
	h := decide.Attempt{Outcome: a.outcome, Phase: a.phase, Cost: cost}
	switch {
	case c.history != nil:
		c.history = append(c.history, h)
	case c.nhist < len(c.hist):
		c.hist[c.nhist] = h
		c.nhist++
	default:
		c.history = append(append(make([]decide.Attempt, 0, 2*len(c.hist)), c.hist[:]...), h)
	}
	c.lastResp, c.lastErr = a.resp, a.err
}

// attempts is the history the decision core reads. It is kept in the call
// while it fits, rather than in a slice of the call's own array, which
// would keep the call off the stack.
func (c *call) attempts() []decide.Attempt {
	if c.history != nil {
		return c.history
	}
	return c.hist[:c.nhist]
}

// decide asks the decision core about the call as it stands.
func (c *call) decide(ks decide.KeyState) decide.Verdict {
	req := c.facts
	req.ServerHonoursKeys = c.key.present && c.serverHonoursKeys()
	v := decide.Decide(decide.Input{Version: decide.Version, Policy: c.p.decision, Request: req, KeyState: ks, Attempts: c.attempts()})
	if h := c.t.Hooks.Decision; h != nil && (c.attempt > 0 || v.Decision != decide.ReplaySafe) {
		// Before the first attempt, replay_safe only means that nothing
		// stops the call: nothing is replayed, and it is not reported.
		c.hookPanicked("Hooks.Decision", emit(h, DecisionInfo{CallInfo: c.info(), Verdict: v, KeyState: ks}))
	}
	return v
}

// brakeReasons are the sentinels of the rules that stop a call.
var brakeReasons = [...]error{
	decide.RuleConflict:         ErrIdempotencyConflict,
	decide.RuleInFlight:         ErrDuplicateInFlight,
	decide.RuleNotRepeatable:    ErrNotRepeatable,
	decide.RuleFailureThreshold: ErrFailureStreak,
	decide.RuleCostBudget:       ErrCallCost,
}

// brakeReason is the sentinel of a verdict that stops a call.
func brakeReason(v decide.Verdict) error {
	if int(v.Rule) < len(brakeReasons) && brakeReasons[v.Rule] != nil {
		return brakeReasons[v.Rule]
	}
	return ErrNotRepeatable
}

// retryPlan is a scheduled retry.
type retryPlan struct {
	delay time.Duration
	// cause is the failed attempt's error, a *StatusError for a response:
	// the Last of the call's error should the wait be cut short.
	cause error
}

// schedule plans the retry after a retryable result: it works out the
// delay, asks the breaker whether the scope will be open when the delay is
// over, asks the budget for a retry, and sets the last response aside. It
// returns the reason no retry may follow instead, without spending a retry
// token for a retry that will not be sent.
func (c *call) schedule() (retryPlan, error) {
	p := c.p
	c.step()
	now := c.now()
	d, src, ra, hasRA, err := c.retryDelay(now, c.attempt) // the coming attempt is retry number c.attempt
	if err != nil {
		return retryPlan{}, err
	}
	if err := c.openThrough(now.Add(d)); err != nil {
		return retryPlan{}, err // neither wait nor spend a retry token for a refused attempt
	}
	if !c.allowRetry() {
		return retryPlan{}, ErrBudgetExhausted
	}
	plan := retryPlan{delay: d, cause: c.lastErr}
	if c.lastResp != nil {
		plan.cause = statusError(c.lastResp, now)
		if c.lastResp = keepBounded(c.lastResp, p.maxDrain, p.maxDrainTime); c.lastResp == nil {
			c.lastErr = plan.cause // too long to keep: its status stays in the error
		}
		if dl, ok := c.deadline(); ok && d >= dl.Sub(p.clock.Now()) {
			return retryPlan{}, ErrDeadline // reading the body took the time the wait needed
		}
	}
	if h := c.t.Hooks.Retry; h != nil {
		info := RetryInfo{CallInfo: c.info(), Delay: d, Source: src, Err: plan.cause}
		if hasRA {
			info.RetryAfter = ra
		}
		c.hookPanicked("Hooks.Retry", emit(h, info))
	}
	return plan, nil
}

// wait waits for d, and reports the caller's context's error should it end
// first. The timer and the context may end the wait together, and the timer
// win: no attempt starts once the caller is done.
func (c *call) wait(d time.Duration) error {
	if err := c.p.clock.Sleep(c.ctx, d); err != nil {
		return err
	}
	return c.ctx.Err()
}

func keepBounded(resp *http.Response, limit int64, within time.Duration) *http.Response {
	if resp.Body == nil || resp.Body == http.NoBody {
		return resp
	}
	cut := time.AfterFunc(within, func() { _ = resp.Body.Close() })
	body, err := io.ReadAll(io.LimitReader(resp.Body, min(limit, math.MaxInt64-1)+1))
	cut.Stop()
	_ = resp.Body.Close()
	if err != nil || int64(len(body)) > limit {
		return nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp
}
