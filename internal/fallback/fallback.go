// Package fallback holds the pure pieces of retryfuse's Fallback, the
// outermost policy: whether a request needs current data (NeedsCurrent,
// WithCurrentData), asking the user's Fallback with its panics contained
// (Ask), and the mark on the answer it produced (Mark). When to ask, and
// what to report, is the root's.
package fallback

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// markHeader marks a response the Fallback produced; its value names why the
// call failed. See Transport.Fallback.
const markHeader = "Retryfuse-Fallback"

// errEmpty: the Fallback returned neither a response nor an error.
var errEmpty = errors.New("retryfuse: fallback returned neither a response nor an error")

// Mark sets the Retryfuse-Fallback header (markHeader) on resp to reason,
// in a header map of its own: a Fallback may build its responses on a
// header map it keeps. Whatever the Fallback put under the name is
// replaced.
func Mark(resp *http.Response, reason string) {
	h := resp.Header.Clone()
	if h == nil {
		h = make(http.Header, 1)
	}
	h.Set(markHeader, reason)
	resp.Header = h
}

// currentDataKey is the context key under which WithCurrentData marks a
// context; only the value true marks it.
type currentDataKey struct{}

// WithCurrentData returns a copy of ctx (context.Background when nil)
// that marks the requests sent with it as needing current data.
func WithCurrentData(ctx context.Context) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, currentDataKey{}, true)
}

// NeedsCurrent reports whether req needs current data: its context says
// so (WithCurrentData), or its Cache-Control has no-cache or max-age=0,
// or, without a Cache-Control, its Pragma has no-cache (RFC 9111, 5.4).
func NeedsCurrent(req *http.Request) bool {
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

// Ask consults fb about req, whose call ended with resp and err,
// recovering a panic. failure reports a Fallback that panicked or answered
// nothing usable (errEmpty); a response beside an error is closed, unless
// it is resp, and the error stands.
func Ask(fb func(*http.Request, *http.Response, error) (*http.Response, error), req *http.Request, resp *http.Response, err error) (fresp *http.Response, ferr, failure error) {
	defer func() {
		if v := recover(); v != nil {
			fresp, ferr, failure = nil, nil, fmt.Errorf("retryfuse: fallback panicked: %v", v)
		}
	}()
	fresp, ferr = fb(req, resp, err)
	switch {
	case fresp == nil && ferr == nil:
		return nil, nil, errEmpty
	case fresp != nil && ferr != nil:
		if fresp != resp && fresp.Body != nil {
			_ = fresp.Body.Close()
		}
		return nil, ferr, nil
	}
	return fresp, ferr, nil
}
