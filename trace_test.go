package retryfuse

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
)

// wrapperBase is a RoundTripper around net/http's Transport, as a logging
// or tracing transport is: the transport cannot know its type, but the
// trace it passes on shows that nothing was written.
type wrapperBase struct{ rt http.RoundTripper }

func (w wrapperBase) RoundTrip(r *http.Request) (*http.Response, error) { return w.rt.RoundTrip(r) }

// opaqueBase fails without passing the request on: it gives no trace.
type opaqueBase struct{ err error }

func (o opaqueBase) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return nil, o.err
}

func TestPhaseThroughWrapperBaseIsPreWrite(t *testing.T) {
	inner := cleanhttp.DefaultPooledTransport()
	t.Cleanup(inner.CloseIdleConnections)
	var phases []decide.Phase
	tr := newTransport(t, newFakeClock(), &Transport{
		Base: wrapperBase{rt: inner},
		Retry: RetryPolicy{
			Budget: budget.Unlimited(),
		},
		Hooks: Hooks{AttemptDone: func(i AttemptDoneInfo) { phases = append(phases, i.Phase) }},
	})
	req := newRequest(t, testCtx(t), http.MethodPost, refusedURL(t), "pay 10")
	req.Header.Set("Idempotency-Key", "k-wrapper")
	_, _, err := do(tr, req)
	if !errors.Is(err, ErrAttemptsExhausted) {
		t.Fatalf("got %v, want ErrAttemptsExhausted: a refused keyed POST is retried behind a wrapper", err)
	}
	if len(phases) != 3 {
		t.Fatalf("got %d attempts, want 3", len(phases))
	}
	for i, p := range phases {
		if p != decide.PhasePreWrite {
			t.Errorf("attempt %d: got phase %v, want pre_write", i+1, p)
		}
	}
}

func TestPhaseWithoutTraceIsUnknownAndTreatedAsWritten(t *testing.T) {
	tr := newTransport(t, newFakeClock(), &Transport{
		Base: opaqueBase{err: errors.New("opaque failure")},
		Retry: RetryPolicy{
			Budget: budget.Unlimited(),
		},
	})
	req := newRequest(t, testCtx(t), http.MethodPost, "http://127.0.0.1:1/", "pay 10")
	req.Header.Set("Idempotency-Key", "k-opaque")
	_, _, err := do(tr, req)
	var rec *ReconcileRequiredError
	if !errors.As(err, &rec) {
		t.Fatalf("got %v, want *ReconcileRequiredError: without a trace the write may have happened", err)
	}
	if rec.Phase != decide.PhaseUnknown || rec.Attempts != 1 {
		t.Errorf("got phase %v after %d attempts, want unknown after 1", rec.Phase, rec.Attempts)
	}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A server may answer before it has read the request body; net/http then
// returns the response while its write loop is still sending the body, and
// that loop reads the request's ClientTrace when the write ends. The next
// attempt must not rewrite the trace the earlier one's write loop still
// reads: run under -race, this pins the data race of a trace reused in
// place across attempts.
func TestTraceNotRewrittenUnderALateWriteLoop(t *testing.T) {
	const bodySize = 64 << 20 // far more than loopback socket buffers hold
	srv := newRawServer(t, func(s *rawServer, connNo int, c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		if connNo == 0 {
			// Answer at once, and hold the connection open without reading
			// the body: the client's write blocks until it gives the
			// connection up.
			_, _ = io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
			<-s.done
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		s.stallConn(c)
	})

	var wrote atomic.Int32
	ctx := httptrace.WithClientTrace(testCtx(t), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Add(1) },
	})
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 2, Budget: budget.Unlimited()}})
	setRandN(tr, func(int64) int64 { return 0 })

	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL(), io.LimitReader(zeros{}, bodySize))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = bodySize
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(io.LimitReader(zeros{}, bodySize)), nil }

	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status: got %d, want 200 from the second attempt", resp.StatusCode)
	}
	tr.CloseIdleConnections()
}

