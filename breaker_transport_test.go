package retryfuse

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests drive the Breaker through the Transport, over
// http.Client.Do, against real loopback servers, with the breaker on a
// fake clock the test advances.

// transitionLog records BreakerChange events.
type transitionLog struct {
	mu  sync.Mutex
	got []breaker.Change
}

func (r *transitionLog) hook(info breaker.Change) {
	r.mu.Lock()
	r.got = append(r.got, info)
	r.mu.Unlock()
}

// take returns the transitions recorded since the last take, as
// "from>to".
func (r *transitionLog) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{}
	for _, tr := range r.got {
		out = append(out, tr.From.String()+">"+tr.To.String())
	}
	r.got = nil
	return out
}

func (r *transitionLog) all() []breaker.Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]breaker.Change(nil), r.got...)
}

// newBreakerTransport returns a Transport with a Breaker on clock, one
// attempt per call (so that each call is one observation) and no budget,
// and the recorder of its transitions.
func newBreakerTransport(t *testing.T, clock *fakeClock, s breaker.Settings) (*Transport, *breaker.Breaker, *transitionLog) {
	t.Helper()
	b, err := breaker.New(s)
	require.NoError(t, err)
	tr := newNoWaitTransport(clock)
	tr.Retry.MaxAttempts = 1
	tr.Retry.Budget = budget.Unlimited()
	tr.Brake.Breaker = b
	rec := &transitionLog{}
	tr.Hooks.BreakerChange = rec.hook
	return tr, b, rec
}

// scopeOf is the scope of a server's requests.
func scopeOf(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	return hostScope(&http.Request{URL: u})
}

func TestBreakerTransportOpensFailsFastProbesAndCloses(t *testing.T) {
	const openTimeout = 30 * time.Second
	srv := newSettableServer(t, http.StatusServiceUnavailable)
	scope := scopeOf(t, srv.Server)
	clock := newFakeClockAt(fixedStart)
	tr, b, rec := newBreakerTransport(t, clock, breaker.Settings{FailureThreshold: 3, OpenTimeout: openTimeout})
	client := &http.Client{Transport: tr}

	// Dependency failures up to the threshold: each goes back as a 503.
	for i := 1; i <= 3; i++ {
		code, err := getStatus(t, client, srv.URL)
		require.NoError(t, err, "call %d", i)
		require.Equal(t, http.StatusServiceUnavailable, code, "call %d", i)
		if i < 3 {
			require.Empty(t, rec.take(), "transitions after %d failures", i)
		}
	}
	opened := rec.all()
	require.Len(t, opened, 1, "transitions after the threshold")
	assert.Equal(t, scope, opened[0].Scope)
	assert.Equal(t, breaker.Closed, opened[0].From)
	assert.Equal(t, breaker.Open, opened[0].To)
	assert.Equal(t, fixedStart, opened[0].At)
	var se *StatusError
	if assert.ErrorAs(t, opened[0].Cause, &se, "the cause of the opening") {
		assert.Equal(t, http.StatusServiceUnavailable, se.StatusCode)
	}
	rec.take()
	assert.Equal(t, breaker.Open, b.StateAt(scope, clock.Now()))

	// Open: fail fast without sending.
	for range 5 {
		_, err := getStatus(t, client, srv.URL)
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrCircuitOpen)
		var coe *breaker.OpenError
		require.ErrorAs(t, err, &coe)
		assert.Equal(t, scope, coe.Scope)
		assert.Equal(t, fixedStart, coe.OpenedAt)
		assert.Equal(t, fixedStart.Add(openTimeout), coe.ProbeAt)
	}
	assert.Equal(t, int64(3), srv.requests.Load(), "requests the server received while open")

	// Still open just before OpenTimeout.
	clock.Advance(openTimeout - time.Nanosecond)
	_, err := getStatus(t, client, srv.URL)
	assert.ErrorIs(t, err, ErrCircuitOpen)
	assert.Equal(t, int64(3), srv.requests.Load())

	// After OpenTimeout one probe passes; while it is out, others fail
	// fast; its success closes the scope.
	clock.Advance(time.Nanosecond)
	srv.setStatus(http.StatusOK)
	gate := srv.hold()
	probe := make(chan error, 1)
	go func() {
		resp, err := client.Get(srv.URL)
		if err == nil {
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("the probe's status: got %d, want 200", resp.StatusCode)
			}
			_ = resp.Body.Close()
		}
		probe <- err
	}()
	<-gate.arrived
	assert.Equal(t, []string{"open>half_open"}, rec.take(), "transitions when the probe was let through")
	_, err = getStatus(t, client, srv.URL)
	assert.ErrorIs(t, err, ErrCircuitOpen, "a second call while the probe is out")
	close(gate.release)
	require.NoError(t, <-probe, "the probe")
	assert.Equal(t, []string{"half_open>closed"}, rec.take(), "transitions after the probe succeeded")
	assert.Equal(t, breaker.Closed, b.StateAt(scope, clock.Now()))
	assert.Equal(t, int64(4), srv.requests.Load(), "requests the server received: three failures and the probe")

	code, err := getStatus(t, client, srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code, "closed again: calls pass")
	assert.Equal(t, int64(5), srv.requests.Load())
}

