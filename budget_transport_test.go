package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests drive budgets through the Transport, over http.Client.Do,
// against real loopback servers. Waits are skipped through the Transport's
// sleep seam, jitter is zero, and the budgets run on the Transport's
// fake clock, frozen unless a test moves it.

// ratioBudgets is a NewBudget that gives each scope a budget.Ratio with the
// default settings. It runs on the Transport's clock.
func ratioBudgets(string) (budget.Budget, error) { return budget.NewRatio(budget.RatioConfig{}) }

// storm sends n GETs at once through client and checks that each gets
// a 503 response with a nil error.
func storm(t *testing.T, client *http.Client, url string, n int) {
	t.Helper()
	var (
		wg       sync.WaitGroup
		bad      atomic.Int64
		start    = make(chan struct{})
		firstErr atomic.Pointer[error]
	)
	for range n {
		wg.Go(func() {
			<-start
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if err == nil {
				var resp *http.Response
				if resp, err = client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable {
						return
					}
				}
			}
			bad.Add(1)
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
		})
	}
	close(start)
	wg.Wait()
	if bad.Load() > 0 {
		t.Errorf("%d of %d callers did not get the 503 back (an error: %v)", bad.Load(), n, firstErr.Load())
	}
}

func TestBudgetTransportStormBoundedByDefaultRatio(t *testing.T) {
	const callers = 100
	// With the defaults: 100 first attempts, 10% of them as retries, and a
	// reserve of 10 retries per window.
	const bound = callers + callers/10 + 10

	t.Run("frozen clock", func(t *testing.T) {
		srv := newSettableServer(t, http.StatusServiceUnavailable)
		clock := newFakeClockAt(fixedStart)
		tr := newNoWaitTransport(clock)
		tr.Retry.NewBudget = ratioBudgets
		storm(t, &http.Client{Transport: tr}, srv.URL, callers)

		got := srv.requests.Load()
		assert.LessOrEqual(t, got, int64(bound), "requests the server received")
		assert.LessOrEqual(t, float64(got)/callers, 1.2, "requests per caller")
		// The reserve alone grants the first 10 retries, whatever the order.
		assert.GreaterOrEqual(t, got, int64(callers+10), "requests the server received")
	})

	t.Run("default NewBudget", func(t *testing.T) {
		// The Transport's own per-scope budget, on the real clock: the
		// storm lasts far less than its 10-second window.
		srv := newSettableServer(t, http.StatusServiceUnavailable)
		tr := newNoWaitTransport(newFakeClockAt(fixedStart))
		storm(t, &http.Client{Transport: tr}, srv.URL, callers)
		got := srv.requests.Load()
		assert.LessOrEqual(t, got, int64(bound), "requests the server received")
		assert.GreaterOrEqual(t, got, int64(callers+10), "requests the server received")
	})
}

func TestBudgetTransportSharedBudgetBoundsTransportsTogether(t *testing.T) {
	clock := newFakeClockAt(fixedStart)
	shared, err := budget.NewTokenBucket(budget.TokenBucketConfig{Capacity: 3})
	require.NoError(t, err)
	srvA := newSettableServer(t, http.StatusServiceUnavailable)
	srvB := newSettableServer(t, http.StatusServiceUnavailable)
	trA, trB := newNoWaitTransport(clock), newNoWaitTransport(clock)
	trA.Retry.Budget, trB.Retry.Budget = shared, shared
	clientA, clientB := &http.Client{Transport: trA}, &http.Client{Transport: trB}

	for range 5 {
		for _, c := range []struct {
			client *http.Client
			url    string
		}{{clientA, srvA.URL}, {clientB, srvB.URL}} {
			code, err := getStatus(t, c.client, c.url)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, code)
		}
	}
	// 10 first attempts, and the 3 retries the one bucket holds, whichever
	// Transport and host took them.
	assert.Equal(t, int64(13), srvA.requests.Load()+srvB.requests.Load(), "requests both servers received")
	snap := shared.Snapshot()
	assert.Equal(t, uint64(10), snap.Requests, "requests recorded")
	assert.Equal(t, uint64(3), snap.Retries, "retries granted")
	assert.Equal(t, uint64(9), snap.Refused, "retries refused: every call but the first ended by a refusal")
}

