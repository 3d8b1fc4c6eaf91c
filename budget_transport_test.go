package retryfuse

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests drive budgets through the Transport, over http.Client.Do,
// against real loopback servers. Waits are skipped through the Transport's
// sleep seam, jitter is zero, and budget clocks are frozen unless a test
// says otherwise.

// btStart is where the fake clocks of these tests start.
var btStart = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// btServer is a loopback server that counts the requests it receives and
// answers each with status (as set by setStatus). A request that finds a
// gate set takes it and waits until it is released.
type btServer struct {
	*httptest.Server
	requests atomic.Int64
	status   atomic.Int64
	gate     atomic.Pointer[btGate]
}

// btGate holds one request: arrived is closed when it is held, and it
// goes on when release is closed.
type btGate struct{ arrived, release chan struct{} }

// hold makes the next request wait at a gate, and returns the gate.
func (s *btServer) hold() *btGate {
	g := &btGate{arrived: make(chan struct{}), release: make(chan struct{})}
	s.gate.Store(g)
	return g
}

func newBtServer(t *testing.T, status int) *btServer {
	t.Helper()
	s := &btServer{}
	s.status.Store(int64(status))
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if g := s.gate.Swap(nil); g != nil {
			close(g.arrived)
			<-g.release
		}
		w.WriteHeader(int(s.status.Load()))
		_, _ = io.WriteString(w, http.StatusText(int(s.status.Load())))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *btServer) setStatus(code int) { s.status.Store(int64(code)) }

// newBtTransport returns a Transport that does not wait between attempts
// (the waits are still bounded by the caller's context), draws zero
// jitter, and reads clock.
func newBtTransport(clock *fakeClock) *Transport {
	return &Transport{
		now:   clock.Now,
		sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		randN: func(int64) int64 { return 0 },
	}
}

// btFrozenRatioBudgets makes NewBudget give each scope a RatioBudget with
// the default settings, on clock.
func btFrozenRatioBudgets(clock *fakeClock) func(string) (Budget, error) {
	return func(string) (Budget, error) {
		b, err := NewRatioBudget(RatioBudgetConfig{})
		if err == nil {
			b.now = clock.Now
		}
		return b, err
	}
}

// btGet sends a GET through client and returns the status (0 for none)
// and the error, having read and closed the body.
func btGet(t *testing.T, client *http.Client, url string) (int, error) {
	t.Helper()
	return btGetCtx(t, context.Background(), client, url)
}

func btGetCtx(t *testing.T, ctx context.Context, client *http.Client, url string) (int, error) {
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

// btGiveUps records the reasons of GiveUp events.
type btGiveUps struct {
	mu      sync.Mutex
	reasons []error
	infos   []GiveUpInfo
}

func (g *btGiveUps) hook(info GiveUpInfo) {
	g.mu.Lock()
	g.reasons = append(g.reasons, info.Reason)
	g.infos = append(g.infos, info)
	g.mu.Unlock()
}

func (g *btGiveUps) count(reason error) int {
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

// btStorm sends n GETs at once through client and checks that each gets
// a 503 response with a nil error.
func btStorm(t *testing.T, client *http.Client, url string, n int) {
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
		srv := newBtServer(t, http.StatusServiceUnavailable)
		clock := newFakeClockAt(btStart)
		tr := newBtTransport(clock)
		tr.NewBudget = btFrozenRatioBudgets(clock)
		btStorm(t, &http.Client{Transport: tr}, srv.URL, callers)

		got := srv.requests.Load()
		assert.LessOrEqual(t, got, int64(bound), "requests the server received")
		assert.LessOrEqual(t, float64(got)/callers, 1.2, "requests per caller")
		// The reserve alone grants the first 10 retries, whatever the order.
		assert.GreaterOrEqual(t, got, int64(callers+10), "requests the server received")
	})

	t.Run("default NewBudget", func(t *testing.T) {
		// The Transport's own per-scope budget, on the real clock: the
		// storm lasts far less than its 10-second window.
		srv := newBtServer(t, http.StatusServiceUnavailable)
		tr := newBtTransport(newFakeClockAt(btStart))
		btStorm(t, &http.Client{Transport: tr}, srv.URL, callers)
		got := srv.requests.Load()
		assert.LessOrEqual(t, got, int64(bound), "requests the server received")
		assert.GreaterOrEqual(t, got, int64(callers+10), "requests the server received")
	})
}