func TestBreakerTransportFailedProbeReopens(t *testing.T) {
	const openTimeout = time.Second
	srv := newSettableServer(t, http.StatusServiceUnavailable)
	scope := scopeOf(t, srv.Server)
	clock := newFakeClockAt(fixedStart)
	tr, b, rec := newBreakerTransport(t, clock, breaker.Settings{FailureThreshold: 2, OpenTimeout: openTimeout})
	client := &http.Client{Transport: tr}
	for range 2 {
		_, err := getStatus(t, client, srv.URL)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"closed>open"}, rec.take())

	clock.Advance(openTimeout)
	code, err := getStatus(t, client, srv.URL)
	require.NoError(t, err, "the probe's 503 comes back as a response")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, []string{"open>half_open", "half_open>open"}, rec.take())
	assert.Equal(t, int64(3), srv.requests.Load())

	_, err = getStatus(t, client, srv.URL)
	var coe *breaker.OpenError
	require.ErrorAs(t, err, &coe)
	assert.Equal(t, fixedStart.Add(openTimeout), coe.OpenedAt, "reopened when the probe failed")
	assert.Equal(t, fixedStart.Add(2*openTimeout), coe.ProbeAt)
	assert.Equal(t, breaker.Open, b.StateAt(scope, clock.Now()))
	assert.Equal(t, int64(3), srv.requests.Load(), "nothing sent while open again")
}

func TestBreakerTransportBudgetRefusalIsNotAFailure(t *testing.T) {
	// The server fails every other request. Each failure's retry is
	// refused by the budget: were the refusal counted as a failure too,
	// two in a row would open the scope.
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	clock := newFakeClockAt(fixedStart)
	tr, b, rec := newBreakerTransport(t, clock, breaker.Settings{FailureThreshold: 2})
	tr.Retry.MaxAttempts = 3
	refuse := &refusingBudget{}
	tr.Retry.Budget = refuse
	var gave giveUpLog
	tr.Hooks.GiveUp = gave.hook
	client := &http.Client{Transport: tr}

	for i := range 20 {
		code, err := getStatus(t, client, srv.URL)
		require.NoError(t, err)
		want := http.StatusOK
		if i%2 == 0 {
			want = http.StatusServiceUnavailable
		}
		require.Equal(t, want, code, "call %d", i)
	}
	assert.Equal(t, 10, gave.count(ErrBudgetExhausted), "budget refusals")
	assert.Equal(t, int64(10), refuse.allowCalls.Load())
	assert.Empty(t, rec.take(), "breaker transitions")
	assert.Equal(t, breaker.Closed, b.StateAt(scopeOf(t, srv), clock.Now()))
	assert.Equal(t, int64(20), n.Load(), "requests the server received")
}

