package retryfuse

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"sync/atomic"
	"time"

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
//
// The trace of a call's (or a hedged branch's) first attempt is also that
// attempt's context, when there is no trace in the caller's to compose
// with: it answers httptrace's key with first and ownerKey with owner,
// and costs no allocation. The fields that answer (parent, owner,
// deadline, timed, inCtx) are set at the first attempt and never changed:
// net/http may ask the context long after the attempt (a dial it finishes
// for the pool).
type attemptTrace struct {
	parent   context.Context       // the caller's context
	owner    *Transport            // the owner of the repeating, marked in the attempts' contexts; nil to pass the mark of the one above
	deadline time.Duration         // the first attempt's, from its timeout, as an offset from monoBase (the wire fits its size class); see timed
	first    httptrace.ClientTrace // the first attempt's, kept here
	asked    atomic.Int32          // GetConn calls: the base traces
	conns    atomic.Int32          // GotConn calls: connections obtained and used (see resend.go)
	stop     atomic.Int32          // why re-sends were stopped: stopNone, stopAttempts, stopBudget
	used     bool                  // first is taken
	inCtx    bool                  // the trace answers httptrace's key with first
	timed    bool                  // the first attempt has a deadline of its own

	// The attempt's share of the call's re-sends; see resend.go.
	w        *wire              // nil when the call does not charge re-sends
	cancel   context.CancelFunc // the attempt's, when its context is cancellable
	evidence atomic.Pointer[budgetError]
}

// context resets the trace for a new attempt on ctx, the caller's, and
// returns the attempt's context: ctx marked as owned by owner (unless nil),
// with the attempt's deadline (unless zero: ctx's; set only when it comes
// before ctx's, see attemptTimeout) and carrying the trace. The ClientTrace is made anew for each later
// attempt because httptrace.WithClientTrace composes it, in place, with a
// trace already in ctx. A later attempt's ClientTrace never reuses an
// earlier one's memory: net/http may still read the earlier one after its
// attempt returned (the write loop reports WroteRequest when a body it was
// still sending ends, after a response that came first).
//
// askConn installs GetConn too, for a base not known to trace: whether it
// asks for a connection tells whether it passes the trace on.
func (at *attemptTrace) context(ctx context.Context, owner *Transport, deadline time.Time, askConn bool) context.Context {
	if at.used {
		// A later attempt: what the earlier left is reset, and its
		// ClientTrace is new. Its context is made as httptrace makes one:
		// at answers for the first attempt's for good.
		at.asked.Store(0)
		at.conns.Store(0)
		at.stop.Store(stopNone)
		at.w, at.cancel = nil, nil
		at.evidence.Store(nil)
		// Its hooks are made anew too: first's may have been composed
		// with the caller's trace, which composes with tr below.
		tr := &httptrace.ClientTrace{}
		at.hook(tr, askConn)
		if owner != nil || !deadline.IsZero() {
			ctx = &ownedContext{Context: ctx, owner: owner, deadline: deadline}
		}
		return httptrace.WithClientTrace(ctx, tr)
	}
	// The first attempt's trace is fresh memory, all zero: only its hooks
	// are set. The two closures are the call's only allocations of its
	// own besides its wire.
	at.used = true
	at.parent, at.owner = ctx, owner
	if !deadline.IsZero() {
		at.deadline, at.timed = deadline.Sub(monoBase), true
	}
	at.hook(&at.first, askConn)
	if clientTraceKey != nil && httptrace.ContextClientTrace(ctx) == nil {
		// Nothing to compose with: at answers for the trace itself.
		at.inCtx = true
		return at
	}
	return httptrace.WithClientTrace(at, &at.first)
}

// hook sets the hooks of tr that report to at: GotConn, and GetConn when
// askConn.
func (at *attemptTrace) hook(tr *httptrace.ClientTrace, askConn bool) {
	tr.GotConn = func(info httptrace.GotConnInfo) { at.gotConnection(info) }
	if askConn {
		tr.GetConn = func(string) { at.asked.Add(1) }
	}
}

// The attempt's context, when at is one (see attemptTrace): a context
// carrying a ClientTrace as httptrace.WithClientTrace makes one, but
// without its allocation. It answers httptrace's own key, learnt once
// (clientTraceKey), only where there is no trace to compose with, and the
// trace has no hooks of the net package (which WithClientTrace would
// install under a second key).

func (at *attemptTrace) Deadline() (time.Time, bool) {
	if !at.timed {
		return at.parent.Deadline()
	}
	return earlier(rebased(monoBase.Add(at.deadline)), at.parent)
}

// monoBase is the reference of the deadline an attemptTrace keeps as an
// offset: a reading of both clocks, so that the deadline rebuilt from it
// has a monotonic reading too, as the one it was made from did, and is
// compared by it. An offset saturates (time.Time.Sub) where Unix
// nanoseconds would wrap (past the year 2262).
var monoBase = time.Now()

// rebased returns t with its wall reading taken again from the clock's
// latest full reading (clockBase, clock.go), as realClock's readings are:
// monoBase's wall reading is as old as the process, and every step of the
// wall clock since (a correction, a machine suspended) would be missing
// from the deadline's, though not from its monotonic reading.
func rebased(t time.Time) time.Time {
	if b := clockBase.Load(); b != nil {
		return b.Add(t.Sub(*b))
	}
	return t
}

// earlier returns the earlier of dl and the deadline of ctx, as the
// deadline of a context derived from ctx with dl.
func earlier(dl time.Time, ctx context.Context) (time.Time, bool) {
	if p, ok := ctx.Deadline(); ok && p.Before(dl) {
		return p, true
	}
	return dl, true
}

func (at *attemptTrace) Done() <-chan struct{} { return at.parent.Done() }
func (at *attemptTrace) Err() error            { return at.parent.Err() }

func (at *attemptTrace) Value(key any) any {
	if at.inCtx && key == clientTraceKey {
		return &at.first
	}
	if _, ok := key.(ownerKey); ok && at.owner != nil {
		return at.owner
	}
	return at.parent.Value(key)
}

// clientTraceKey is the context key under which httptrace looks a
// ClientTrace up, or nil when it could not be learnt (every attempt then
// uses httptrace.WithClientTrace).
var clientTraceKey any

func init() { clientTraceKey = learnClientTraceKey() }

// learnClientTraceKey asks httptrace for the trace of a context that
// records the key it is asked for, and checks that an attemptTrace
// answering that key is seen to carry its trace; nil when either fails.
func learnClientTraceKey() any {
	p := &keyProbe{Context: context.Background()}
	httptrace.ContextClientTrace(p)
	if len(p.keys) != 1 || p.keys[0] == nil || !reflect.TypeOf(p.keys[0]).Comparable() {
		return nil
	}
	defer func(saved any) { clientTraceKey = saved }(clientTraceKey)
	clientTraceKey = p.keys[0] // what attemptTrace answers, for the check
	at := &attemptTrace{parent: context.Background(), inCtx: true}
	if httptrace.ContextClientTrace(at) != &at.first {
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