func TestBudgetTransportSharedBudgetBoundsTransportsTogether(t *testing.T) {
	clock := newFakeClockAt(btStart)
	shared, err := NewTokenBucket(TokenBucketConfig{Capacity: 3})
	require.NoError(t, err)
	shared.now = clock.Now
	srvA := newBtServer(t, http.StatusServiceUnavailable)
	srvB := newBtServer(t, http.StatusServiceUnavailable)
	trA, trB := newBtTransport(clock), newBtTransport(clock)
	trA.Budget, trB.Budget = shared, shared
	clientA, clientB := &http.Client{Transport: trA}, &http.Client{Transport: trB}

	for range 5 {
		for _, c := range []struct {
			client *http.Client
			url    string
		}{{clientA, srvA.URL}, {clientB, srvB.URL}} {
			code, err := btGet(t, c.client, c.url)
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
	// The default: one RatioBudget per host, on the real clock.
	srvA := newBtServer(t, http.StatusServiceUnavailable)
	srvB := newBtServer(t, http.StatusServiceUnavailable)
	var gave btGiveUps
	tr := newBtTransport(newFakeClockAt(btStart))
	tr.Hooks.GiveUp = gave.hook
	client := &http.Client{Transport: tr}

	// Exhaust host A's budget: its reserve and deposits run out well
	// within 50 failing calls.
	for i := 0; gave.count(ErrBudgetExhausted) == 0; i++ {
		require.Less(t, i, 50, "host A's budget never refused a retry")
		code, err := btGet(t, client, srvA.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, code)
	}
	code, err := btGet(t, client, srvA.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, 2, gave.count(ErrBudgetExhausted), "host A is still refused")

	before, ranOut := gave.count(ErrBudgetExhausted), gave.count(ErrAttemptsExhausted)
	code, err = btGet(t, client, srvB.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, int64(DefaultMaxAttempts), srvB.requests.Load(), "host B gets all its attempts")
	assert.Equal(t, before, gave.count(ErrBudgetExhausted), "host B is not refused")
	assert.Equal(t, ranOut+1, gave.count(ErrAttemptsExhausted), "host B's call ran out of attempts instead")
}

// btRefuse is a budget that refuses every retry.
type btRefuse struct{ allowCalls atomic.Int64 }

func (*btRefuse) RecordRequest(context.Context) {}
func (b *btRefuse) AllowRetry(context.Context) (bool, error) {
	b.allowCalls.Add(1)
	return false, nil
}

func TestBudgetTransportRefusalReturnsLastResponse(t *testing.T) {
	srv := newBtServer(t, http.StatusServiceUnavailable)
	var gave btGiveUps
	budget := &btRefuse{}
	tr := newBtTransport(newFakeClockAt(btStart))
	tr.Budget = budget
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

// btRefusedURL returns a loopback URL where nothing listens.
func btRefusedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr + "/"
}

func TestBudgetTransportRefusalWithoutResponse(t *testing.T) {
	var gave btGiveUps
	tr := newBtTransport(newFakeClockAt(btStart))
	tr.Budget = &btRefuse{}
	tr.Hooks.GiveUp = gave.hook

	_, err := btGet(t, &http.Client{Transport: tr}, btRefusedURL(t))
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
	clock := newFakeClockAt(btStart)
	alone := newBtServer(t, http.StatusServiceUnavailable)
	stacked := newBtServer(t, http.StatusServiceUnavailable)

	single := newBtTransport(clock)
	single.NewBudget = func(string) (Budget, error) { return UnlimitedBudget{}, nil }
	inner := newBtTransport(clock)
	inner.MaxAttempts = 5 // would multiply with the outer's 3 if both repeated
	inner.NewBudget = single.NewBudget
	outer := newBtTransport(clock)
	outer.Base = inner
	outer.NewBudget = single.NewBudget

	for _, c := range []struct {
		rt  http.RoundTripper
		srv *btServer
	}{{single, alone}, {outer, stacked}} {
		for range 4 {
			code, err := btGet(t, &http.Client{Transport: c.rt}, c.srv.URL)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, code)
		}
	}
	assert.Equal(t, int64(4*DefaultMaxAttempts), alone.requests.Load(), "one layer alone")
	assert.LessOrEqual(t, stacked.requests.Load(), alone.requests.Load(), "two stacked layers against one alone")
	assert.Equal(t, int64(4*DefaultMaxAttempts), stacked.requests.Load(), "two stacked layers")

	// And against a refused connection: no response, only errors.
	url := btRefusedURL(t)
	var attempts atomic.Int64
	outer2 := newBtTransport(clock)
	inner2 := newBtTransport(clock)
	inner2.MaxAttempts = 5
	inner2.Hooks.AttemptStart = func(AttemptStartInfo) { attempts.Add(1) }
	outer2.Base = inner2
	_, err := btGet(t, &http.Client{Transport: outer2}, url)
	assert.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Equal(t, int64(DefaultMaxAttempts), attempts.Load(), "attempts the inner layer sent")
}
