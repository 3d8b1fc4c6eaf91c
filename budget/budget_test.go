package budget

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/internal/sentinel"
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
	SnapshotAt(time.Time) Snapshot
}

func runSteps(t *testing.T, b stepper, steps []step) {
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
		got := b.SnapshotAt(now).Available
		assert.InDelta(t, s.avail, got, 1e-12, "step %d (%s at %v): Available got %v, want %v", i, s.op, s.at, got, s.avail)
	}
}

func allow(at time.Duration, want bool, avail float64) step {
	return step{at: at, op: "allow", want: want, avail: avail}
}

func recordStep(at time.Duration, avail float64) step {
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
			allow(0, true, 2), allow(0, true, 1), allow(0, true, 0), recordStep(0, 0), recordStep(0, 0), allow(0, false, 0),
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
			recordStep(100*time.Millisecond, 0.1), recordStep(200*time.Millisecond, 0.2),
			recordStep(300*time.Millisecond, 0.3), recordStep(400*time.Millisecond, 0.4),
			recordStep(500*time.Millisecond, 0.5), recordStep(600*time.Millisecond, 0.6),
			recordStep(700*time.Millisecond, 0.7), recordStep(800*time.Millisecond, 0.8),
			recordStep(900*time.Millisecond, 0.9), allow(time.Second, true, 0),
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
			runSteps(t, b, tt.steps)
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
	s := b.SnapshotAt(t0)
	assert.Equal(t, uint64(capacity), s.Retries, "Retries: got %d, want %d", s.Retries, capacity)
	assert.Equal(t, uint64(goroutines*calls), s.Retries+s.Refused, "Retries+Refused: got %d, want %d", s.Retries+s.Refused, goroutines*calls)
	assert.Equal(t, uint64(goroutines*calls), s.Requests, "Requests: got %d, want %d", s.Requests, goroutines*calls)
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
				assert.True(t, errors.Is(err, sentinel.ErrInvalidPolicy), "error: got %v, want one wrapping sentinel.ErrInvalidPolicy", err)
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

// The zero values of the budgets work, with the defaults of their configs.
func TestZeroBudgetsHaveTheDefaults(t *testing.T) {
	var tb TokenBucket
	s := tb.SnapshotAt(t0)
	assert.Equal(t, 10.0, s.Available, "zero TokenBucket: got %v tokens, want 10 (full)", s.Available)
	for range 10 {
		require.True(t, tb.AllowRetryAt(t0))
	}
	assert.False(t, tb.AllowRetryAt(t0), "zero TokenBucket: got an 11th token at once, want 10")
	assert.True(t, tb.AllowRetryAt(t0.Add(time.Second)), "zero TokenBucket: got no token after a second, want one (1/s)")

	var rb Ratio
	assert.Equal(t, 10.0, rb.SnapshotAt(t0).Available, "zero Ratio: want the reserve of 1/s over 10s")
	for range 100 {
		rb.RecordRequestAt(t0)
	}
	assert.InDelta(t, 20.0, rb.SnapshotAt(t0).Available, 1e-9, "zero Ratio: want 10%% of 100 requests plus the reserve")
	assert.InDelta(t, 0.0, rb.SnapshotAt(t0.Add(20*time.Second)).Available-10, 1e-9, "zero Ratio: deposits expire after 10s")
}

func TestUnlimitedBudget(t *testing.T) {
	var b Budget = Unlimited()
	for i := range 1000 {
		b.RecordRequest(context.Background())
		ok, err := b.AllowRetry(context.Background())
		if !ok || err != nil {
			t.Fatalf("retry %d: got %v, %v, want true, nil", i, ok, err)
		}
	}
}
