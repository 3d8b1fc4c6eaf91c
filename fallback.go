package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// This file is the outermost policy of the stack: the Fallback, asked for
// a call that failed all the way, unless the request needs current data;
// and the mark on a response it produced.

// errFallbackEmpty: the Fallback returned neither a response nor an error.
var errFallbackEmpty = errors.New("retryfuse: fallback returned neither a response nor an error")

// fallbackHeader marks a response the Fallback produced; its value names
// why the call failed (ReasonName). See Transport.Fallback.
const fallbackHeader = "Retryfuse-Fallback"

// fallback asks the Fallback, if any, to answer for a call that ended with
// resp and err, and returns the answer to give the caller: a response of
// the Fallback's own is marked.
func (c *call) fallback(resp *http.Response, err error) (*http.Response, error) {
	fb := c.p.fallback
	if fb == nil || c.passThrough || !c.failedAllTheWay(resp, err) {
		return resp, err
	}
	if needsCurrent(c.req) {
		c.policyEvent(policyFallback, actionWithheld, 0, err)
		return resp, err
	}
	fresp, ferr, failure := askFallback(fb, c.req, resp, err)
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
		markFallback(fresp, ReasonName(why))
	}
	c.policyEvent(policyFallback, actionAnswered, 0, ferr)
	return fresp, ferr
}

// markFallback sets the fallback header on resp, in a header of its own:
// a Fallback may build its responses on a header map it keeps. Whatever
// the Fallback put under the name is replaced.
func markFallback(resp *http.Response, reason string) {
	h := resp.Header.Clone()
	if h == nil {
		h = make(http.Header, 1)
	}
	h.Set(fallbackHeader, reason)
	resp.Header = h
}

// WithCurrentData returns a copy of ctx that marks the requests sent with
// it as needing current data: a Transport's Fallback is not asked for
// them, and a call that fails all the way gives the caller its own
// failure, as for a request with a Cache-Control: no-cache or max-age=0
// header. The mark is not sent.
func WithCurrentData(ctx context.Context) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, currentDataKey{}, true)
}

// currentDataKey is the context key of WithCurrentData.
type currentDataKey struct{}

// needsCurrent reports whether req needs current data: its context says
// so (WithCurrentData), or its Cache-Control has no-cache or max-age=0,
// or, without a Cache-Control, its Pragma has no-cache (RFC 9111, 5.4).
func needsCurrent(req *http.Request) bool {
	if v, _ := req.Context().Value(currentDataKey{}).(bool); v {
		return true
	}
	if cc := req.Header.Values("Cache-Control"); len(cc) > 0 {
		for _, v := range cc {
			for d := range strings.SplitSeq(v, ",") {
				name, arg, _ := strings.Cut(strings.TrimSpace(d), "=")
				switch strings.ToLower(strings.TrimSpace(name)) {
				case "no-cache":
					return true
				case "max-age":
					if n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(arg), `"`)); err == nil && n == 0 {
						return true
					}
				}
			}
		}
		return false
	}
	for _, v := range req.Header.Values("Pragma") {
		for d := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(d), "no-cache") {
				return true
			}
		}
	}
	return false
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