func TestBreakerTransportCallerCancellationIsNotAFailure(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-r.Context().Done() // answers only when the caller has gone
	}))
	defer srv.Close()
	clock := newFakeClockAt(fixedStart)
	tr, b, rec := newBreakerTransport(t, clock, breaker.Settings{FailureThreshold: 2})
	tr.Retry.MaxAttempts = 3
	client := &http.Client{Transport: tr}

	for i := range 6 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-arrived
			cancel()
		}()
		_, err := getStatusCtx(t, ctx, client, srv.URL)
		cancel()
		require.ErrorIs(t, err, context.Canceled, "call %d", i)
	}
	assert.Empty(t, rec.take(), "breaker transitions")
	assert.Equal(t, breaker.Closed, b.StateAt(scopeOf(t, srv), clock.Now()))

	// The caller's deadline likewise.
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := getStatusCtx(t, ctx, client, srv.URL)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "call %d", i)
	}
	assert.Empty(t, rec.take(), "breaker transitions")
	assert.Equal(t, breaker.Closed, b.StateAt(scopeOf(t, srv), clock.Now()))
}

func TestBreakerTransportScopesAreIndependent(t *testing.T) {
	down := newSettableServer(t, http.StatusServiceUnavailable)
	up := newSettableServer(t, http.StatusOK)
	clock := newFakeClockAt(fixedStart)
	tr, b, rec := newBreakerTransport(t, clock, breaker.Settings{FailureThreshold: 2})
	client := &http.Client{Transport: tr}

	for range 2 {
		_, err := getStatus(t, client, down.URL)
		require.NoError(t, err)
	}
	got := rec.all()
	require.Len(t, got, 1)
	assert.Equal(t, scopeOf(t, down.Server), got[0].Scope, "the scope that opened")

	for range 5 {
		_, err := getStatus(t, client, down.URL)
		assert.ErrorIs(t, err, ErrCircuitOpen, "the failing host fails fast")
		code, err := getStatus(t, client, up.URL)
		require.NoError(t, err, "the healthy host is not braked")
		assert.Equal(t, http.StatusOK, code)
	}
	assert.Equal(t, int64(2), down.requests.Load())
	assert.Equal(t, int64(5), up.requests.Load())
	assert.Equal(t, breaker.Open, b.StateAt(scopeOf(t, down.Server), clock.Now()))
	assert.Equal(t, breaker.Closed, b.StateAt(scopeOf(t, up.Server), clock.Now()))
	assert.Len(t, rec.all(), 1, "no other transition")
}

// A retryable response too long to keep during the wait is dropped; when
// the breaker, opened meanwhile by another call, then refuses the retry, the
// error still carries the dropped response's status.
func TestBreakerTransportRefusedRetryKeepsDroppedStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(make([]byte, 4096))
	}))
	t.Cleanup(srv.Close)
	clk := newFakeClockAt(fixedStart)
	tr, b, _ := newBreakerTransport(t, clk, breaker.Settings{FailureThreshold: 2})
	tr.Retry.MaxAttempts = 2
	tr.Retry.MaxDrainBytes = 1024 // the 4 KiB body is too long to keep
	scope := scopeOf(t, srv)
	setSleep(tr, func(ctx context.Context, _ time.Duration) error {
		// Another call's failure opens the scope during this call's wait.
		ticket, _, err := b.Allow(scope, clk.Now())
		require.NoError(t, err)
		ticket.Done(breaker.Failure, fmt.Errorf("another call failed"), clk.Now())
		return ctx.Err()
	})
	t.Cleanup(tr.CloseIdleConnections)

	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if resp != nil {
		resp.Body.Close()
		t.Fatalf("got a response %d, want an error: the response was too long to keep", resp.StatusCode)
	}
	require.ErrorIsf(t, err, ErrCircuitOpen, "got %v, want ErrCircuitOpen", err)
	var re *RetryError
	require.ErrorAsf(t, err, &re, "got %v, want a *RetryError", err)
	var se *StatusError
	require.ErrorAsf(t, re.Last, &se, "got Last %v, want the dropped response's *StatusError", re.Last)
	assert.Equalf(t, http.StatusServiceUnavailable, se.StatusCode, "got status %d, want 503", se.StatusCode)
}