// tracingBase installs a ClientTrace of its own on each request before
// passing it on, as a tracing middleware beneath the Transport does.
type tracingBase struct {
	rt   http.RoundTripper
	gots atomic.Int32
}

func (b *tracingBase) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { b.gots.Add(1) },
	})
	return b.rt.RoundTrip(r.WithContext(ctx))
}

// The first attempt's trace is carried by a context that lives in the
// call rather than by httptrace.WithClientTrace. httptrace must still see
// it there: a trace installed beneath composes with it, and both hear of
// every connection.
func TestFirstAttemptTraceComposesWithATraceBeneath(t *testing.T) {
	if clientTraceKey == nil {
		t.Fatal("httptrace's context key was not learnt: every first attempt would allocate its trace's context")
	}
	srv := newTestServer(t, func(int, http.ResponseWriter, *http.Request) {})
	inner := cleanhttp.DefaultPooledTransport()
	t.Cleanup(inner.CloseIdleConnections)
	base := &tracingBase{rt: inner}
	var conns []int
	tr := newTransport(t, newFakeClock(), &Transport{
		Base:  base,
		Hooks: Hooks{AttemptDone: func(i AttemptDoneInfo) { conns = append(conns, i.Connections) }},
	})
	for i := range 2 {
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %d: %v, %v", i+1, resp, err)
		}
	}
	if got := base.gots.Load(); got != 2 {
		t.Errorf("the base's own trace heard %d connections, want 2", got)
	}
	if len(conns) != 2 || conns[0] != 1 || conns[1] != 1 {
		t.Errorf("the Transport's trace heard %v connections per attempt, want [1 1]", conns)
	}
}

// A first attempt's trace answers as a context of httptrace.WithClientTrace
// does: httptrace finds its trace, the ownership mark is its owner's (or,
// without one, the parent's), every other key is its parent's, and a trace
// installed over it is found first.
func TestAttemptContextAnswersLikeWithClientTrace(t *testing.T) {
	type otherKey struct{}
	parent := context.WithValue(context.WithValue(context.Background(), ownerKey{}, "above"), otherKey{}, "v")
	owner := &Transport{}
	at := &attemptTrace{}
	c := at.context(parent, owner, time.Time{}, false)
	if c != context.Context(at) {
		t.Fatalf("the first attempt's context is %T, want the trace itself", c)
	}
	if got := httptrace.ContextClientTrace(c); got != &at.first || got.GotConn == nil {
		t.Errorf("ContextClientTrace: got %p, want %p with its GotConn", got, &at.first)
	}
	if got := c.Value(ownerKey{}); got != owner {
		t.Errorf("the ownership mark: got %v, want the owner", got)
	}
	if got := c.Value(otherKey{}); got != "v" {
		t.Errorf("another key: got %v, want the parent's value", got)
	}
	over := &httptrace.ClientTrace{}
	if got := httptrace.ContextClientTrace(httptrace.WithClientTrace(c, over)); got != over {
		t.Errorf("a trace installed over it: got %p, want %p", got, over)
	}
	passed := (&attemptTrace{}).context(parent, nil, time.Time{}, false)
	if got := passed.Value(ownerKey{}); got != "above" {
		t.Errorf("without an owner, the mark: got %v, want the parent's", got)
	}
	// A later attempt gets a context of its own, owned, with a new trace;
	// the first attempt's context answers as before.
	later := at.context(parent, owner, time.Time{}, false)
	if tr := httptrace.ContextClientTrace(later); tr == nil || tr == &at.first || tr.GotConn == nil {
		t.Errorf("a later attempt's trace: %p", tr)
	}
	if got := later.Value(ownerKey{}); got != owner {
		t.Errorf("a later attempt's ownership mark: got %v, want the owner", got)
	}
	if got := httptrace.ContextClientTrace(c); got != &at.first {
		t.Errorf("the first attempt's context changed: %p", got)
	}
}

// The wire, the one allocation of a call's own besides the trace's
// closures, stays within the largest size class the runtime allocates
// without a header of its layout.
func TestWireFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(wire{}); n > 512 {
		t.Errorf("wire is %d bytes, above 512", n)
	}
}
