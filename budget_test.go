package retryfuse

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// step is one call on a budget at t0+at. op is "allow" or "record"; for
// "allow", want is the expected answer. After the call, the budget's
// Snapshot at the same instant must report avail.
type step struct {
	at    time.Duration
	op    string
	want  bool
	avail float64
}

// stepper is what the step tables drive; both budgets implement it.
type stepper interface {
	AllowRetryAt(time.Time) bool
	RecordRequestAt(time.Time)
	Snapshot() BudgetSnapshot
}

func runSteps(t *testing.T, b stepper, setClock func(func() time.Time), steps []step) {
	t.Helper()
	for i, s := range steps {
		now := t0.Add(s.at)
		switch s.op {
		case "allow":
			got := b.AllowRetryAt(now)
			assert.Equal(t, s.want, got, "step %d (allow at %v): got %v, want %v", i, s.at, got, s.want)
		case "record":
			b.RecordRequestAt(now)
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		setClock(func() time.Time { return now })
		got := b.Snapshot().Available
		assert.InDelta(t, s.avail, got, 1e-12, "step %d (%s at %v): Available got %v, want %v", i, s.op, s.at, got, s.avail)
	}
}

func allow(at time.Duration, want bool, avail float64) step {
	return step{at: at, op: "allow", want: want, avail: avail}
}

func record(at time.Duration, avail float64) step {
	return step{at: at, op: "record", avail: avail}
}

func TestTokenBucketSteps(t *testing.T) {
	const year = 365 * 24 * time.Hour
	tests := []struct {
		name  string
		steps []step
	}{
		{"starts full and drains", []step{
			allow(0, true, 2), allow(0, true, 1), allow(0, true, 0), allow(0, false, 0),
		}},
		{"requests add no token", []step{
			allow(0, true, 2), allow(0, true, 1), allow(0, true, 0), record(0, 0), record(0, 0), allow(0, false, 0),
		}},
		{"refills one token per interval", []step{
			allow(0, true, 2), allow(0, true, 1), allow(0, true, 0),
			allow(time.Second, true, 0), allow(time.Second, false, 0),
			allow(3*time.Second, true, 1),
		}},
		{"partial refill accrues continuously", []step{
			allow(0, true, 2), allow(0, true, 1), allow(0, true, 0),
			allow(500*time.Millisecond, false, 0.5),
			allow(750*time.Millisecond, false, 0.75),
			allow(time.Second, true, 0),
		}},
		{"ten tenths make a whole token", []step{
			allow(0, true, 2), allow(0, true, 1), allow(0, true, 0),
			record(100*time.Millisecond, 0.1), record(200*time.Millisecond, 0.2),
			record(300*time.Millisecond, 0.3), record(400*time.Millisecond, 0.4),
			record(500*time.Millisecond, 0.5), record(600*time.Millisecond, 0.6),
			record(700*time.Millisecond, 0.7), record(800*time.Millisecond, 0.8),
			record(900*time.Millisecond, 0.9), allow(time.Second, true, 0),
		}},
		{"refill is capped at capacity", []step{
			allow(0, true, 2), allow(10*time.Second, true, 2),
		}},
		{"long idle does not overflow capacity", []step{
			allow(0, true, 2), allow(0, true, 1), allow(0, true, 0),
			allow(200*year, true, 2), allow(200*year, true, 1), allow(200*year, true, 0), allow(200*year, false, 0),
		}},
		{"time going backwards earns nothing and does not rewind", []step{
			allow(10*time.Second, true, 2), allow(10*time.Second, true, 1), allow(10*time.Second, true, 0),
			allow(5*time.Second, false, 0),
			// Credit counts from 10s, the latest time seen, not from 5s.
			allow(10500*time.Millisecond, false, 0.5),
			allow(11*time.Second, true, 0),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewTokenBucket(TokenBucketConfig{Capacity: 3, Refill: 1, Interval: time.Second})
			require.NoError(t, err)
			runSteps(t, b, func(f func() time.Time) { b.now = f }, tt.steps)
		})
	}
}

func TestTokenBucketConservation(t *testing.T) {
	const (
		capacity   = 50
		goroutines = 16
		calls      = 200
	)
	b, err := NewTokenBucket(TokenBucketConfig{Capacity: capacity, Refill: 1, Interval: time.Second})
	require.NoError(t, err)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted int
	)
	for range goroutines {
		wg.Go(func() {
			n := 0
			for range calls {
				b.RecordRequestAt(t0)
				if b.AllowRetryAt(t0) {
					n++
				}
			}
			mu.Lock()
			granted += n
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, capacity, granted, "granted: got %d, want %d (capacity at a frozen time)", granted, capacity)
	b.now = func() time.Time { return t0 }
	s := b.Snapshot()
	assert.Equal(t, uint64(capacity), s.Retries, "Retries: got %d, want %d", s.Retries, capacity)
	assert.Equal(t, uint64(goroutines*calls), s.Retries+s.Refused, "Retries+Refused: got %d, want %d", s.Retries+s.Refused, goroutines*calls)
	assert.Equal(t, uint64(goroutines*calls), s.Requests, "Requests: got %d, want %d", s.Requests, goroutines*calls)
	assert.Zero(t, s.Available, "Available: got %v, want 0", s.Available)
}

func TestRatioBudgetSteps(t *testing.T) {
	noReserve := RatioBudgetConfig{Ratio: 0.5, MinPerSecond: -1, Window: 10 * time.Second}
	tests := []struct {
		name  string
		cfg   RatioBudgetConfig
		steps []step
	}{
		{"deposits expire after Window", noReserve, []step{
			record(0, 0.5), record(0, 1), record(0, 1.5), record(0, 2),
			record(5*time.Second, 2.5), record(5*time.Second, 3),
			record(9999*time.Millisecond, 3.5),
			// The buckets of 0s expire at 10s; those of 5s and 9.999s at 15s and 19s.
			record(10*time.Second, 2),
			record(15*time.Second, 1.5),
			record(19*time.Second, 1.5), // the 9.999s deposit went, this one came
			record(40*time.Second, 0.5),
		}},
		{"withdrawals expire after Window", noReserve, []step{
			record(0, 0.5), record(0, 1), record(0, 1.5), record(0, 2),
			allow(0, true, 1), allow(0, true, 0), allow(0, false, 0),
			record(time.Second, 0.5), record(time.Second, 1), allow(time.Second, true, 0),
			// At 10s both the deposits and the withdrawals of 0s are gone.
			allow(10*time.Second, false, 0),
			record(10*time.Second, 0.5), allow(10*time.Second, false, 0.5),
			record(10*time.Second, 1), allow(10*time.Second, true, 0),
		}},
		{"floor lets a lone request retry", RatioBudgetConfig{}, []step{
			record(0, 10.1), allow(0, true, 9.1), allow(0, true, 8.1),
		}},
		{"reserve renews each window", RatioBudgetConfig{Ratio: 0.1, MinPerSecond: 0.2, Window: 10 * time.Second}, []step{
			allow(0, true, 1), allow(0, true, 0), allow(time.Second, false, 0),
			allow(10*time.Second, true, 1),
		}},
		{"no reserve: a lone request cannot retry", RatioBudgetConfig{MinPerSecond: -1}, []step{
			record(0, 0.1), allow(0, false, 0.1),
			record(0, 0.2), record(0, 0.3), record(0, 0.4), record(0, 0.5),
			record(0, 0.6), record(0, 0.7), record(0, 0.8), record(0, 0.9),
			record(0, 1), allow(0, true, 0), allow(0, false, 0),
		}},
		{"time going backwards counts as no time passed", noReserve, []step{
			record(10*time.Second, 0.5), record(10*time.Second, 1),
			// Recorded in the newest bucket (10s), so it lives until 20s.
			record(5*time.Second, 1.5),
			record(15*time.Second, 2),
			record(20*time.Second, 1),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewRatioBudget(tt.cfg)
			require.NoError(t, err)
			runSteps(t, b, func(f func() time.Time) { b.now = f }, tt.steps)
		})
	}
}

// TestRetryStorm pins the promise of the defaults: 100 callers whose first
// attempts fail at the same instant, each wanting up to 2 retries, send at
// most 120 attempts in all (1.2 per caller). A caller stops at its first
// refused retry, as the transport does.
func TestRetryStorm(t *testing.T) {
	ratio := func() stepper { b, _ := NewRatioBudget(RatioBudgetConfig{}); return b }
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
			s := b.Snapshot()
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
	b, err := NewRatioBudget(RatioBudgetConfig{})
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
	b.now = func() time.Time { return t0 }
	s := b.Snapshot()
	const n = goroutines * calls
	assert.Equal(t, uint64(n), s.Requests, "Requests: got %d, want %d", s.Requests, n)
	allCalls := uint64(n + drained + 1)
	assert.Equal(t, allCalls, s.Retries+s.Refused, "Retries+Refused: got %d, want %d", s.Retries+s.Refused, allCalls)
	// Everything happened within one window: 0.1·requests + reserve.
	wantRetries := uint64(0.1*n + 10)
	assert.Equal(t, wantRetries, s.Retries, "Retries: got %d, want %d (0.1·requests + reserve)", s.Retries, wantRetries)
	assert.Zero(t, s.Available, "Available: got %v, want 0", s.Available)
}

func TestNewTokenBucketConfig(t *testing.T) {
	tests := []struct {
		name  string
		cfg   TokenBucketConfig
		field string // "" for a valid config
	}{
		{"zero config gives defaults", TokenBucketConfig{}, ""},
		{"capacity of one", TokenBucketConfig{Capacity: 1}, ""},
		{"negative Capacity", TokenBucketConfig{Capacity: -1}, "Capacity"},
		{"NaN Capacity", TokenBucketConfig{Capacity: math.NaN()}, "Capacity"},
		{"infinite Capacity", TokenBucketConfig{Capacity: math.Inf(1)}, "Capacity"},
		{"Capacity below one", TokenBucketConfig{Capacity: 0.5}, "Capacity"},
		{"negative Refill", TokenBucketConfig{Refill: -0.1}, "Refill"},
		{"NaN Refill", TokenBucketConfig{Refill: math.NaN()}, "Refill"},
		{"infinite Refill", TokenBucketConfig{Refill: math.Inf(1)}, "Refill"},
		{"negative Interval", TokenBucketConfig{Interval: -time.Second}, "Interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewTokenBucket(tt.cfg)
			if tt.field != "" {
				assert.Nil(t, b, "budget: got %v, want nil", b)
				assert.True(t, errors.Is(err, ErrInvalidPolicy), "error: got %v, want one wrapping ErrInvalidPolicy", err)
				assert.ErrorContains(t, err, tt.field, "error: got %v, want it to name %s", err, tt.field)
				return
			}
			require.NoError(t, err)
		})
	}
	b, err := NewTokenBucket(TokenBucketConfig{})
	require.NoError(t, err)
	assert.Equal(t, 10.0, b.capacity, "default Capacity: got %v, want 10", b.capacity)
	assert.Equal(t, 1e-9, b.perNano, "default refill per ns: got %v, want 1e-9 (1 per second)", b.perNano)
	assert.Equal(t, 10.0, b.Snapshot().Available, "starts full: got %v, want 10", b.Snapshot().Available)
}

func TestNewRatioBudgetConfig(t *testing.T) {
	tests := []struct {
		name  string
		cfg   RatioBudgetConfig
		field string // "" for a valid config
	}{
		{"zero config gives defaults", RatioBudgetConfig{}, ""},
		{"negative MinPerSecond means no reserve", RatioBudgetConfig{MinPerSecond: -1}, ""},
		{"shortest Window", RatioBudgetConfig{Window: 10 * time.Nanosecond}, ""},
		{"negative Ratio", RatioBudgetConfig{Ratio: -0.1}, "Ratio"},
		{"NaN Ratio", RatioBudgetConfig{Ratio: math.NaN()}, "Ratio"},
		{"infinite Ratio", RatioBudgetConfig{Ratio: math.Inf(1)}, "Ratio"},
		{"NaN MinPerSecond", RatioBudgetConfig{MinPerSecond: math.NaN()}, "MinPerSecond"},
		{"infinite MinPerSecond", RatioBudgetConfig{MinPerSecond: math.Inf(1)}, "MinPerSecond"},
		{"minus infinite MinPerSecond", RatioBudgetConfig{MinPerSecond: math.Inf(-1)}, "MinPerSecond"},
		{"negative Window", RatioBudgetConfig{Window: -time.Second}, "Window"},
		{"Window shorter than its buckets", RatioBudgetConfig{Window: 9 * time.Nanosecond}, "Window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewRatioBudget(tt.cfg)
			if tt.field != "" {
				assert.Nil(t, b, "budget: got %v, want nil", b)
				assert.True(t, errors.Is(err, ErrInvalidPolicy), "error: got %v, want one wrapping ErrInvalidPolicy", err)
				assert.ErrorContains(t, err, tt.field, "error: got %v, want it to name %s", err, tt.field)
				return
			}
			require.NoError(t, err)
		})
	}
	b, err := NewRatioBudget(RatioBudgetConfig{})
	require.NoError(t, err)
	assert.Equal(t, 0.1, b.ratio, "default Ratio: got %v, want 0.1", b.ratio)
	assert.Equal(t, 10.0, b.reserve, "default reserve: got %v, want 10 (1/s over 10s)", b.reserve)
	assert.Equal(t, time.Second, b.width, "default bucket width: got %v, want 1s (10s / 10)", b.width)
	b, err = NewRatioBudget(RatioBudgetConfig{MinPerSecond: -1})
	require.NoError(t, err)
	assert.Zero(t, b.reserve, "reserve with negative MinPerSecond: got %v, want 0", b.reserve)
}

