package retryfuse

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync/atomic"

	"github.com/retryfuse/retryfuse/budget"
)

// This file stops the base's own re-sends within an attempt once the
// attempt's share of MaxAttempts and of the budget is spent.
//
// net/http's Transport re-sends a request inside one RoundTrip when it
// failed on a reused connection (nothing written, or a replayable request
// that got no response): with a pool of connections the server has
// dropped, one GET goes out once per pooled connection and once more on a
// new one. Each re-send obtains a connection first, and httptrace's
// GotConn reports it on the goroutine of the RoundTrip, before anything of
// the request is written. That is where the share is checked: the attempt
// itself counts as one; each re-send counts as one more against
// MaxAttempts and takes a retry from the budget, as a retry does; the
// first refusal stops the re-send.
//
// How a re-send is stopped:
//
//   - An HTTP/1 connection of net/http's own Transport carries one request
//     at a time, and the request is written only after GotConn returns: the
//     connection is closed there, and the write fails with nothing written.
//     This needs no cancellable context, so the default attempt (no
//     AttemptTimeout, no hedging) gains no allocation: a cancellable
//     context per attempt would cost every request its context and cancel
//     function, for a stop that few ever need. The cost falls on the
//     stopped attempt alone: net/http takes the closed connection for a
//     dead one and goes on to its next pooled one, closed in its turn, and
//     so on until a new connection, which it never re-sends on; that one
//     is dialled and closed unused too. Every connection it would have sent
//     the request on again is closed instead, unsent.
//   - When the attempt's context is cancellable anyway (an AttemptTimeout,
//     a hedged branch), it is cancelled too: net/http then stops at once,
//     with no further pooled connection closed and no new one dialled.
//   - An HTTP/2 connection is shared by streams and is never closed. Its
//     re-sends (of streams the server refused unprocessed) stop only
//     through the cancelled context, and only as surely as the HTTP/2
//     client checks the context before writing the stream; without a
//     cancellable context they go ahead. So do the re-sends of any other
//     base, whose connections are not known to be exclusive.
//
// A re-send that cannot be stopped goes out: it is counted and charged
// against MaxAttempts and the budget as before. A stopped one is not
// counted; the attempt ends with errResendStopped, and the call with a
// *RetryError whose Reason says which limit stopped it.

// errResendStopped is the error of an attempt whose base was stopped from
// re-sending the request by itself.
var errResendStopped = errors.New("retryfuse: the base's own re-send of the request was stopped before it was written")

// Why an attempt's re-sends were stopped.
const (
	stopNone int32 = iota
	stopAttempts
	stopBudget
)

// resendGate admits the base's re-sends across a call's attempts (the
// branches of a hedged group among them, which run at once). It lives in
// the call's wire, and holds the count alone: an attempt's trace knows
// its Transport (owner), and through it the policy and the budget.
type resendGate struct {
	spent atomic.Int32 // attempts started or taken, and re-sends that went out
	held  bool         // a hedge's attempt is taken, and not yet started (the call's goroutine only)
}

// resendGate counts the next attempt in the call's gate and returns the
// wire that holds it, or nil when a Transport above owns the repeating
// (and the charging).
func (c *call) resendGate() *wire {
	if c.passThrough {
		return nil
	}
	g := &c.w.gate
	if g.held {
		g.held = false // counted when it was taken
	} else {
		g.spent.Add(1)
	}
	return c.w
}

// takeHedge takes the attempt of a hedge, when one is left under
// MaxAttempts. The branches in flight may be re-sending meanwhile, so the
// attempt is taken from the live count at once, and not merely checked:
// the hedge starts with it, or a gate that refuses the hedge gives it back
// (giveBackHedge).
func (c *call) takeHedge() bool {
	g := &c.w.gate
	for {
		n := g.spent.Load()
		if n >= int32(c.p.maxAttempts) {
			return false
		}
		if g.spent.CompareAndSwap(n, n+1) {
			g.held = true
			return true
		}
	}
}

// giveBackHedge gives back the attempt of a hedge that does not start.
func (c *call) giveBackHedge() {
	c.w.gate.held = false
	c.w.gate.spent.Add(-1)
}

// gotConnection counts a connection the base obtained within the attempt,
// unless it is a re-send that the attempt's share does not cover and that
// is stopped.
func (at *attemptTrace) gotConnection(info httptrace.GotConnInfo) {
	if at.w == nil || at.conns.Load() == 0 || at.resend(info) {
		at.conns.Add(1) // the attempt's own connection, or a re-send that goes out
	}
}

