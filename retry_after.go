package retryfuse

import (
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse/internal/backoff"
)

// This file is how the Transport honours a server's Retry-After (parsed
// and combined with the backoff in internal/backoff):
//
//   - A retry after a response carrying one waits for it, with the
//     backoff's jitter above it, never longer than RetryPolicy.MaxRetryAfter.
//     A Retry-After above that cap, or one that reaches the caller's
//     deadline, is not waited for: the call ends with the server's
//     response (reported as retry_after_too_long).
//   - With LoadPolicy.Pace, a 429's Retry-After up to MaxRetryAfter holds
//     new calls to its scope until it has passed; a new call waits for its
//     place within LoadPolicy.MaxWait and the caller's deadline (keepPace,
//     overload.go), or is refused at once having sent nothing. A scope
//     whose breaker is open or half-open is not held: the breaker decides.
//   - Hooks see it: StatusError.RetryAfter, RetryInfo.RetryAfter.

// retryDelay returns the delay before retry number retryNo at now, and
// its source ("backoff" or "retry_after"), with the last response's
// Retry-After, if any; or the reason no retry may follow:
// errRetryAfterTooLong, or ErrDeadline when the delay reaches the
// caller's deadline.
func (c *call) retryDelay(now time.Time, retryNo int) (d time.Duration, src string, ra time.Duration, hasRA bool, err error) {
	p := c.p
	d = backoff.FullJitter(backoff.Ceiling(p.initialBackoff, p.maxBackoff, retryNo), p.randN)
	src = "backoff"
	ra, hasRA = backoff.RetryAfter(c.lastResp, now)
	remaining, hasDeadline := time.Duration(0), false
	if dl, ok := c.deadline(); ok {
		remaining, hasDeadline = dl.Sub(now), true
	}
	if hasRA {
		if ra > p.maxRetryAfter || (hasDeadline && ra >= remaining) {
			return 0, "", ra, hasRA, errRetryAfterTooLong
		}
		d, src = backoff.RetryAfterDelay(ra, d, p.maxRetryAfter), "retry_after"
		if hasDeadline && d >= remaining {
			d = ra
		}
	}
	if hasDeadline && d >= remaining {
		return 0, "", ra, hasRA, ErrDeadline
	}
	return d, src, ra, hasRA, nil
}

// paceHold returns the Retry-After of a 429 answered at now, and whether
// it is to hold new calls in the scope's pace: one up to MaxRetryAfter (a
// longer one is not waited for, as a retry does not wait for it).
func (c *call) paceHold(resp *http.Response, now time.Time) (time.Duration, bool) {
	ra, ok := backoff.RetryAfter(resp, now)
	return ra, ok && ra <= c.p.maxRetryAfter
}
