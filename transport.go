package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/internal/keymemory"
	"github.com/retryfuse/retryfuse/internal/share"
)

// Transport is an http.RoundTripper that repeats a request only when
// repeating it is known to be safe.
//
// GET, HEAD, OPTIONS, TRACE, PUT and DELETE may be repeated. POST, PATCH and
// every other method may be repeated only when the request carries a
// non-empty Idempotency-Key (or X-Idempotency-Key) header and a replayable
// body (none, or GetBody set). A write whose outcome is uncertain — a
// timeout, reset or cancellation after it may have been written — is never
// replayed: RoundTrip returns a *ReconcileRequiredError. Every decision is
// taken by the decision core (package decide) and reported through Hooks.
//
// A response, even a final 503, is returned as a response with a nil
// error. An error is returned only when there is no response to give.
//
// The zero value is ready to use with the defaults documented on each
// field. The fields are read once, at the first RoundTrip (or Validate, or
// CloseIdleConnections), which resolves and validates them: a field
// changed afterwards is not seen, but for Hooks, which are read on every
// call. An invalid value makes every RoundTrip return an error wrapping
// ErrInvalidPolicy.
//
// Besides retrying, a Transport can hedge requests, limit the attempts in
// flight (bulkhead, a number or a learnt limit) and their rate per
// dependency, throttle new calls to a dependency that rejects most of
// them, pace new calls to the rate a dependency's 429s teach, ramp
// admission up after recovery, share identical reads, and fall back to an
// answer of the caller's. Each is off until its setting asks for it: the
// zero Transport refuses nothing before sending and delays nothing but a
// retry. The order of these policies is fixed, outermost first: Fallback,
// single flight, pace and throttle (the pace holds no call to a scope whose
// breaker is open or half-open: the breaker decides), retry, hedge,
// circuit breaker, rate limiter, bulkhead (slow start within it),
// per-attempt timeout. Each refusal matches ErrDeclined.
//
// A Transport is safe for concurrent use by multiple goroutines.
type Transport struct {
	// Base sends each attempt. Nil means one
	// cleanhttp.DefaultPooledTransport, created once per Transport.
	Base http.RoundTripper

	// Retry is when and how a call is repeated: attempts, backoff, the
	// per-attempt timeout, the Retry-After cap, the brakes on one call,
	// the retry budget.
	Retry RetryPolicy

	// Keys is what is done with idempotency keys: generating them, the
	// Ledger, the Reconciler, whether servers honour them.
	Keys KeyPolicy

	// Brake is the circuit breaker, off when the BrakePolicy is zero.
	Brake BrakePolicy

	// Hedge sends a second attempt beside a slow one, off when the
	// HedgePolicy is zero.
	Hedge HedgePolicy

	// Load bounds the load put on each scope: the bulkhead (fixed or
	// learnt), the rate limiter, the throttle, slow start.
	Load LoadPolicy

	// Reads lets concurrent identical reads share one call, off when the
	// ReadPolicy is zero.
	Reads ReadPolicy

	// Scope names the dependency a request belongs to, and bounds the
	// scopes whose state is kept.
	Scope ScopePolicy

	// Fallback, when set, may answer for a call that failed all the way:
	// an error (a refusal included: budget, breaker, bulkhead, rate
	// limiter), or a retryable response the Transport stopped repeating.
	// It gets the caller's request and the call's last response or error
	// (a response's body is unread; the Fallback closes it, or returns
	// it), and returns the answer: a response (a cached copy, say) or an
	// error. It is never asked for a write whose outcome is uncertain (a
	// *ReconcileRequiredError goes back as it is), for a final response
	// (a 404 is the dependency's answer, not a failure), nor once the
	// caller's context is done. A Fallback that panics, or returns neither
	// a response nor an error, is reported (Hooks.Policy) and the call's
	// own outcome is returned. It runs on the caller's goroutine, within
	// the caller's deadline.
	//
	// A response of the Fallback's own (not the call's, handed back)
	// carries a Retryfuse-Fallback header naming why the call failed
	// (ReasonName), set on a copy of its header over any value there. A
	// request that needs current data (WithCurrentData, Cache-Control
	// no-cache or max-age=0, Pragma no-cache) never gets the Fallback's
	// answer: the caller gets the call's own failure.
	Fallback func(req *http.Request, resp *http.Response, err error) (*http.Response, error)

	// Hooks observe every decision. See Hooks.
	Hooks Hooks

	// RedactQueryParams names the query parameters whose values are hidden
	// in reported URLs, matched without regard to case. Nil means
	// access_token, api_key, apikey, auth, client_secret, code, key,
	// password, secret, sig, signature and token; an empty, non-nil slice
	// redacts none. User information is always removed.
	RedactQueryParams []string

	once    sync.Once
	p       policy // the settings, resolved once
	initErr error
	scopes  scopes           // the per-scope records: budgets, limits, latencies
	keys    keymemory.Memory // without a Ledger, the keys left uncertain
	flights share.Flights    // with Reads, the shared calls in flight
	calls   atomic.Uint64    // the calls numbered (CallInfo.CallID), while there are hooks

	hookPanic atomic.Bool // a panic of a hook or the Classifier was reported (hookPanicked)
}

// Below is where a call begins and ends: RoundTrip, the settings resolved
// at the first, the mark by which a Transport owns the repeating of a
// request, and closing the caller's request body; and
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
