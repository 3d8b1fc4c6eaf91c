package budget

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/internal/sentinel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRatioBudgetSteps(t *testing.T) {
	noReserve := RatioConfig{Ratio: 0.5, MinPerSecond: -1, Window: 10 * time.Second}
	tests := []struct {
		name  string
		cfg   RatioConfig
		steps []step
	}{
		{"deposits expire after Window", noReserve, []step{
			recordStep(0, 0.5), recordStep(0, 1), recordStep(0, 1.5), recordStep(0, 2),
			recordStep(5*time.Second, 2.5), recordStep(5*time.Second, 3),
			recordStep(9999*time.Millisecond, 3.5),
			// The buckets of 0s expire at 10s; those of 5s and 9.999s at 15s and 19s.
			recordStep(10*time.Second, 2),
			recordStep(15*time.Second, 1.5),
			recordStep(19*time.Second, 1.5), // the 9.999s deposit went, this one came
			recordStep(40*time.Second, 0.5),
		}},
		{"withdrawals expire after Window", noReserve, []step{
			recordStep(0, 0.5), recordStep(0, 1), recordStep(0, 1.5), recordStep(0, 2),
			allow(0, true, 1), allow(0, true, 0), allow(0, false, 0),
			recordStep(time.Second, 0.5), recordStep(time.Second, 1), allow(time.Second, true, 0),
			// At 10s both the deposits and the withdrawals of 0s are gone.
			allow(10*time.Second, false, 0),
			recordStep(10*time.Second, 0.5), allow(10*time.Second, false, 0.5),
			recordStep(10*time.Second, 1), allow(10*time.Second, true, 0),
		}},
		{"floor lets a lone request retry", RatioConfig{}, []step{
			recordStep(0, 10.1), allow(0, true, 9.1), allow(0, true, 8.1),
		}},
		{"reserve renews each window", RatioConfig{Ratio: 0.1, MinPerSecond: 0.2, Window: 10 * time.Second}, []step{
			allow(0, true, 1), allow(0, true, 0), allow(time.Second, false, 0),
			allow(10*time.Second, true, 1),
		}},
		{"no reserve: a lone request cannot retry", RatioConfig{MinPerSecond: -1}, []step{
			recordStep(0, 0.1), allow(0, false, 0.1),
			recordStep(0, 0.2), recordStep(0, 0.3), recordStep(0, 0.4), recordStep(0, 0.5),
			recordStep(0, 0.6), recordStep(0, 0.7), recordStep(0, 0.8), recordStep(0, 0.9),
			recordStep(0, 1), allow(0, true, 0), allow(0, false, 0),
		}},
		{"time going backwards counts as no time passed", noReserve, []step{
			recordStep(10*time.Second, 0.5), recordStep(10*time.Second, 1),
			// Recorded in the newest bucket (10s), so it lives until 20s.
			recordStep(5*time.Second, 1.5),
			recordStep(15*time.Second, 2),
			recordStep(20*time.Second, 1),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewRatio(tt.cfg)
			require.NoError(t, err)
			runSteps(t, b, tt.steps)
		})
	}
}

// TestRetryStorm pins the promise of the defaults: 100 callers whose first
// attempts fail at the same instant, each wanting up to 2 retries, send at
// most 120 attempts in all (1.2 per caller). A caller stops at its first
// refused retry, as the transport does.
func TestRetryStorm(t *testing.T) {
	ratio := func() stepper { b, _ := NewRatio(RatioConfig{}); return b }
	bucket := func() stepper { b, _ := NewTokenBucket(TokenBucketConfig{}); return b }
	backoff := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond}
	tests := []struct {
		name     string
		budget   func() stepper
		callers  int
		schedule string
		want     int  // attempts, firsts included
		atMost   bool // want is a bound, not the exact count
	}{
		{"ratio: all record, then all retry", ratio, 100, "phased", 120, false},
		{"ratio: each records and retries in turn", ratio, 100, "serial", 120, false},
		{"ratio: concurrent callers", ratio, 100, "concurrent", 120, true},
		{"ratio: 1000 concurrent callers", ratio, 1000, "concurrent", 1000 + 100 + 10, true},
		{"bucket: all record, then all retry", bucket, 100, "phased", 110, false},
		{"bucket: concurrent callers", bucket, 100, "concurrent", 110, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.budget()
			retry := func() int { // one caller's retries after its failed first attempt
				n := 0
				for _, d := range backoff {
					if !b.AllowRetryAt(t0.Add(d)) {
						break
					}
					n++
				}
				return n
			}
			granted := 0
			switch tt.schedule {
			case "phased":
				for range tt.callers {
					b.RecordRequestAt(t0)
				}
				for range tt.callers {
					granted += retry()
				}
			case "serial":
				for range tt.callers {
					b.RecordRequestAt(t0)
					granted += retry()
				}
			case "concurrent":
				var wg sync.WaitGroup
				var mu sync.Mutex
				for range tt.callers {
					wg.Go(func() {
						b.RecordRequestAt(t0)
						n := retry()
						mu.Lock()
						granted += n
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			got := tt.callers + granted
			if tt.atMost {
				assert.LessOrEqual(t, got, tt.want, "attempts: got %d, want at most %d", got, tt.want)
			} else {
				assert.Equal(t, tt.want, got, "attempts: got %d, want %d", got, tt.want)
			}
			s := b.SnapshotAt(t0)
			assert.Equal(t, uint64(granted), s.Retries, "Retries: got %d, want %d", s.Retries, granted)
			assert.Equal(t, uint64(tt.callers), s.Requests, "Requests: got %d, want %d", s.Requests, tt.callers)
		})
	}
}

func TestRatioBudgetConcurrent(t *testing.T) {
	const (
		goroutines = 16
		calls      = 500
	)
	b, err := NewRatio(RatioConfig{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				// Times a little out of order, as when callers read the clock
				// before contending for the lock.
				now := t0.Add(time.Duration(i+g) * time.Microsecond)
				b.RecordRequestAt(now)
				b.AllowRetryAt(now)
			}
		})
	}
	wg.Wait()
	// Take what balance is left, so that the bound is reached exactly.
	drained := 0
	for b.AllowRetryAt(t0) {
		drained++
	}
	s := b.SnapshotAt(t0)
	const n = goroutines * calls
	assert.Equal(t, uint64(n), s.Requests, "Requests: got %d, want %d", s.Requests, n)
	allCalls := uint64(n + drained + 1)
	assert.Equal(t, allCalls, s.Retries+s.Refused, "Retries+Refused: got %d, want %d", s.Retries+s.Refused, allCalls)
	// Everything happened within one window: 0.1·requests + reserve.
	wantRetries := uint64(0.1*n + 10)
	assert.Equal(t, wantRetries, s.Retries, "Retries: got %d, want %d (0.1·requests + reserve)", s.Retries, wantRetries)
	assert.Zero(t, s.Available, "Available: got %v, want 0", s.Available)
}