// resend decides a re-send on the connection info reports: false when it
// is stopped.
func (at *attemptTrace) resend(info httptrace.GotConnInfo) bool {
	g, p := &at.w.gate, &at.owner.p
	why := at.stop.Load()
	if why == stopNone {
		if why = at.admit(); why == stopNone {
			return true
		}
	}
	closes := p.tracing && exclusiveConn(p.base, info.Conn)
	if !closes && at.cancel == nil {
		// Nothing can stop it: it goes out, and is charged as before.
		g.spent.Add(1)
		if why == stopAttempts {
			at.allowRetry()
		}
		return true
	}
	at.stop.CompareAndSwap(stopNone, why)
	if closes {
		_ = info.Conn.Close() // before anything of the request is written
	}
	if at.cancel != nil {
		at.cancel()
	}
	return false
}

// admit takes one of the attempts left under MaxAttempts and a retry from
// the budget for a re-send, and returns stopNone; or, taking nothing, why
// not.
func (at *attemptTrace) admit() int32 {
	g := &at.w.gate
	for {
		n := g.spent.Load()
		if n >= int32(at.owner.p.maxAttempts) {
			return stopAttempts
		}
		if g.spent.CompareAndSwap(n, n+1) {
			break
		}
	}
	if !at.allowRetry() {
		g.spent.Add(-1)
		return stopBudget
	}
	return stopNone
}

// allowRetry asks the call's budget for one retry. An error (the budget's
// answer could not be established) is kept for the call to report once
// the attempt is over, on its own goroutine.
func (at *attemptTrace) allowRetry() bool {
	b := at.budget()
	if b == nil {
		return true
	}
	ok, err := b.AllowRetry(at.parent)
	if err != nil {
		e := &budgetError{err: err}
		for {
			e.next = at.evidence.Load()
			if at.evidence.CompareAndSwap(e.next, e) {
				break
			}
		}
	}
	return ok
}

// budget returns the call's budget, as recordRequest found it: the
// Transport's shared one, or that of the scope of the request (its first
// attempt's copy, in the wire). Nil when its scope has no record (its
// NewBudget failed; the call did not get this far then).
func (at *attemptTrace) budget() budget.Budget {
	p := &at.owner.p
	if p.budget != nil {
		return p.budget
	}
	st, err := at.owner.scopes.find(&at.w.first, p)
	if err != nil {
		return nil
	}
	return st.budget
}

// budgetError is an error of the budget asked during an attempt, in a
// list of them, the latest first.
type budgetError struct {
	err  error
	next *budgetError
}

// all returns the errors of the list, in the order they came.
func (e *budgetError) all() []error {
	var errs []error
	for ; e != nil; e = e.next {
		errs = append(errs, e.err)
	}
	slices.Reverse(errs)
	return errs
}

// stopped returns why the attempt's re-sends were stopped, or nil.
func (at *attemptTrace) stopped() error {
	switch at.stop.Load() {
	case stopAttempts:
		return ErrAttemptsExhausted
	case stopBudget:
		return ErrBudgetExhausted
	}
	return nil
}

// exclusiveConn reports whether conn, obtained through base (known to be
// net/http's Transport, perhaps under retryfuse Transports), carries one
// request at a time, as HTTP/1 does: closing it then touches no other
// request. net/http speaks HTTP/2 over TLS only when the server chose "h2";
// unencrypted HTTP/2 hands its plain connection over unwrapped, so a plain
// connection is taken for HTTP/1 only when the Transport is not set to
// speak unencrypted HTTP/2.
func exclusiveConn(base http.RoundTripper, conn net.Conn) bool {
	switch conn := conn.(type) {
	case nil:
		return false
	case *tls.Conn:
		return conn.ConnectionState().NegotiatedProtocol != "h2"
	}
	for range 8 { // as baseTraces
		switch b := base.(type) {
		case *http.Transport:
			return b.Protocols == nil || !b.Protocols.UnencryptedHTTP2()
		case *Transport:
			if b.Base == nil {
				return true // cleanhttp's pooled *http.Transport: no unencrypted HTTP/2
			}
			base = b.Base
		default:
			return false
		}
	}
	return false
}

// replayedAfterWrite reports whether net/http's Transport re-sends a
// request of method with header h after a failure once it was written:
// the methods it takes for idempotent, and requests whose header has an
// idempotency key under the canonical map key it looks up. Any other
// request it re-sends only when nothing of it was written.
func replayedAfterWrite(method string, h http.Header) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := h[headerIdempotencyKey]
	_, xkey := h[headerXIdempotencyKey]
	return key || xkey
}
