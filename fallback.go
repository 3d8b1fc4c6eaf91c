package retryfuse

import (
	"context"
	"errors"
	"net/http"

	"github.com/retryfuse/retryfuse/internal/fallback"
)

// This file is the outermost policy of the stack as a call meets it: the
// Fallback, asked for a call that failed all the way, unless the request
// needs current data; a response it produced is marked. Deciding that a
// request needs current data, asking the Fallback safely and the mark are
// internal/fallback's.

// fallback asks the Fallback, if any, to answer for a call that ended with
// resp and err, and returns the answer to give the caller: a response of
// the Fallback's own is marked.
func (c *call) fallback(resp *http.Response, err error) (*http.Response, error) {
	fb := c.p.fallback
	if fb == nil || c.passThrough || !c.failedAllTheWay(resp, err) {
		return resp, err
	}
	if fallback.NeedsCurrent(c.req) {
		c.policyEvent(policyFallback, actionWithheld, 0, err)
		return resp, err
	}
	fresp, ferr, failure := fallback.Ask(fb, c.req, resp, err)
	if failure != nil {
		c.policyEvent(policyFallback, actionFailed, 0, failure)
		return resp, err
	}
	if fresp != nil && fresp == resp {
		c.policyEvent(policyFallback, actionHandedOn, 0, nil)
		return resp, nil // the dependency's own answer: not the Fallback's
	}
	if resp != nil {
		drain(resp, 0) // the Fallback did not hand it on: release it
	}
	if fresp != nil {
		why := c.gaveUp
		if why == nil {
			why = err
		}
		fallback.Mark(fresp, ReasonName(why))
	}
	c.policyEvent(policyFallback, actionAnswered, 0, ferr)
	return fresp, ferr
}

// WithCurrentData returns a copy of ctx that marks the requests sent with
// it as needing current data: a Transport's Fallback is not asked for
// them, and a call that fails all the way gives the caller its own
// failure, as for a request with a Cache-Control: no-cache or max-age=0
// header. The mark is not sent.
func WithCurrentData(ctx context.Context) context.Context {
	return fallback.WithCurrentData(ctx)
}

// failedAllTheWay reports whether a call's outcome is a failure the
// Fallback may answer: an error other than a reconcile error or an
// error of bad input, or a
// response the Transport gave up repeating for a reason other than its
// being final — and the caller still waiting.
func (c *call) failedAllTheWay(resp *http.Response, err error) bool {
	if c.req.Context().Err() != nil {
		return false
	}
	if err != nil {
		var rec *ReconcileRequiredError
		if errors.As(err, &rec) {
			return false
		}
		for _, bad := range inputErrors {
			if errors.Is(err, bad) {
				return false
			}
		}
		return true
	}
	return resp != nil && c.gaveUp != nil && !errors.Is(c.gaveUp, errFinal)
}

// inputErrors are the errors of a request or a Transport that is wrong:
// the caller's mistake, which a Fallback must not hide.
var inputErrors = [...]error{ErrInvalidPolicy, ErrInvalidIdempotencyKey, ErrFingerprintLimit, errNilRequest, errNilURL}
