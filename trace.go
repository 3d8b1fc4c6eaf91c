package retryfuse

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"sync/atomic"

	"github.com/retryfuse/retryfuse/decide"
)

// attemptTrace follows one attempt through net/http/httptrace, composed
// with any trace the caller installed in the context.
//
// Only "no connection was obtained" proves that nothing left this process:
// net/http fires WroteHeaders and WroteRequest when bytes enter the
// connection's buffer, and a large request may flush before them. So the
// phase rests on GotConn alone, which fires once per connection obtained,
// again on each re-send inside the base.
type attemptTrace struct {
	first   httptrace.ClientTrace // the first attempt's, kept here
	firstCx tracedContext         // the context that carries first, when it can
	used    bool                  // first is taken
	asked   atomic.Int32          // GetConn calls: the base traces
	conns   atomic.Int32          // GotConn calls: connections obtained and used (see resend.go)
	stop    atomic.Int32          // why re-sends were stopped: stopNone, stopAttempts, stopBudget
	getConn func(string)
	gotConn func(httptrace.GotConnInfo)

	// The attempt's share of the call's re-sends; see resend.go.
	gate     *resendGate        // nil when the call does not charge re-sends
	cancel   context.CancelFunc // the attempt's, when its context is cancellable
	evidence atomic.Pointer[budgetError]
}

// context resets the trace for a new attempt and returns ctx with it
// installed. The ClientTrace is made anew each time because
// httptrace.WithClientTrace composes it, in place, with a trace already in
// ctx; gotConn, made once per call, is reused. A later attempt's
// ClientTrace never reuses an earlier one's memory: net/http may still read
// the earlier one after its attempt returned (the write loop reports
// WroteRequest when a body it was still sending ends, after a response
// that came first).
//
// askConn installs GetConn too, for a base not known to trace: whether it
// asks for a connection tells whether it passes the trace on.
func (at *attemptTrace) context(ctx context.Context, askConn bool) context.Context {
	if at.gotConn == nil {
		at.gotConn = func(info httptrace.GotConnInfo) { at.gotConnection(info) }
	}
	if askConn && at.getConn == nil {
		at.getConn = func(string) { at.asked.Add(1) }
	}
	tr := &at.first
	if at.used {
		// A later attempt: what the earlier left is reset, and its
		// ClientTrace is new. The first attempt's trace is fresh memory,
		// all zero: only its two hooks are set.
		at.asked.Store(0)
		at.conns.Store(0)
		at.stop.Store(stopNone)
		at.gate, at.cancel = nil, nil
		at.evidence.Store(nil)
		tr = &httptrace.ClientTrace{GetConn: at.getConn, GotConn: at.gotConn}
	} else {
		tr.GetConn, tr.GotConn = at.getConn, at.gotConn
	}
	if !at.used && clientTraceKey != nil && httptrace.ContextClientTrace(ctx) == nil {
		// Nothing to compose with: the first attempt's context answers
		// for the trace itself, and costs no allocation.
		at.used = true
		at.firstCx = tracedContext{Context: ctx, trace: tr}
		return &at.firstCx
	}
	at.used = true
	return httptrace.WithClientTrace(ctx, tr)
}

// tracedContext is a context carrying a ClientTrace, as
// httptrace.WithClientTrace makes one, but without its allocation: it lives
// in the call, and answers httptrace's own key, learnt once
// (clientTraceKey). It is used only where there is no trace to compose
// with, and the trace has no hooks of the net package (which
// WithClientTrace would install under a second key).
type tracedContext struct {
	context.Context
	trace *httptrace.ClientTrace
}

func (c *tracedContext) Value(key any) any {
	if key == clientTraceKey {
		return c.trace
	}
	return c.Context.Value(key)
}

// clientTraceKey is the context key under which httptrace looks a
// ClientTrace up, or nil when it could not be learnt (every attempt then
// uses httptrace.WithClientTrace).
var clientTraceKey any

func init() { clientTraceKey = learnClientTraceKey() }

// learnClientTraceKey asks httptrace for the trace of a context that
// records the key it is asked for, and checks that a tracedContext
// answering that key is seen to carry its trace; nil when either fails.
func learnClientTraceKey() any {
	p := &keyProbe{Context: context.Background()}
	httptrace.ContextClientTrace(p)
	if len(p.keys) != 1 || p.keys[0] == nil || !reflect.TypeOf(p.keys[0]).Comparable() {
		return nil
	}
	defer func(saved any) { clientTraceKey = saved }(clientTraceKey)
	clientTraceKey = p.keys[0] // what tracedContext answers, for the check
	tr := new(httptrace.ClientTrace)
	if httptrace.ContextClientTrace(&tracedContext{Context: context.Background(), trace: tr}) != tr {
		return nil
	}
	return p.keys[0]
}

// keyProbe is a context that records the keys it is asked for.
type keyProbe struct {
	context.Context
	keys []any
}

func (p *keyProbe) Value(key any) any {
	p.keys = append(p.keys, key)
	return nil
}

// phase says how far an attempt got. tracing reports whether the base is
// known to fire GotConn before it writes a byte. A base that asked for a
// connection (GetConn) but obtained none shows that it passes the trace
// on — a wrapper around net/http's Transport, say — and wrote nothing. For
// any other base, an attempt that obtained no connection may still have
// written, so its phase is unknown.
func (at *attemptTrace) phase(resp *http.Response, tracing bool) decide.Phase {
	switch {
	case resp != nil:
		return decide.PhasePostWrite // a response came after the write
	case at.conns.Load() > 0:
		return decide.PhasePostWrite
	case tracing || at.asked.Load() > 0:
		return decide.PhasePreWrite
	}
	return decide.PhaseUnknown
}

// baseTraces reports whether rt, the base of t, fires httptrace's GotConn
// for every connection before writing: net/http's Transport does, and so
// does a retryfuse Transport over one. cycle reports that the Transports
// below lead back to t. It reads their Base fields and never sets them up:
// a Transport below set up from here would walk back into t's own setup,
// still running, and deadlock on it.
func baseTraces(t *Transport, rt http.RoundTripper) (tracing, cycle bool) {
	for range 8 { // bounded: a cycle that misses t is caught by its members
		switch b := rt.(type) {
		case *http.Transport:
			return true, false
		case *Transport:
			if b == t {
				return false, true
			}
			if b.Base == nil {
				return true, false // cleanhttp's pooled *http.Transport
			}
			rt = b.Base
		default:
			return false, false
		}
	}
	return false, false
}
