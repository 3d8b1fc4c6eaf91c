package retryfuse

import (
	"errors"
	"fmt"
	"net/http"
)

// This file is the outermost policy of the stack: the Fallback, asked for
// a call that failed all the way.

// errFallbackEmpty: the Fallback returned neither a response nor an error.
var errFallbackEmpty = errors.New("retryfuse: fallback returned neither a response nor an error")

// fallback asks the Fallback, if any, to answer for a call that ended with
// resp and err, and returns the answer to give the caller.
func (c *call) fallback(resp *http.Response, err error) (*http.Response, error) {
	fb := c.p.fallback
	if fb == nil || c.passThrough || !c.failedAllTheWay(resp, err) {
		return resp, err
	}
	fresp, ferr, failure := askFallback(fb, c.req, resp, err)
	if failure != nil {
		c.policyEvent(policyFallback, actionFailed, 0, failure)
		return resp, err
	}
	if resp != nil && fresp != resp {
		drain(resp, 0) // the Fallback did not hand it on: release it
	}
	c.policyEvent(policyFallback, actionAnswered, 0, ferr)
	return fresp, ferr
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

// askFallback consults fb, recovering a panic. failure reports a Fallback
// that panicked or answered nothing usable; a response beside an error is
// closed, and the error stands.
func askFallback(fb func(*http.Request, *http.Response, error) (*http.Response, error), req *http.Request, resp *http.Response, err error) (fresp *http.Response, ferr, failure error) {
	defer func() {
		if v := recover(); v != nil {
			fresp, ferr, failure = nil, nil, fmt.Errorf("retryfuse: fallback panicked: %v", v)
		}
	}()
	fresp, ferr = fb(req, resp, err)
	switch {
	case fresp == nil && ferr == nil:
		return nil, nil, errFallbackEmpty
	case fresp != nil && ferr != nil:
		if fresp != resp {
			drain(fresp, 0)
		}
		return nil, ferr, nil
	}
	return fresp, ferr, nil
}
