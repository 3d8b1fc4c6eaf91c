package breaker

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/internal/sentinel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Breaker's settings changed while traffic flows, under a version: no
// scope loses its state, every later transition, refusal and event names
// the version in force, and settings that are refused leave the old ones in
// force. Its scopes read as they stand.

// fail and succeed make one request of scope on b at the clock's time.
func fail(t *testing.T, b *Breaker, c *fakeClock, scope string) (Change, error) {
	t.Helper()
	tk, change, err := b.Allow(scope, c.Now())
	if err != nil {
		return change, err
	}
	if done := tk.Done(Failure, errors.New("503"), c.Now()); done.To != 0 {
		change = done
	}
	return change, nil
}

func succeed(t *testing.T, b *Breaker, c *fakeClock, scope string) (Change, error) {
	t.Helper()
	tk, change, err := b.Allow(scope, c.Now())
	if err != nil {
		return change, err
	}
	if done := tk.Done(Success, nil, c.Now()); done.To != 0 {
		change = done
	}
	return change, nil
}

// snapshotOf returns the snapshot of scope, failing the test without one.
func snapshotOf(t *testing.T, b *Breaker, scope string) Change {
	t.Helper()
	for _, s := range b.Snapshot() {
		if s.Scope == scope {
			return s
		}
	}
	t.Fatalf("no snapshot of scope %q in %+v", scope, b.Snapshot())
	return Change{}
}

func TestBreakerUpdateCarriesClosedCountsOver(t *testing.T) {
	t.Run("raised: the failures so far count toward the new threshold", func(t *testing.T) {
		b, c := newTestBreaker(t, Settings{FailureThreshold: 3})
		for range 2 {
			_, _ = fail(t, b, c, "api")
		}
		_, err := b.Update(Settings{FailureThreshold: 5})
		require.NoError(t, err)
		got := snapshotOf(t, b, "api")
		assert.Equal(t, 2, got.Failures)
		assert.Equal(t, 2, got.Observed)
		for i := 3; i <= 4; i++ {
			change, _ := fail(t, b, c, "api")
			assert.NotEqual(t, Open, change.To, "failure %d of 5", i)
		}
		change, _ := fail(t, b, c, "api")
		assert.Equal(t, Open, change.To, "the fifth failure")
		assert.Equal(t, uint64(2), change.Settings.Version)
	})
	t.Run("lowered: the settings alone move nothing, the next failure opens", func(t *testing.T) {
		b, c := newTestBreaker(t, Settings{FailureThreshold: 5})
		for range 4 {
			_, _ = fail(t, b, c, "api")
		}
		_, err := b.Update(Settings{FailureThreshold: 3})
		require.NoError(t, err)
		assert.Equal(t, Closed, snapshotOf(t, b, "api").To, "right after the update")
		change, _ := fail(t, b, c, "api")
		assert.Equal(t, Open, change.To)
	})
	t.Run("a ticket out before the update still counts", func(t *testing.T) {
		b, c := newTestBreaker(t, Settings{FailureThreshold: 2})
		_, _ = fail(t, b, c, "api")
		held, _, err := b.Allow("api", c.Now())
		require.NoError(t, err)
		_, err = b.Update(Settings{FailureThreshold: 2, OpenTimeout: time.Minute})
		require.NoError(t, err)
		assert.Equal(t, Open, held.Done(Failure, nil, c.Now()).To)
	})
}

func TestBreakerUpdateWhileHalfOpen(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 1, OpenTimeout: time.Second, MaxProbes: 1, ProbeSuccesses: 3})
	_, _ = fail(t, b, c, "api")
	c.Advance(time.Second)
	_, _ = succeed(t, b, c, "api") // half-open, one success of 3
	first, _, err := b.Allow("api", c.Now())
	require.NoError(t, err)
	_, _, err = b.Allow("api", c.Now())
	require.ErrorIs(t, err, ErrOpen, "a second probe beside the first, with MaxProbes 1")

	_, err = b.Update(Settings{FailureThreshold: 1, OpenTimeout: time.Second, MaxProbes: 2, ProbeSuccesses: 2})
	require.NoError(t, err)
	got := snapshotOf(t, b, "api")
	assert.Equal(t, HalfOpen, got.To)
	assert.Equal(t, 1, got.Successes)
	assert.Equal(t, 1, got.Probes)
	second, change, err := b.Allow("api", c.Now())
	require.NoError(t, err, "a second probe, with MaxProbes 2")
	assert.Equal(t, HalfOpen, change.From, "the settings event")
	assert.Equal(t, HalfOpen, change.To)
	assert.Equal(t, Change{}, second.Done(Ignore, nil, c.Now()))
	// The probe out before the update still counts; with the success
	// before it, it makes the 2 successes now asked.
	closed := first.Done(Success, nil, c.Now())
	assert.Equal(t, Closed, closed.To)
	assert.Equal(t, uint64(2), closed.Settings.Version)
}

