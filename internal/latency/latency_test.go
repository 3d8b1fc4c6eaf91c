package latency

import (
	"testing"
	"time"
)

// The latency histogram that derives the hedge delay: its buckets, its
// quantiles, and the halving that weighs recent observations most.

func TestLatencyBucketOfAndUpperBoundAgree(t *testing.T) {
	for i := range numBuckets {
		ub := upperBound(i)
		if got := bucketOf(ub); got != i {
			t.Errorf("bucketOf(upperBound(%d) = %v) = %d, want %d", i, ub, got, i)
		}
		if i+1 < numBuckets {
			if got := bucketOf(ub + 1); got != i+1 {
				t.Errorf("bucketOf(upperBound(%d)+1ns = %v) = %d, want %d", i, ub+1, got, i+1)
			}
		}
		if i > 0 && upperBound(i) <= upperBound(i-1) {
			t.Errorf("upperBound(%d) = %v, not above upperBound(%d) = %v", i, upperBound(i), i-1, upperBound(i-1))
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
		{time.Hour, numBuckets - 1},
		{time.Duration(1<<63 - 1), numBuckets - 1},
	}
	for _, tt := range tests {
		if got := bucketOf(tt.d); got != tt.want {
			t.Errorf("bucketOf(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
	if got := upperBound(0); got != Base {
		t.Errorf("upperBound(0) = %v, want %v", got, Base)
	}
	if got := upperBound(4); got != 2*Base {
		t.Errorf("upperBound(4) = %v, want %v", got, 2*Base)
	}
}

func TestLatencyQuantileNeedsMinimumObservations(t *testing.T) {
	var l Histogram
	for range minimum - 1 {
		l.Observe(time.Millisecond)
	}
	if d, ok := l.Quantile(0.95); ok {
		t.Fatalf("quantile with %d observations = %v, true; want no estimate", minimum-1, d)
	}
	l.Observe(time.Millisecond)
	d, ok := l.Quantile(0.95)
	if !ok {
		t.Fatalf("quantile with %d observations: no estimate, want one", minimum)
	}
	if want := upperBound(bucketOf(time.Millisecond)); d != want {
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
	fast, slow := upperBound(bucketOf(time.Millisecond)), upperBound(bucketOf(200*time.Millisecond))
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
	for range window - 1 {
		l.Observe(time.Millisecond)
	}
	if l.n != window-1 {
		t.Fatalf("n = %d, want %d", l.n, window-1)
	}
	l.Observe(time.Millisecond) // the window is full: every count halves
	if got, want := l.buckets[bucketOf(time.Millisecond)], uint32(window/2); got != want || l.n != want {
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
	if got, want := l.buckets[bucketOf(time.Millisecond)], uint32(256); got != want {
		t.Errorf("1ms bucket after the second halving = %d, want %d", got, want)
	}
	got, ok := l.Quantile(0.5)
	if want := upperBound(bucketOf(10 * time.Millisecond)); !ok || got != want {
		t.Errorf("median = %v, %v; want %v, true (recent observations weigh most)", got, ok, want)
	}
	if l.n >= window {
		t.Errorf("n = %d, want below the window %d", l.n, window)
	}
}
