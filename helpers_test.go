package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is the fixed start of the tests' clocks.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// The tests' shared helpers: the construction of Transports and requests,
// recorders of request bodies and hook events, fake bases, and the calls of
// the budget, breaker, ledger and reconcile tests. The fake clock is in
// clock_test.go, the test servers in servers_test.go and its siblings.

// newTransport completes tr for a test: the fake clock's seams, a
// deterministic jitter (half the ceiling) unless tr sets its own, and the
// closing of its idle connections when the test ends.
func newTransport(t *testing.T, clk *fakeClock, tr *Transport) *Transport {
	t.Helper()
	if clk != nil {
		clk.install(tr)
	}
	if testEnvOf(tr).randN == nil {
		setRandN(tr, func(n int64) int64 { return n / 2 })
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// testCtx returns a context cancelled when the test ends. It has no
// deadline: a deadline changes what the transport decides, so the tests
// that need one set it themselves.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// do sends req through an http.Client over rt, as a user would, and reads
// and closes the body of any response.
func do(rt http.RoundTripper, req *http.Request) (*http.Response, []byte, error) {
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return resp, nil, err
	}
	body, rerr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if rerr != nil {
		return resp, body, fmt.Errorf("reading the response body: %w", rerr)
	}
	return resp, body, nil
}

func newRequest(t *testing.T, ctx context.Context, method, url, body string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body) // sets GetBody
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	return req
}

// countingBody is a request body that counts its Close calls.
type countingBody struct {
	r      io.Reader
	closes atomic.Int32
	once   sync.Once
	closed chan struct{} // closed on the first Close
}

func (b *countingBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *countingBody) Close() error {
	b.closes.Add(1)
	b.once.Do(func() { close(b.closed) })
	return nil
}

// bodies hands out counting bodies of the same content: the request's own
// and every one GetBody returns.
type bodies struct {
	content string
	mu      sync.Mutex
	all     []*countingBody
}

func (bs *bodies) next() *countingBody {
	b := &countingBody{r: strings.NewReader(bs.content), closed: make(chan struct{})}
	bs.mu.Lock()
	bs.all = append(bs.all, b)
	bs.mu.Unlock()
	return b
}

// attach gives req a counting body, and a GetBody with counting bodies
// when replayable is true.
func (bs *bodies) attach(req *http.Request, replayable bool) {
	req.Body = bs.next()
	req.ContentLength = int64(len(bs.content))
	req.GetBody = nil
	if replayable {
		req.GetBody = func() (io.ReadCloser, error) { return bs.next(), nil }
	}
}

// unclosed returns how many of the bodies handed out are not closed
// within closeWait. A RoundTripper may close a body on another goroutine
// after it returned (net/http's write loop does), so each is awaited.
func (bs *bodies) unclosed() (unclosed, total int) {
	bs.mu.Lock()
	all := slices.Clone(bs.all)
	bs.mu.Unlock()
	deadline := time.NewTimer(closeWait)
	defer deadline.Stop()
	expired := false
	for _, b := range all {
		if expired {
			select {
			case <-b.closed:
			default:
				unclosed++
			}
			continue
		}
		select {
		case <-b.closed:
		case <-deadline.C:
			expired = true
			unclosed++
		}
	}
	return unclosed, len(all)
}

// closeWait bounds the wait for a request body to be closed.
const closeWait = 5 * time.Second

// hookLog records every hook event, in order, safe for concurrent use.
type hookLog struct {
	mu         sync.Mutex
	starts     []AttemptStartInfo
	dones      []AttemptDoneInfo
	decisions  []DecisionInfo
	retries    []RetryInfo
	reconciles []ReconcileInfo
	giveUps    []GiveUpInfo
	hidden     []AttemptDoneInfo
	callIDs    []uint64 // the CallID of every event, in order
}

func record[T any](l *hookLog, dst *[]T, id func(T) uint64) func(T) {
	return func(v T) {
		l.mu.Lock()
		defer l.mu.Unlock()
		*dst = append(*dst, v)
		l.callIDs = append(l.callIDs, id(v))
	}
}

func (l *hookLog) hooks() Hooks {
	return Hooks{
		AttemptStart: record(l, &l.starts, func(v AttemptStartInfo) uint64 { return v.CallID }),
		AttemptDone:  record(l, &l.dones, func(v AttemptDoneInfo) uint64 { return v.CallID }),
		Decision:     record(l, &l.decisions, func(v DecisionInfo) uint64 { return v.CallID }),
		Retry:        record(l, &l.retries, func(v RetryInfo) uint64 { return v.CallID }),
		Reconcile:    record(l, &l.reconciles, func(v ReconcileInfo) uint64 { return v.CallID }),
		GiveUp:       record(l, &l.giveUps, func(v GiveUpInfo) uint64 { return v.CallID }),
		HiddenResend: record(l, &l.hidden, func(v AttemptDoneInfo) uint64 { return v.CallID }),
	}
}

