package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// This file is where a call begins and ends: RoundTrip, the settings
// resolved at the first, the mark by which a Transport owns the repeating
// of a request, and closing the caller's request body; and
// CloseIdleConnections.

// ownedContext is a later attempt's parent context, marked with ownerKey
// (unless owner is nil: the mark of a Transport above passes), and with
// the attempt's deadline (unless zero: its parent's). A first attempt's
// context carries both itself, with the trace (attemptTrace, trace.go),
// and costs no allocation.
type ownedContext struct {
	context.Context
	owner    *Transport
	deadline time.Time
}

func (c *ownedContext) Value(key any) any {
	if _, ok := key.(ownerKey); ok && c.owner != nil {
		return c.owner
	}
	return c.Context.Value(key)
}

func (c *ownedContext) Deadline() (time.Time, bool) {
	if c.deadline.IsZero() {
		return c.Context.Deadline()
	}
	return earlier(c.deadline, c.Context)
}

// ownerKey marks, in an attempt's context, that a retryfuse Transport
// already owns the repeating of this request: a Transport beneath it (or
// called again beneath it through the context) passes each attempt
// through, so that stacked layers do not multiply load.
type ownerKey struct{}

// closeRequestBody closes the body of a request that will not be sent
// (again), as a RoundTripper must.
func closeRequestBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}

// setup resolves and validates the settings, once (policy.go).
func (t *Transport) setup() {
	t.once.Do(func() { t.p, t.initErr = t.resolve() })
}

// base returns the RoundTripper that sends each attempt.
func (t *Transport) base() http.RoundTripper {
	t.setup()
	return t.p.base
}

// CloseIdleConnections closes the idle connections of the base, when it
// has such a method.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := t.base().(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

// scopeOf names the dependency of req.
func (p *policy) scopeOf(req *http.Request) string {
	if p.scope != nil {
		return p.scope(req)
	}
	return hostScope(req)
}

var errNilRequest = errors.New("retryfuse: nil Request")

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip implements http.RoundTripper. See Transport for what is
// repeated and what is returned.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errNilRequest
	}
	t.setup()
	if t.initErr != nil {
		closeRequestBody(req)
		return nil, t.initErr
	}
	var id uint64
	if t.p.shareReads && shareable(req) {
		sid, resp, err := t.shareRead(req)
		if err != errNotShared {
			return resp, err
		}
		id = sid // the call's events so far were under it
	}
	c := call{t: t, p: &t.p, req: req, w: new(wire)}
	if t.Hooks.any() { // read as the hooks are, not frozen with the settings
		// Only hooks report elapsed time and number the calls: a count
		// that every call raised would be memory every core writes.
		c.start = c.now()
		c.id = t.calls.Add(1)
	}
	if id != 0 {
		c.id = id
	}
	_, c.passThrough = req.Context().Value(ownerKey{}).(*Transport)
	resp, err := c.run()
	if c.p.fallback != nil {
		return c.fallback(resp, err)
	}
	return resp, err
}
