package backoff

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffCeiling(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		initial, max time.Duration
		retry        int
		want         time.Duration
	}{
		{100 * ms, 10 * time.Second, 0, 100 * ms},
		{100 * ms, 10 * time.Second, 1, 100 * ms},
		{100 * ms, 10 * time.Second, 2, 200 * ms},
		{100 * ms, 10 * time.Second, 3, 400 * ms},
		{100 * ms, 10 * time.Second, 7, 6400 * ms},
		{100 * ms, 10 * time.Second, 8, 10 * time.Second},
		{100 * ms, 10 * time.Second, 1000, 10 * time.Second},
		{100 * ms, 10 * time.Second, math.MaxInt, 10 * time.Second},
		{time.Second, time.Second, 5, time.Second},
		{0, time.Second, 5, 0},
		{1, math.MaxInt64, 62, 1 << 61},
		{1, math.MaxInt64, 200, math.MaxInt64},
		{math.MaxInt64 / 2, math.MaxInt64, 3, math.MaxInt64},
	}
	for _, tt := range tests {
		if got := Ceiling(tt.initial, tt.max, tt.retry); got != tt.want {
			t.Errorf("Ceiling(%v, %v, %d) = %v, want %v", tt.initial, tt.max, tt.retry, got, tt.want)
		}
	}
}

func TestBackoffCeilingIsMonotoneAndBounded(t *testing.T) {
	for _, initial := range []time.Duration{1, time.Millisecond, 100 * time.Millisecond, 3 * time.Second} {
		for _, max := range []time.Duration{initial, 10 * time.Second, time.Hour, math.MaxInt64} {
			prev := time.Duration(0)
			for retry := 1; retry <= 100; retry++ {
				got := Ceiling(initial, max, retry)
				if got < prev || got > max || got <= 0 {
					t.Fatalf("Ceiling(%v, %v, %d) = %v after %v: want non-decreasing, positive, at most max", initial, max, retry, got, prev)
				}
				prev = got
			}
		}
	}
}

func TestFullJitter(t *testing.T) {
	called := false
	if got := FullJitter(0, func(int64) int64 { called = true; return 0 }); got != 0 || called {
		t.Errorf("FullJitter(0) = %v, randN called %v; want 0, not called", got, called)
	}
	var asked int64
	if got := FullJitter(time.Second, func(n int64) int64 { asked = n; return n - 1 }); got != time.Second-1 || asked != int64(time.Second) {
		t.Errorf("FullJitter(1s) = %v asking randN(%d); want %v asking randN(%d)", got, asked, time.Second-1, int64(time.Second))
	}
	// With the real source every draw lies in [0, ceiling), and the draws
	// spread over the range.
	const ceiling = 100 * time.Millisecond
	var low, high bool
	for range 10000 {
		d := FullJitter(ceiling, rand.Int64N)
		if d < 0 || d >= ceiling {
			t.Fatalf("FullJitter(%v) = %v, want within [0, %v)", ceiling, d, ceiling)
		}
		low = low || d < ceiling/10
		high = high || d >= ceiling*9/10
	}
	if !low || !high {
		t.Errorf("10000 draws of FullJitter(%v): reached the lowest tenth %v, the highest %v; want both", ceiling, low, high)
	}
}