func TestBreakerUpdateRefusalsKeepTheSettingsInForce(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 3, Version: 7})
	for range 3 {
		_, _ = fail(t, b, c, "api")
	}
	inForce := b.settings()
	require.Equal(t, uint64(7), inForce.Version, "the version set by the user")
	for _, tt := range []struct {
		name string
		set  Settings
		says []string
	}{
		{"a version that goes backwards", Settings{FailureThreshold: 5, Version: 6},
			[]string{"breaker.Settings.Version 6", "goes backwards", "above 7", "version 7 stay in force"}},
		{"another setting under the version in force", Settings{FailureThreshold: 5, Version: 7},
			[]string{"breaker.Settings.Version 7", "names other settings", "version 7 stay in force"}},
		{"an invalid setting", Settings{FailureThreshold: -1, Version: 8},
			[]string{"breaker.Settings.FailureThreshold", "must not be negative", "version 7 stay in force"}},
		{"an invalid setting without a version", Settings{OpenTimeout: -time.Second},
			[]string{"breaker.Settings.OpenTimeout", "version 7 stay in force"}},
	} {
		got, err := b.Update(tt.set)
		if !errors.Is(err, sentinel.ErrInvalidPolicy) {
			t.Errorf("%s: error %v, want one wrapping sentinel.ErrInvalidPolicy", tt.name, err)
			continue
		}
		for _, s := range tt.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not say %q", tt.name, err, s)
			}
		}
		if got != inForce || b.settings() != inForce {
			t.Errorf("%s: settings returned %+v, in force %+v; want %+v kept", tt.name, got, b.settings(), inForce)
		}
	}
	_, _, err := b.Allow("api", c.Now())
	var coe *OpenError
	if !errors.As(err, &coe) || coe.Version != 7 {
		t.Errorf("after the refusals: %v, want the scope open under version 7", err)
	}

	// The settings in force, given again, change nothing and make no new
	// version: with their version, or without one.
	for _, again := range []Settings{{FailureThreshold: 3, Version: 7}, {FailureThreshold: 3}} {
		got, err := b.Update(again)
		if err != nil || got != inForce {
			t.Errorf("Update(%+v) = %+v, %v; want %+v, nil", again, got, err, inForce)
		}
	}
	// A version that jumps ahead is the user's to choose.
	got, err := b.Update(Settings{FailureThreshold: 4, Version: 20})
	if err != nil || got.Version != 20 {
		t.Errorf("Update to version 20 = %+v, %v", got, err)
	}
}

func TestBreakerUpdateOfTheZeroBreaker(t *testing.T) {
	var b Breaker
	got, err := b.Update(Settings{FailureThreshold: 2})
	require.NoError(t, err)
	assert.Equal(t, uint64(2), got.Version, "after the defaults' version 1")
	assert.Equal(t, 2, got.FailureThreshold)
	assert.Empty(t, b.Snapshot())
}

func TestBreakerUpdateLoweringMaxScopesForgetsClosedScopesOnly(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 1, MaxScopes: 10})
	for i := range 6 {
		scope := fmt.Sprint("s", i)
		if i < 2 {
			_, _ = fail(t, b, c, scope) // open
		} else {
			_, _ = succeed(t, b, c, scope)
		}
	}
	_, err := b.Update(Settings{FailureThreshold: 1, MaxScopes: 3})
	require.NoError(t, err)
	var got []string
	for _, s := range b.Snapshot() {
		got = append(got, s.Scope+"="+s.To.String())
	}
	assert.Equal(t, []string{"s0=open", "s1=open", "s5=closed"}, got, "the open scopes, and the closed one used last")
}

func TestBreakerSnapshotDescribesEachScope(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 2, OpenTimeout: time.Minute, ProbeSuccesses: 2, MaxProbes: 2})
	firstSeen := c.Now()
	_, _ = fail(t, b, c, "closed")
	_, _ = succeed(t, b, c, "closed")
	_, _ = fail(t, b, c, "closed")
	held, _, _ := b.Allow("closed", c.Now())

	c.Advance(time.Second)
	opened := c.Now()
	_, _ = fail(t, b, c, "open")
	_, _ = fail(t, b, c, "open")
	_, _ = fail(t, b, c, "half")
	_, _ = fail(t, b, c, "half")
	c.Advance(time.Minute)
	_, _ = succeed(t, b, c, "half")
	probe, _, _ := b.Allow("half", c.Now())

	set := b.settings()
	snaps := b.Snapshot()
	require.Len(t, snaps, 3)
	assert.Equal(t, Change{Scope: "closed", To: Closed, At: firstSeen, Settings: set,
		Failures: 1, Observed: 3, InFlight: 1}, snaps[0])
	assert.Equal(t, Change{Scope: "half", From: Open, To: HalfOpen, At: c.Now(), Settings: set,
		Successes: 1, Probes: 1, InFlight: 1}, snaps[1])
	open := snaps[2]
	assert.Equal(t, "open", open.Scope)
	assert.Equal(t, Closed, open.From)
	assert.Equal(t, Open, open.To, "open past its OpenTimeout, until a request probes it")
	assert.Equal(t, opened, open.At)
	assert.EqualError(t, open.Cause, "503")
	held.Done(Ignore, nil, c.Now())
	probe.Done(Ignore, nil, c.Now())
}

// The snapshot, the updates and the traffic at once: run with -race.
func TestBreakerSnapshotAndUpdateUnderTraffic(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 3, OpenTimeout: time.Millisecond})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			scope := fmt.Sprint("scope-", w%2)
			for i := range 500 {
				if i%3 == 0 {
					_, _ = succeed(t, b, c, scope)
				} else {
					_, _ = fail(t, b, c, scope)
				}
				c.Advance(time.Millisecond)
			}
		})
	}
	versions := make(chan uint64, 1)
	wg.Go(func() {
		var last uint64
		for i := range 50 {
			set, err := b.Update(Settings{FailureThreshold: 3 + i%3, OpenTimeout: time.Millisecond})
			if err != nil || set.Version < last {
				t.Errorf("Update %d: %+v, %v after version %d", i, set, err, last)
			}
			last = set.Version
		}
		versions <- last
	})
	for range 100 {
		for _, s := range b.Snapshot() {
			if s.Settings.Version == 0 || s.To == 0 {
				t.Fatalf("snapshot %+v", s)
			}
		}
	}
	wg.Wait()
	last := <-versions
	for _, s := range b.Snapshot() {
		assert.Equal(t, last, s.Settings.Version)
	}
}