// TestBudgetMethodsUseClock pins that the context methods read the
// injected clock.
func TestBudgetMethodsUseClock(t *testing.T) {
	ctx := context.Background()
	now := t0
	clock := func() time.Time { return now }

	tb, err := NewTokenBucket(TokenBucketConfig{Capacity: 1})
	require.NoError(t, err)
	tb.now = clock
	tb.RecordRequest(ctx)
	ok, err := tb.AllowRetry(ctx)
	assert.True(t, ok && err == nil, "first retry: got %v, %v, want true, nil", ok, err)
	ok, _ = tb.AllowRetry(ctx)
	assert.False(t, ok, "second retry at the same instant: got %v, want false", ok)
	now = now.Add(time.Second)
	ok, _ = tb.AllowRetry(ctx)
	assert.True(t, ok, "retry a second later: got %v, want true", ok)

	rb, err := NewRatioBudget(RatioBudgetConfig{Ratio: 1, MinPerSecond: -1})
	require.NoError(t, err)
	rb.now = clock
	rb.RecordRequest(ctx)
	ok, err = rb.AllowRetry(ctx)
	assert.True(t, ok && err == nil, "retry after one request: got %v, %v, want true, nil", ok, err)
	now = now.Add(10 * time.Second)
	rb.RecordRequest(ctx)
	now = now.Add(10 * time.Second)
	ok, _ = rb.AllowRetry(ctx)
	assert.False(t, ok, "retry after the deposit expired: got %v, want false", ok)
}

func TestUnlimitedBudget(t *testing.T) {
	var b Budget = UnlimitedBudget{}
	for i := range 1000 {
		b.RecordRequest(context.Background())
		ok, err := b.AllowRetry(context.Background())
		if !ok || err != nil {
			t.Fatalf("retry %d: got %v, %v, want true, nil", i, ok, err)
		}
	}
}
