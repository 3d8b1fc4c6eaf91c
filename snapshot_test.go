package retryfuse

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Transport.Snapshot: every scope kept, sorted, each control's state as
// it stands, nil for a control that is off; read while calls run.

func TestSnapshotShowsEachScopesControls(t *testing.T) {
	failing := newSettableServer(t, http.StatusServiceUnavailable)
	healthy := newSettableServer(t, http.StatusOK)
	clock := newFakeClockAt(fixedStart)
	tr, _, _ := newBreakerTransport(t, clock, breaker.Settings{FailureThreshold: 2, Version: 7})
	tr.Retry.Budget = nil // a Ratio per scope, the default
	tr.Load.MaxInFlight = 4
	tr.Load.RateLimit = 100
	tr.Load.Throttle = ThrottlePolicy{On: true} // the pace stays off
	client := &http.Client{Transport: tr}

	assert.Empty(t, tr.Snapshot(), "before the first call, no scope is kept")
	for range 2 {
		_, _ = getStatus(t, client, failing.URL)
	}
	status, err := getStatus(t, client, healthy.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)

	got := tr.Snapshot()
	want := []string{scopeOf(t, failing.Server), scopeOf(t, healthy.Server)}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	require.Len(t, got, 2)
	assert.Equal(t, want, []string{got[0].Scope, got[1].Scope}, "sorted by name")
	for _, s := range got {
		open := s.Scope == scopeOf(t, failing.Server)
		require.Len(t, s.Breaker, 1, s.Scope)
		b := s.Breaker[0]
		assert.Equal(t, s.Scope, b.Scope)
		assert.Equal(t, uint64(7), b.Settings.Version, "the breaker's settings version")
		if open {
			assert.Equal(t, breaker.Open, b.To, "two 503s opened %s", s.Scope)
		} else {
			assert.Equal(t, breaker.Closed, b.To, "%s answered 200", s.Scope)
		}
		require.NotNil(t, s.Budget, "%s: its Ratio budget", s.Scope)
		if open {
			assert.Equal(t, uint64(2), s.Budget.Requests, "%s: calls counted by its budget", s.Scope)
		} else {
			assert.Equal(t, uint64(1), s.Budget.Requests, "%s: calls counted by its budget", s.Scope)
		}
		assert.Equal(t, &BulkheadState{Limit: 4, Allowed: 4}, s.Bulkhead, "%s: nothing in flight of 4", s.Scope)
		require.NotNil(t, s.RateLimit, s.Scope)
		assert.Equal(t, 100.0, s.RateLimit.Limit)
		require.NotNil(t, s.Throttle, s.Scope)
		assert.Zero(t, s.Throttle.Refusing, "%s: a few rejections refuse nothing", s.Scope)
		if open {
			assert.Equal(t, uint64(2), s.Throttle.Rejected, "%s: its 503s in the throttle's window", s.Scope)
		}
		assert.Nil(t, s.Pace, "%s: the throttle brings no pace", s.Scope)
	}
}

// The pace is shown by its own setting: Load.Pace alone shows a pace and
// no throttle, though one record in the scope holds both.
func TestSnapshotShowsThePaceWithoutTheThrottle(t *testing.T) {
	srv := newSettableServer(t, http.StatusOK)
	tr := newNoWaitTransport(newFakeClockAt(fixedStart))
	tr.Load.Throttle = ThrottlePolicy{}
	tr.Load.Pace = true
	t.Cleanup(tr.CloseIdleConnections)
	_, err := getStatus(t, &http.Client{Transport: tr}, srv.URL)
	require.NoError(t, err)

	got := tr.Snapshot()
	require.Len(t, got, 1)
	assert.Nil(t, got[0].Throttle, "Load.Pace alone: no throttle")
	require.NotNil(t, got[0].Pace, "Load.Pace")
	assert.Zero(t, got[0].Pace.Rate, "no 429 came: the pace is idle")
	assert.True(t, got[0].Pace.HeldUntil.IsZero(), "no Retry-After holds new calls")
}

func TestSnapshotShowsControlsOffAsNil(t *testing.T) {
	srv := newSettableServer(t, http.StatusOK)
	tr := newNoWaitTransport(newFakeClockAt(fixedStart)) // no breaker, no limits, no throttle
	t.Cleanup(tr.CloseIdleConnections)
	_, err := getStatus(t, &http.Client{Transport: tr}, srv.URL)
	require.NoError(t, err)

	got := tr.Snapshot()
	require.Len(t, got, 1)
	s := got[0]
	assert.Nil(t, s.Breaker, "no Breaker")
	assert.Nil(t, s.Bulkhead, "no MaxInFlight, Adaptive or Breaker")
	assert.Nil(t, s.RateLimit, "no RateLimit")
	assert.Nil(t, s.Throttle, "the throttle is off by default")
	assert.Nil(t, s.Pace, "the pace is off by default")
	require.NotNil(t, s.Budget, "the default budget, a Ratio, tells its state")
	assert.Equal(t, uint64(1), s.Budget.Requests)
}

func TestSnapshotOfInvalidSettingsIsEmpty(t *testing.T) {
	tr := &Transport{Retry: RetryPolicy{MaxAttempts: -1}}
	_, err := tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, "http://127.0.0.1:1/", ""))
	require.ErrorIs(t, err, ErrInvalidPolicy)
	assert.Nil(t, tr.Snapshot())
}

