package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBreakerThresholdRaisedWhileOpenSendsNothingUntilTheProbe(t *testing.T) {
	const openTimeout = 30 * time.Second
	srv := newSettableServer(t, http.StatusServiceUnavailable)
	scope := scopeOf(t, srv.Server)
	clock := newFakeClockAt(fixedStart)
	tr, b, rec := newBreakerTransport(t, clock, breaker.Settings{FailureThreshold: 3, OpenTimeout: openTimeout})
	client := &http.Client{Transport: tr}
	for range 3 {
		_, err := getStatus(t, client, srv.URL)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"closed>open"}, rec.take())
	require.Equal(t, int64(3), srv.requests.Load())

	clock.Advance(10 * time.Second)
	set, err := b.Update(breaker.Settings{FailureThreshold: 5, OpenTimeout: openTimeout})
	require.NoError(t, err)
	require.Equal(t, uint64(2), set.Version, "the version after 1, given by Update")
	require.Equal(t, 5, set.FailureThreshold)

	// Still open: refused without sending, the refusal under version 2.
	for i := range 4 {
		_, err := getStatus(t, client, srv.URL)
		var coe *breaker.OpenError
		require.ErrorAs(t, err, &coe, "call %d while open", i)
		assert.Equal(t, uint64(2), coe.Version)
		assert.Equal(t, fixedStart, coe.OpenedAt, "the opening kept")
		assert.Equal(t, fixedStart.Add(openTimeout), coe.ProbeAt)
	}
	assert.Equal(t, int64(3), srv.requests.Load(), "requests to the dependency while open")
	changes := rec.all()
	require.Len(t, changes, 1, "one settings event for the scope, on its first request under them")
	assert.Equal(t, breaker.Change{Scope: scope, From: breaker.Open, To: breaker.Open, At: clock.Now(), Cause: changes[0].Cause, Settings: set}, changes[0])
	rec.take()

	// The probe, at the time set when the scope opened: it fails, and the
	// transitions carry the new version.
	clock.Advance(openTimeout - 10*time.Second)
	_, err = getStatus(t, client, srv.URL)
	require.NoError(t, err)
	assert.Equal(t, int64(4), srv.requests.Load(), "the probe")
	for _, c := range rec.all() {
		assert.Equal(t, uint64(2), c.Settings.Version, "%v>%v", c.From, c.To)
	}
	assert.Equal(t, []string{"open>half_open", "half_open>open"}, rec.take())
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
	tr, b, rec := newBreakerTransport(t, clock, breaker.Settings{FailureThreshold: threshold, OpenTimeout: time.Second})
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
	assert.Equal(t, breaker.Closed, s.To)
	assert.Zero(t, s.InFlight)
}