func TestBudgetTransportScopesAreIndependent(t *testing.T) {
	// The default: one budget.Ratio per host, on the real clock.
	srvA := newSettableServer(t, http.StatusServiceUnavailable)
	srvB := newSettableServer(t, http.StatusServiceUnavailable)
	var gave giveUpLog
	tr := newNoWaitTransport(newFakeClockAt(fixedStart))
	tr.Hooks.GiveUp = gave.hook
	client := &http.Client{Transport: tr}

	// Exhaust host A's budget: its reserve and deposits run out well
	// within 50 failing calls.
	for i := 0; gave.count(ErrBudgetExhausted) == 0; i++ {
		require.Less(t, i, 50, "host A's budget never refused a retry")
		code, err := getStatus(t, client, srvA.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, code)
	}
	code, err := getStatus(t, client, srvA.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, 2, gave.count(ErrBudgetExhausted), "host A is still refused")

	before, ranOut := gave.count(ErrBudgetExhausted), gave.count(ErrAttemptsExhausted)
	code, err = getStatus(t, client, srvB.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, int64(defaultMaxAttempts), srvB.requests.Load(), "host B gets all its attempts")
	assert.Equal(t, before, gave.count(ErrBudgetExhausted), "host B is not refused")
	assert.Equal(t, ranOut+1, gave.count(ErrAttemptsExhausted), "host B's call ran out of attempts instead")
}

func TestBudgetTransportRefusalReturnsLastResponse(t *testing.T) {
	srv := newSettableServer(t, http.StatusServiceUnavailable)
	var gave giveUpLog
	budget := &refusingBudget{}
	tr := newNoWaitTransport(newFakeClockAt(fixedStart))
	tr.Retry.Budget = budget
	tr.Hooks.GiveUp = gave.hook

	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	require.NoError(t, err, "a refused retry hands back the last response, not an error")
	body, rerr := io.ReadAll(resp.Body)
	require.NoError(t, rerr)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, http.StatusText(http.StatusServiceUnavailable), string(body), "the last response's body is readable")
	assert.Equal(t, int64(1), srv.requests.Load(), "requests the server received")
	assert.Equal(t, int64(1), budget.allowCalls.Load(), "the budget was asked once")

	require.Len(t, gave.infos, 1, "GiveUp events")
	g := gave.infos[0]
	assert.Same(t, ErrBudgetExhausted, g.Reason, "GiveUp reason")
	assert.Equal(t, http.StatusServiceUnavailable, g.StatusCode, "GiveUp status")
	assert.Equal(t, 1, g.Attempt, "GiveUp attempt")
}

func TestBudgetTransportRefusalWithoutResponse(t *testing.T) {
	var gave giveUpLog
	tr := newNoWaitTransport(newFakeClockAt(fixedStart))
	tr.Retry.Budget = &refusingBudget{}
	tr.Hooks.GiveUp = gave.hook

	_, err := getStatus(t, &http.Client{Transport: tr}, refusedURL(t))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrBudgetExhausted)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "the last attempt's error")
	var re *RetryError
	require.ErrorAs(t, err, &re)
	assert.Same(t, ErrBudgetExhausted, re.Reason)
	assert.Equal(t, 1, re.Attempts)
	var ue *url.Error
	assert.ErrorAs(t, err, &ue, "http.Client's wrapping")

	require.Len(t, gave.infos, 1, "GiveUp events")
	assert.Same(t, ErrBudgetExhausted, gave.infos[0].Reason)
	assert.Zero(t, gave.infos[0].StatusCode)
	assert.ErrorIs(t, gave.infos[0].Err, syscall.ECONNREFUSED)
}