// A scope that opens on an attempt and stays open past the backoff is
// refused before the wait: the live response goes back, no retry token is
// spent and nothing waits.
func TestBreakerTransportOpenScopeRefusedBeforeTheWait(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "busy")
	}))
	t.Cleanup(srv.Close)
	tr, _, _ := newBreakerTransport(t, newFakeClockAt(fixedStart), breaker.Settings{FailureThreshold: 1})
	tr.Retry.MaxAttempts = 3
	bucket, err := budget.NewTokenBucket(budget.TokenBucketConfig{Capacity: 5})
	require.NoError(t, err)
	tr.Retry.Budget = bucket
	var waits atomic.Int32
	setSleep(tr, func(ctx context.Context, _ time.Duration) error { waits.Add(1); return ctx.Err() })
	var reasons []error
	tr.Hooks.GiveUp = func(i GiveUpInfo) { reasons = append(reasons, i.Reason) }
	t.Cleanup(tr.CloseIdleConnections)

	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoErrorf(t, err, "got %v, want the 503 back as a response", err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equalf(t, http.StatusServiceUnavailable, resp.StatusCode, "got status %d, want 503", resp.StatusCode)
	assert.Equalf(t, "busy", string(body), "got body %q, want the live response's", body)
	assert.Equalf(t, int32(0), waits.Load(), "got %d waits, want none", waits.Load())
	assert.Equalf(t, uint64(0), bucket.Snapshot().Retries, "got %d retry tokens spent, want none", bucket.Snapshot().Retries)
	require.Lenf(t, reasons, 1, "got GiveUp reasons %v, want one", reasons)
	assert.ErrorIsf(t, reasons[0], ErrCircuitOpen, "got GiveUp reason %v, want ErrCircuitOpen", reasons[0])
}

// A half-open scope lets MaxProbes probes out; a probe whose base panics
// (a panic a server's handler recovers, say) must still give its slot
// back, or the scope refuses every request forever: elapsed time alone
// never closes it.
func TestBasePanicDoesNotLeakABreakerProbeSlot(t *testing.T) {
	clock := newFakeClockAt(fixedStart)
	b, err := breaker.New(breaker.Settings{FailureThreshold: 1, OpenTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	base := &panicBase{}
	base.status.Store(503)
	tr := newNoWaitTransport(clock)
	tr.Base, tr.Retry.MaxAttempts, tr.Brake.Breaker, tr.Retry.Budget = base, 1, b, budget.Unlimited()
	const url = "http://rv-breaker.invalid/"

	resp, err := tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, url, ""))
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("first call: got %v, %v; want the 503 that opens the scope", resp, err)
	}
	clock.Advance(2 * time.Second) // the next call is a probe

	base.status.Store(0)
	if !roundTripPanics(tr, newRequest(t, testCtx(t), http.MethodGet, url, "")) {
		t.Fatal("the probe: the base's panic did not reach the caller")
	}

	base.status.Store(200)
	resp, err = tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, url, ""))
	if err != nil {
		t.Fatalf("the call after the panicking probe: got %v; want it let through as a probe (slot given back)", err)
	}
	_ = resp.Body.Close()
	if got := b.StateAt(hostScope(resp.Request), clock.Now()); got != breaker.Closed {
		t.Errorf("scope after a successful probe: got %v, want closed", got)
	}
}
