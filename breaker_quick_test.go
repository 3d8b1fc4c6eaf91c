package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBreakerCountsEveryOutcomeOfConcurrentCallers has callers on every
// core take tickets of one closed scope and report successes, the path
// that takes no lock, with a failure now and then, which takes it: every
// outcome is counted once, every ticket comes back, and the failures,
// never consecutive enough, do not open it.
func TestBreakerCountsEveryOutcomeOfConcurrentCallers(t *testing.T) {
	const callers, calls = 8, 2000
	b, clk := newTestBreaker(t, BreakerSettings{FailureThreshold: 1000})
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range calls {
				tk, _, err := b.allow("api", clk.Now())
				if err != nil {
					t.Errorf("allow: %v", err)
					return
				}
				o := observeSuccess
				if (i+g)%97 == 0 {
					o = observeFailure
				}
				tk.done(o, errors.New("503"), clk.Now())
			}
		})
	}
	wg.Wait()
	s := snapshotOf(t, b, "api")
	assert.Equal(t, BreakerClosed, s.To)
	assert.Equal(t, callers*calls, s.Observed, "Observed: every outcome once")
	assert.Zero(t, s.InFlight, "InFlight: every ticket came back")
}

// TestBreakerMoreTicketsOutThanQuickSlots holds more tickets of one scope
// than the path without the lock has slots: the rest are issued under
// the lock, all are counted in flight, and each counts its outcome once.
func TestBreakerMoreTicketsOutThanQuickSlots(t *testing.T) {
	const n = 3 * quickSlots
	b, clk := newTestBreaker(t, BreakerSettings{FailureThreshold: 2})
	var held []breakerTicket
	for range n {
		tk, _, err := b.allow("api", clk.Now())
		require.NoError(t, err)
		held = append(held, tk)
	}
	quick := 0
	for _, tk := range held {
		if tk.quick {
			quick++
		}
	}
	assert.Equal(t, quickSlots, quick, "tickets issued without the lock")
	assert.Equal(t, n, snapshotOf(t, b, "api").InFlight)
	for _, tk := range held {
		tk.done(observeSuccess, nil, clk.Now())
		tk.done(observeSuccess, nil, clk.Now()) // a second done counts nothing
	}
	s := snapshotOf(t, b, "api")
	assert.Equal(t, n, s.Observed, "Observed: each ticket's outcome once")
	assert.Zero(t, s.InFlight)
}

// TestBreakerQuickTicketOfAnOlderStateCountsNothing: a ticket issued
// without the lock while the scope was closed, whose success arrives after
// the scope opened and closed again, is not counted in the new closed
// period.
func TestBreakerQuickTicketOfAnOlderStateCountsNothing(t *testing.T) {
	b, clk := newTestBreaker(t, BreakerSettings{FailureThreshold: 1, OpenTimeout: time.Second})
	first, _, _ := b.allow("api", clk.Now()) // a new scope: under the lock
	first.done(observeSuccess, nil, clk.Now())
	late, _, _ := b.allow("api", clk.Now())
	require.True(t, late.quick, "a closed scope's ticket is issued without the lock")
	tk, _, _ := b.allow("api", clk.Now())
	tk.done(observeFailure, errors.New("503"), clk.Now()) // opens
	clk.Advance(time.Second)
	probe, _, err := b.allow("api", clk.Now())
	require.NoError(t, err)
	probe.done(observeSuccess, nil, clk.Now()) // closes
	require.Equal(t, BreakerClosed, b.stateAt("api", clk.Now()))

	late.done(observeSuccess, nil, clk.Now())
	assert.Zero(t, snapshotOf(t, b, "api").Observed, "Observed after a late success of the first closed period")
	assert.Zero(t, snapshotOf(t, b, "api").InFlight)
}

// TestBreakerFailureAfterQuickSuccessesOpensOnItsThreshold: successes
// counted without the lock take part in MinObservations, and a success
// forgets the failures before it, as under the lock.
func TestBreakerFailureAfterQuickSuccessesOpensOnItsThreshold(t *testing.T) {
	b, clk := newTestBreaker(t, BreakerSettings{FailureThreshold: 2, MinObservations: 5})
	outcome := func(o observation) BreakerChangeInfo {
		tk, _, err := b.allow("api", clk.Now())
		require.NoError(t, err)
		return tk.done(o, errors.New("503"), clk.Now())
	}
	outcome(observeSuccess)
	outcome(observeSuccess)
	outcome(observeFailure)
	outcome(observeSuccess) // forgets the failure
	assert.Zero(t, outcome(observeFailure).To, "1 consecutive failure, 5 outcomes")
	assert.Equal(t, BreakerOpen, outcome(observeFailure).To, "2 consecutive failures, 6 outcomes")
}

