package breaker

import (
	"errors"
	"sync"
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
	b, clk := newTestBreaker(t, Settings{FailureThreshold: 1000})
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range calls {
				tk, _, err := b.Allow("api", clk.Now())
				if err != nil {
					t.Errorf("allow: %v", err)
					return
				}
				o := Success
				if (i+g)%97 == 0 {
					o = Failure
				}
				tk.Done(o, errors.New("503"), clk.Now())
			}
		})
	}
	wg.Wait()
	s := snapshotOf(t, b, "api")
	assert.Equal(t, Closed, s.To)
	assert.Equal(t, callers*calls, s.Observed, "Observed: every outcome once")
	assert.Zero(t, s.InFlight, "InFlight: every ticket came back")
}

// TestBreakerMoreTicketsOutThanQuickSlots holds more tickets of one scope
// than the path without the lock has slots: the rest are issued under
// the lock, all are counted in flight, and each counts its outcome once.
func TestBreakerMoreTicketsOutThanQuickSlots(t *testing.T) {
	const n = 3 * quickSlots
	b, clk := newTestBreaker(t, Settings{FailureThreshold: 2})
	var held []Ticket
	for range n {
		tk, _, err := b.Allow("api", clk.Now())
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
		tk.Done(Success, nil, clk.Now())
		tk.Done(Success, nil, clk.Now()) // a second done counts nothing
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
	b, clk := newTestBreaker(t, Settings{FailureThreshold: 1, OpenTimeout: time.Second})
	first, _, _ := b.Allow("api", clk.Now()) // a new scope: under the lock
	first.Done(Success, nil, clk.Now())
	late, _, _ := b.Allow("api", clk.Now())
	require.True(t, late.quick, "a closed scope's ticket is issued without the lock")
	tk, _, _ := b.Allow("api", clk.Now())
	tk.Done(Failure, errors.New("503"), clk.Now()) // opens
	clk.Advance(time.Second)
	probe, _, err := b.Allow("api", clk.Now())
	require.NoError(t, err)
	probe.Done(Success, nil, clk.Now()) // closes
	require.Equal(t, Closed, b.StateAt("api", clk.Now()))

	late.Done(Success, nil, clk.Now())
	assert.Zero(t, snapshotOf(t, b, "api").Observed, "Observed after a late success of the first closed period")
	assert.Zero(t, snapshotOf(t, b, "api").InFlight)
}

// TestBreakerFailureAfterQuickSuccessesOpensOnItsThreshold: successes
// counted without the lock take part in MinObservations, and a success
// forgets the failures before it, as under the lock.
func TestBreakerFailureAfterQuickSuccessesOpensOnItsThreshold(t *testing.T) {
	b, clk := newTestBreaker(t, Settings{FailureThreshold: 2, MinObservations: 5})
	outcome := func(o Outcome) Change {
		tk, _, err := b.Allow("api", clk.Now())
		require.NoError(t, err)
		return tk.Done(o, errors.New("503"), clk.Now())
	}
	outcome(Success)
	outcome(Success)
	outcome(Failure)
	outcome(Success) // forgets the failure
	assert.Zero(t, outcome(Failure).To, "1 consecutive failure, 5 outcomes")
	assert.Equal(t, Open, outcome(Failure).To, "2 consecutive failures, 6 outcomes")
}

// TestBreakerEvictsTheScopeNotUsedSinceWhateverARaceLeft: two scopes
// touched at once may leave the one used last with an older number than
// the other (last stored by one, the newest number taken by the other).
// The next use of the first numbers it anew, so that a new scope evicts
// the one not used since.
func TestBreakerEvictsTheScopeNotUsedSinceWhateverARaceLeft(t *testing.T) {
	b, clk := newTestBreaker(t, Settings{MaxScopes: 2})
	use := func(scope string) {
		tk, _, err := b.Allow(scope, clk.Now())
		require.NoError(t, err)
		tk.Done(Success, nil, clk.Now())
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