// A page asked for before the Transport's first call must not freeze its
// settings: they are read at the first call, as documented.
func TestSnapshotBeforeTheFirstCallResolvesNoSetting(t *testing.T) {
	tr := &Transport{}
	assert.Nil(t, tr.Snapshot())
	tr.Retry.MaxAttempts = -1 // set after the Snapshot, before the first call
	_, err := tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, "http://127.0.0.1:1/", ""))
	assert.ErrorIs(t, err, ErrInvalidPolicy, "the setting made after Snapshot was read")
}

// The learnt limit shows its bounds, and an attempt held by the server
// counts in flight.
func TestSnapshotCountsAttemptsInFlightAgainstTheLearntLimit(t *testing.T) {
	srv := newSettableServer(t, http.StatusOK)
	tr := newTransport(t, nil, &Transport{Load: LoadPolicy{Adaptive: true, MinInFlight: 2, MaxInFlight: 50}})
	client := &http.Client{Transport: tr}
	gate := srv.hold()
	done := make(chan error, 1)
	go func() {
		_, err := getStatus(t, client, srv.URL)
		done <- err
	}()
	<-gate.arrived
	got := tr.Snapshot()
	require.Len(t, got, 1)
	b := got[0].Bulkhead
	require.NotNil(t, b)
	assert.True(t, b.Learnt)
	assert.Equal(t, 1, b.InFlight, "the held attempt")
	assert.Equal(t, [2]int{2, 50}, [2]int{b.Floor, b.Ceiling})
	assert.GreaterOrEqual(t, b.Limit, 2)
	close(gate.release)
	require.NoError(t, <-done)
	assert.Equal(t, 0, tr.Snapshot()[0].Bulkhead.InFlight, "the attempt is done")
}

// Snapshot reads while calls run and scopes come and go (run with -race).
func TestSnapshotWhileCallsRun(t *testing.T) {
	srv := newSettableServer(t, http.StatusOK)
	b, err := breaker.New(breaker.Settings{})
	require.NoError(t, err)
	tr := newTransport(t, nil, &Transport{
		Brake: BrakePolicy{Breaker: b},
		Load:  LoadPolicy{MaxInFlight: 8, RateLimit: 1e6},
		Scope: ScopePolicy{Max: 4, Of: func(r *http.Request) string { return r.URL.Path }},
	})
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := getStatus(t, client, srv.URL+"/"+string(rune('a'+(g+i)%8)))
				assert.NoError(t, err)
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second) // bounded: stops once the calls have been seen
	seen := 0
	for seen < 50 && time.Now().Before(deadline) {
		for _, s := range tr.Snapshot() {
			seen++
			assert.NotEmpty(t, s.Scope)
			assert.NotNil(t, s.Bulkhead)
		}
	}
	close(stop)
	wg.Wait()
	assert.Positive(t, seen, "the scopes of the calls running")
}

// A scope the Breaker forgot (past its MaxScopes) has a Breaker, but no
// state there: empty, not nil as without a Breaker.
func TestSnapshotTellsAScopeTheBreakerForgot(t *testing.T) {
	srv := newSettableServer(t, http.StatusOK)
	b, err := breaker.New(breaker.Settings{MaxScopes: 1})
	require.NoError(t, err)
	tr := newTransport(t, nil, &Transport{Brake: BrakePolicy{Breaker: b},
		Scope: ScopePolicy{Of: func(r *http.Request) string { return r.URL.Path }}})
	client := &http.Client{Transport: tr}
	for _, path := range []string{"/a", "/b"} {
		_, err := getStatus(t, client, srv.URL+path)
		require.NoError(t, err)
	}
	got := tr.Snapshot()
	require.Len(t, got, 2)
	assert.Equal(t, "/a", got[0].Scope)
	assert.NotNil(t, got[0].Breaker, "/a has a Breaker")
	assert.Empty(t, got[0].Breaker, "the Breaker of one scope forgot /a for /b")
	require.Len(t, got[1].Breaker, 1)
	assert.Equal(t, breaker.Closed, got[1].Breaker[0].To)
}

// A Breaker alone keeps no count of attempts (Bulkhead nil); beside
// SlowStart, whose ramp bounds them, it does.
func TestSnapshotShowsABulkheadForABreakerOnlyWithSlowStart(t *testing.T) {
	srv := newSettableServer(t, http.StatusOK)
	for _, slowStart := range []time.Duration{0, time.Second} {
		b, err := breaker.New(breaker.Settings{})
		require.NoError(t, err)
		tr := newTransport(t, nil, &Transport{Brake: BrakePolicy{Breaker: b}, Load: LoadPolicy{SlowStart: slowStart}})
		_, err = getStatus(t, &http.Client{Transport: tr}, srv.URL)
		require.NoError(t, err)
		got := tr.Snapshot()
		require.Len(t, got, 1)
		if slowStart == 0 {
			assert.Nil(t, got[0].Bulkhead, "a Breaker alone")
		} else {
			assert.Equal(t, &BulkheadState{}, got[0].Bulkhead, "a Breaker with SlowStart, no ramp yet: nothing bounds the attempts")
		}
	}
}