// TestRatioBudgetCountsEveryDepositAcrossBuckets has callers deposit
// concurrently while their times cross buckets and retries are asked for:
// deposits made without the lock and those made under it are all counted,
// the window's bound holds exactly, and when the window has passed nothing
// is left of them.
func TestRatioBudgetCountsEveryDepositAcrossBuckets(t *testing.T) {
	const (
		goroutines = 8
		calls      = 3000
	)
	b, err := NewRatio(RatioConfig{})
	require.NoError(t, err)
	b.RecordRequestAt(t0) // the buckets count from t0
	var wg sync.WaitGroup
	var granted atomic.Int64
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				// Three buckets (a second each) within one window, each
				// goroutine's times a little out of step with the others'.
				now := t0.Add(time.Duration(i)*time.Millisecond + time.Duration(g)*3*time.Millisecond)
				b.RecordRequestAt(now)
				if i%50 == 0 && b.AllowRetryAt(now) {
					granted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	end := t0.Add(3 * time.Second)
	for b.AllowRetryAt(end) {
		granted.Add(1)
	}
	const n = goroutines*calls + 1
	s := b.SnapshotAt(end)
	assert.Equal(t, uint64(n), s.Requests, "Requests: got %d, want %d", s.Requests, n)
	assert.Equal(t, uint64(granted.Load()), s.Retries, "Retries: got %d, want %d", s.Retries, granted.Load())
	// Everything happened within one window: 0.1·requests + reserve.
	want := int64(math.Floor(0.1*n + 10))
	require.Equal(t, want, granted.Load(), "granted: got %d, want %d (0.1·requests + reserve)", granted.Load(), want)
	// A window after the last bucket began, every deposit and withdrawal is
	// gone: the reserve alone is left.
	later := b.SnapshotAt(t0.Add(13 * time.Second)) // the last bucket began at 3s
	assert.InDelta(t, 10.0, later.Available, 1e-9, "Available a window later: got %v, want the reserve, 10", later.Available)
	assert.Equal(t, uint64(n), later.Requests, "Requests a window later: got %d, want %d", later.Requests, n)
}

func TestNewRatioBudgetConfig(t *testing.T) {
	tests := []struct {
		name  string
		cfg   RatioConfig
		field string // "" for a valid config
	}{
		{"zero config gives defaults", RatioConfig{}, ""},
		{"negative MinPerSecond means no reserve", RatioConfig{MinPerSecond: -1}, ""},
		{"shortest Window", RatioConfig{Window: 10 * time.Nanosecond}, ""},
		{"negative Ratio", RatioConfig{Ratio: -0.1}, "Ratio"},
		{"NaN Ratio", RatioConfig{Ratio: math.NaN()}, "Ratio"},
		{"infinite Ratio", RatioConfig{Ratio: math.Inf(1)}, "Ratio"},
		{"NaN MinPerSecond", RatioConfig{MinPerSecond: math.NaN()}, "MinPerSecond"},
		{"infinite MinPerSecond", RatioConfig{MinPerSecond: math.Inf(1)}, "MinPerSecond"},
		{"minus infinite MinPerSecond", RatioConfig{MinPerSecond: math.Inf(-1)}, "MinPerSecond"},
		{"negative Window", RatioConfig{Window: -time.Second}, "Window"},
		{"Window shorter than its buckets", RatioConfig{Window: 9 * time.Nanosecond}, "Window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewRatio(tt.cfg)
			if tt.field != "" {
				assert.Nil(t, b, "budget: got %v, want nil", b)
				assert.True(t, errors.Is(err, sentinel.ErrInvalidPolicy), "error: got %v, want one wrapping sentinel.ErrInvalidPolicy", err)
				assert.ErrorContains(t, err, tt.field, "error: got %v, want it to name %s", err, tt.field)
				return
			}
			require.NoError(t, err)
		})
	}
	b, err := NewRatio(RatioConfig{})
	require.NoError(t, err)
	assert.Equal(t, 0.1, b.ratio, "default Ratio: got %v, want 0.1", b.ratio)
	assert.Equal(t, 10.0, b.reserve, "default reserve: got %v, want 10 (1/s over 10s)", b.reserve)
	assert.Equal(t, time.Second, b.width, "default bucket width: got %v, want 1s (10s / 10)", b.width)
	b, err = NewRatio(RatioConfig{MinPerSecond: -1})
	require.NoError(t, err)
	assert.Zero(t, b.reserve, "reserve with negative MinPerSecond: got %v, want 0", b.reserve)
}