func (l *hookLog) giveUpReasons() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rs []error
	for _, g := range l.giveUps {
		rs = append(rs, g.Reason)
	}
	return rs
}

// roundTripFunc adapts a function to an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// always503 is a base that answers every request with a 503, without a
// network.
func always503() http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	})
}

// panicBase answers 503 while status is 503, 200 while it is 200, and
// panics (after counting the request as received) while it is 0.
type panicBase struct {
	status atomic.Int32
	seen   atomic.Int32
}

func (b *panicBase) RoundTrip(r *http.Request) (*http.Response, error) {
	b.seen.Add(1)
	st := int(b.status.Load())
	if st == 0 {
		panic("rv: base RoundTripper panics")
	}
	return &http.Response{StatusCode: st, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// roundTripPanics calls rt.RoundTrip(req) and reports whether it panicked;
// the panic must reach the caller, never be swallowed.
func roundTripPanics(rt http.RoundTripper, req *http.Request) (panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	resp, err := rt.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return false
}

// The budget and breaker transport tests drive a Transport over
// http.Client.Do; their fake clocks start at fixedStart and move only when
// a test advances them.

// fixedStart is where the fake clocks of these tests start.
var fixedStart = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// newNoWaitTransport returns a Transport that does not wait between
// attempts (the waits are still bounded by the caller's context) nor move
// clock, draws zero jitter, and reads clock.
//
// Its throttle is off: the tests that use it are about the retry loop, the
// budgets and the breaker, against dependencies that fail on purpose, and
// with zero jitter the throttle would refuse every call it may refuse.
// The throttle's own tests turn it on (throttle_test.go).
func newNoWaitTransport(clock *fakeClock) *Transport {
	tr := &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true}}}
	setClock(tr, clock.Now, func(ctx context.Context, _ time.Duration) error { return ctx.Err() })
	setRandN(tr, func(int64) int64 { return 0 })
	return tr
}

// getStatus sends a GET through client and returns the status (0 for none)
// and the error, having read and closed the body.
func getStatus(t *testing.T, client *http.Client, url string) (int, error) {
	t.Helper()
	return getStatusCtx(t, context.Background(), client, url)
}

func getStatusCtx(t *testing.T, ctx context.Context, client *http.Client, url string) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// giveUpLog records the reasons of GiveUp events.
type giveUpLog struct {
	mu      sync.Mutex
	reasons []error
	infos   []GiveUpInfo
}

func (g *giveUpLog) hook(info GiveUpInfo) {
	g.mu.Lock()
	g.reasons = append(g.reasons, info.Reason)
	g.infos = append(g.infos, info)
	g.mu.Unlock()
}

func (g *giveUpLog) count(reason error) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, r := range g.reasons {
		if r == reason {
			n++
		}
	}
	return n
}

// refusingBudget is a budget that refuses every retry.
type refusingBudget struct{ allowCalls atomic.Int64 }

func (*refusingBudget) RecordRequest(context.Context) {}

func (b *refusingBudget) AllowRetry(context.Context) (bool, error) {
	b.allowCalls.Add(1)
	return false, nil
}

// callReply is the result of a call made on another goroutine.
type callReply struct {
	resp *http.Response
	err  error
}

func receiveReply(t *testing.T, ch <-chan callReply) callReply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(callWait):
		t.Fatal("a call did not return")
		return callReply{}
	}
}

// readAndClose reads and closes a response body.
func readAndClose(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

// reconcileErrOf asserts that err is a *ReconcileRequiredError (through
// http.Client's wrapping) for a POST under key, and returns it.
func reconcileErrOf(t *testing.T, err error, key string) *ReconcileRequiredError {
	t.Helper()
	require.Error(t, err, "got no error, want a *ReconcileRequiredError")
	var rec *ReconcileRequiredError
	require.Truef(t, errors.As(err, &rec), "got %v (%T), want a *ReconcileRequiredError", err, err)
	assert.Truef(t, errors.Is(err, ErrReconcileRequired), "errors.Is(%v, ErrReconcileRequired) = false, want true", err)
	assert.Equalf(t, http.MethodPost, rec.Method, "got Method %q, want POST", rec.Method)
	assert.Equalf(t, key, rec.IdempotencyKey, "got IdempotencyKey %q, want %q", rec.IdempotencyKey, key)
	return rec
}

// settleBound bounds the polls for connections and goroutines to go.
const settleBound = 5 * time.Second

// poll calls cond until it holds or bound passes.
func poll(bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // a bounded wait on real sockets
	}
}

// snapshotOf returns the breaker's snapshot of scope, failing the test
// without one.
func snapshotOf(t *testing.T, b *breaker.Breaker, scope string) breaker.Change {
	t.Helper()
	for _, s := range b.Snapshot() {
		if s.Scope == scope {
			return s
		}
	}
	t.Fatalf("no snapshot of scope %q in %+v", scope, b.Snapshot())
	return breaker.Change{}
}