func TestBudgetTransportStackedLayersDoNotMultiplyLoad(t *testing.T) {
	clock := newFakeClockAt(fixedStart)
	alone := newSettableServer(t, http.StatusServiceUnavailable)
	stacked := newSettableServer(t, http.StatusServiceUnavailable)

	single := newNoWaitTransport(clock)
	single.Retry.NewBudget = func(string) (budget.Budget, error) { return budget.Unlimited(), nil }
	inner := newNoWaitTransport(clock)
	inner.Retry.MaxAttempts = 5 // would multiply with the outer's 3 if both repeated
	inner.Retry.NewBudget = single.Retry.NewBudget
	outer := newNoWaitTransport(clock)
	outer.Base = inner
	outer.Retry.NewBudget = single.Retry.NewBudget

	for _, c := range []struct {
		rt  http.RoundTripper
		srv *settableServer
	}{{single, alone}, {outer, stacked}} {
		for range 4 {
			code, err := getStatus(t, &http.Client{Transport: c.rt}, c.srv.URL)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, code)
		}
	}
	assert.Equal(t, int64(4*defaultMaxAttempts), alone.requests.Load(), "one layer alone")
	assert.LessOrEqual(t, stacked.requests.Load(), alone.requests.Load(), "two stacked layers against one alone")
	assert.Equal(t, int64(4*defaultMaxAttempts), stacked.requests.Load(), "two stacked layers")

	// And against a refused connection: no response, only errors.
	url := refusedURL(t)
	var attempts atomic.Int64
	outer2 := newNoWaitTransport(clock)
	inner2 := newNoWaitTransport(clock)
	inner2.Retry.MaxAttempts = 5
	inner2.Hooks.AttemptStart = func(AttemptStartInfo) { attempts.Add(1) }
	outer2.Base = inner2
	_, err := getStatus(t, &http.Client{Transport: outer2}, url)
	assert.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Equal(t, int64(defaultMaxAttempts), attempts.Load(), "attempts the inner layer sent")
}

// A NewBudget that fails ends the call that needed the budget before
// anything is sent, whatever else the Transport does: the call gets the
// factory's error, its body is closed, and a key it claimed is free again.
func TestNewBudgetErrorEndsTheCallBeforeAnythingIsSent(t *testing.T) {
	errNoBudget := errors.New("no budget for this scope")
	for _, tt := range []struct {
		name  string
		load  LoadPolicy
		brake BrakePolicy
		hedge HedgePolicy
		keyed bool
	}{
		{name: "the defaults"},
		{name: "the throttle disabled", load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true}}},
		{name: "a keyed write with a ledger", keyed: true},
		{name: "a keyed write, the throttle disabled", load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true}}, keyed: true},
		{name: "a breaker", brake: BrakePolicy{Route: func(*http.Request) string { return "r" }}},
		{name: "hedging", hedge: HedgePolicy{Max: 1, Delay: time.Millisecond}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var sent atomic.Int32
			l := &ledger.Memory{}
			tr := &Transport{
				Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
					sent.Add(1)
					return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
				}),
				Retry: RetryPolicy{NewBudget: func(string) (budget.Budget, error) { return nil, errNoBudget }},
				Keys:  KeyPolicy{Ledger: l},
				Load:  tt.load, Brake: tt.brake, Hedge: tt.hedge,
			}
			defer tr.CloseIdleConnections()
			body := &countingBody{r: strings.NewReader("payload"), closed: make(chan struct{})}
			method := http.MethodGet
			if tt.keyed {
				method = http.MethodPost
			}
			req, err := http.NewRequestWithContext(context.Background(), method, "http://dependency.test/items", body)
			require.NoError(t, err)
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("payload")), nil }
			if tt.keyed {
				req.Header.Set("Idempotency-Key", "key-1")
			}
			resp, err := tr.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
				t.Fatalf("got a response %d, want none", resp.StatusCode)
			}
			if !errors.Is(err, errNoBudget) {
				t.Fatalf("got error %v, want the factory's", err)
			}
			if n := sent.Load(); n != 0 {
				t.Errorf("the base was sent %d requests, want none", n)
			}
			if n := body.closes.Load(); n == 0 {
				t.Error("the request's body was not closed")
			}
			if tt.keyed {
				claim, err := l.Begin(context.Background(), "key-1", ledger.Fingerprint{1})
				if err != nil || claim.State != decide.KeyNone {
					t.Errorf("the key after the call: got %+v, %v, want it free", claim, err)
				}
			}
		})
	}
}
