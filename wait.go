package retryfuse

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse/internal/backoff"
)

// This file is the wait before a retry: its delay (backoff or the server's
// Retry-After, within the caller's deadline), the gates that must agree
// before it starts (the breaker, the budget), and the wait itself.

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
	retryNo := c.attempt // the coming attempt is retry number c.attempt
	d := backoff.FullJitter(backoff.Ceiling(p.initialBackoff, p.maxBackoff, retryNo), p.randN)
	src := "backoff"
	ra, hasRA := backoff.RetryAfter(c.lastResp, now)
	remaining, hasDeadline := time.Duration(0), false
	if dl, ok := c.deadline(); ok {
		remaining, hasDeadline = dl.Sub(now), true
	}
	if hasRA {
		if ra > p.maxRetryAfter || (hasDeadline && ra >= remaining) {
			return retryPlan{}, errRetryAfterTooLong
		}
		d, src = backoff.RetryAfterDelay(ra, d, p.maxRetryAfter), "retry_after"
		if hasDeadline && d >= remaining {
			d = ra
		}
	}
	if hasDeadline && d >= remaining {
		return retryPlan{}, ErrDeadline
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
		emit(h, info)
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
