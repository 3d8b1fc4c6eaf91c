package latency

import (
	"testing"
	"time"
)

// The latency histogram that derives the hedge delay: its buckets, its
// quantiles, and the halving that weighs recent observations most.

func TestLatencyBucketOfAndUpperBoundAgree(t *testing.T) {
	for i := range Buckets {
		ub := UpperBound(i)
		if got := BucketOf(ub); got != i {
			t.Errorf("BucketOf(UpperBound(%d) = %v) = %d, want %d", i, ub, got, i)
		}
		if i+1 < Buckets {
			if got := BucketOf(ub + 1); got != i+1 {
				t.Errorf("BucketOf(UpperBound(%d)+1ns = %v) = %d, want %d", i, ub+1, got, i+1)
			}
		}
		if i > 0 && UpperBound(i) <= UpperBound(i-1) {
			t.Errorf("UpperBound(%d) = %v, not above UpperBound(%d) = %v", i, UpperBound(i), i-1, UpperBound(i-1))
		}
	}
}

func TestLatencyBucketOfEdges(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, 0},
		{0, 0},
		{Base, 0},
		{Base + 1, 1},
		{2 * Base, 4}, // a quarter of an octave per bucket
		{4 * Base, 8},
		{time.Hour, Buckets - 1},
		{time.Duration(1<<63 - 1), Buckets - 1},
	}
	for _, tt := range tests {
		if got := BucketOf(tt.d); got != tt.want {
			t.Errorf("BucketOf(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
	if got := UpperBound(0); got != Base {
		t.Errorf("UpperBound(0) = %v, want %v", got, Base)
	}
	if got := UpperBound(4); got != 2*Base {
		t.Errorf("UpperBound(4) = %v, want %v", got, 2*Base)
	}
}

func TestLatencyQuantileNeedsMinimumObservations(t *testing.T) {
	var l Histogram
	for range Minimum - 1 {
		l.Observe(time.Millisecond)
	}
	if d, ok := l.Quantile(0.95); ok {
		t.Fatalf("quantile with %d observations = %v, true; want no estimate", Minimum-1, d)
	}
	l.Observe(time.Millisecond)
	d, ok := l.Quantile(0.95)
	if !ok {
		t.Fatalf("quantile with %d observations: no estimate, want one", Minimum)
	}
	if want := UpperBound(BucketOf(time.Millisecond)); d != want {
		t.Errorf("quantile = %v, want %v (the bucket of 1ms)", d, want)
	}
	if d < time.Millisecond || d > time.Millisecond*119/100 {
		t.Errorf("quantile = %v, want within a quarter octave above 1ms", d)
	}
}

func TestLatencyQuantileRanks(t *testing.T) {
	var l Histogram
	for range 95 {
		l.Observe(time.Millisecond)
	}
	for range 5 {
		l.Observe(200 * time.Millisecond)
	}
	fast, slow := UpperBound(BucketOf(time.Millisecond)), UpperBound(BucketOf(200*time.Millisecond))
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0.01, fast},
		{0.5, fast},
		{0.95, fast}, // the 95th of 100 is the last fast one
		{0.951, slow},
		{0.99, slow},
		{0.999999, slow},
	}
	for _, tt := range tests {
		got, ok := l.Quantile(tt.q)
		if !ok || got != tt.want {
			t.Errorf("quantile(%v) = %v, %v; want %v, true", tt.q, got, ok, tt.want)
		}
	}
}

func TestLatencyHalvesAtWindow(t *testing.T) {
	var l Histogram
	for range Window - 1 {
		l.Observe(time.Millisecond)
	}
	if l.n != Window-1 {
		t.Fatalf("n = %d, want %d", l.n, Window-1)
	}
	l.Observe(time.Millisecond) // the window is full: every count halves
	if got, want := l.buckets[BucketOf(time.Millisecond)], uint32(Window/2); got != want || l.n != want {
		t.Fatalf("after the window: bucket %d, n %d; want %d, %d", got, l.n, want, want)
	}

	// 512 old observations of 1ms against newer ones of 10ms: the next
	// halving (at 1024 again) makes them 256 against 256, and the 10ms
	// that follow outweigh the old, which without halving they would not
	// (600 against 1024).
	for range 600 {
		l.Observe(10 * time.Millisecond)
	}
	var sum uint32
	for _, c := range l.buckets {
		sum += c
	}
	if sum != l.n {
		t.Errorf("n = %d, but the buckets hold %d", l.n, sum)
	}
	if got, want := l.buckets[BucketOf(time.Millisecond)], uint32(256); got != want {
		t.Errorf("1ms bucket after the second halving = %d, want %d", got, want)
	}
	got, ok := l.Quantile(0.5)
	if want := UpperBound(BucketOf(10 * time.Millisecond)); !ok || got != want {
		t.Errorf("median = %v, %v; want %v, true (recent observations weigh most)", got, ok, want)
	}
	if l.n >= Window {
		t.Errorf("n = %d, want below the window %d", l.n, Window)
	}
}