// TestBreakerEvictsTheScopeNotUsedSinceWhateverARaceLeft: two scopes
// touched at once may leave the one used last with an older number than
// the other (last stored by one, the newest number taken by the other).
// The next use of the first numbers it anew, so that a new scope evicts
// the one not used since.
func TestBreakerEvictsTheScopeNotUsedSinceWhateverARaceLeft(t *testing.T) {
	b, clk := newTestBreaker(t, BreakerSettings{MaxScopes: 2})
	use := func(scope string) {
		tk, _, err := b.allow(scope, clk.Now())
		require.NoError(t, err)
		tk.done(observeSuccess, nil, clk.Now())
	}
	use("a")
	use("b")
	// What the race leaves: "b" last, "a" with the newest number.
	b.mu.Lock()
	a, sb := b.scopes["a"], b.scopes["b"]
	b.mu.Unlock()
	b.last.Store(sb)
	a.q.used.Store(b.uses.Add(1))

	use("b")
	use("c")
	assert.Equal(t, []string{"b", "c"}, remembered(b), "after b used last, a new scope evicts a")
}

// TestBreakerTransportConcurrentCallersOpenOnceAndRecover drives a Breaker
// through a Transport from many goroutines at once, against a loopback
// server that answers well, then fails, then recovers: the scope opens
// once, lets through no more than the threshold and the calls already in
// flight, closes once after a single probe (slow start then holds some
// calls back), and every ticket comes back.
func TestBreakerTransportConcurrentCallersOpenOnceAndRecover(t *testing.T) {
	const callers, threshold = 16, 5
	srv := newSettableServer(t, http.StatusOK)
	scope := scopeOf(t, srv.Server)
	clock := newFakeClockAt(fixedStart)
	tr, b, rec := newBreakerTransport(t, clock, BreakerSettings{FailureThreshold: threshold, OpenTimeout: time.Second})
	client := &http.Client{Transport: tr}
	// wave makes calls GETs from each of callers goroutines at once, and
	// returns how many came back 200, 503, refused by the breaker, and held
	// back by slow start's bulkhead.
	wave := func(calls int) (ok, failed, refused, held int64) {
		var nOK, nFailed, nRefused, nHeld atomic.Int64
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for range calls {
					resp, err := client.Get(srv.URL)
					var full *BulkheadFullError
					switch {
					case errors.Is(err, ErrCircuitOpen):
						nRefused.Add(1)
					case errors.As(err, &full):
						nHeld.Add(1)
					case err != nil:
						t.Errorf("GET: %v", err)
						return
					default:
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							nOK.Add(1)
						} else {
							nFailed.Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
		return nOK.Load(), nFailed.Load(), nRefused.Load(), nHeld.Load()
	}

	ok, _, _, _ := wave(40)
	require.Equal(t, int64(callers*40), ok)
	s := snapshotOf(t, b, scope)
	assert.Equal(t, callers*40, s.Observed, "Observed while the server answers well")
	assert.Zero(t, s.InFlight)
	assert.Empty(t, rec.take())

	srv.setStatus(http.StatusServiceUnavailable)
	before := srv.requests.Load()
	_, failed, refused, held := wave(20)
	assert.Equal(t, []string{"closed>open"}, rec.take(), "transitions while the server fails")
	sent := srv.requests.Load() - before
	assert.Equal(t, failed, sent, "every request sent came back 503")
	assert.LessOrEqual(t, sent, int64(threshold+callers-1), "requests sent: the threshold and those already in flight")
	assert.Equal(t, int64(callers*20)-sent, refused, "the rest refused")
	assert.Zero(t, held, "held back by slow start before the scope closed again")
	assert.Zero(t, snapshotOf(t, b, scope).InFlight)

	srv.setStatus(http.StatusOK)
	clock.Advance(time.Second)
	ok, failed, _, _ = wave(10)
	assert.Equal(t, []string{"open>half_open", "half_open>closed"}, rec.take(), "transitions once the server is back")
	assert.Positive(t, ok)
	assert.Zero(t, failed)
	s = snapshotOf(t, b, scope)
	assert.Equal(t, BreakerClosed, s.To)
	assert.Zero(t, s.InFlight)
}
