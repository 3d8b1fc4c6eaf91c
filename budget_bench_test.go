package retryfuse

import (
	"sync"
	"testing"
	"time"
)

// The budgets take the time as an argument, so these benchmarks measure the
// budget alone, without time.Now. Time advances by benchStep every eight
// calls, enough for the budgets to grant some retries and refuse others.
const benchStep = 800 * time.Microsecond

func BenchmarkTokenBucketAllowRetryAt(b *testing.B) {
	tb, err := NewTokenBucket(TokenBucketConfig{Capacity: 100, Refill: 1000, Interval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	benchSerial(b, tb.allowRetryAt, tb.recordRequestAt)
}

func BenchmarkRatioBudgetAllowRetryAt(b *testing.B) {
	rb, err := NewRatioBudget(RatioBudgetConfig{})
	if err != nil {
		b.Fatal(err)
	}
	benchSerial(b, rb.allowRetryAt, rb.recordRequestAt)
}

func BenchmarkTokenBucketAllowRetryAtParallel(b *testing.B) {
	tb, err := NewTokenBucket(TokenBucketConfig{Capacity: 100, Refill: 1000, Interval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	benchParallel(b, tb.allowRetryAt)
}

func BenchmarkRatioBudgetAllowRetryAtParallel(b *testing.B) {
	rb, err := NewRatioBudget(RatioBudgetConfig{})
	if err != nil {
		b.Fatal(err)
	}
	benchParallel(b, rb.allowRetryAt)
}

// BenchmarkMutexFloor is the cost of the one lock every call takes, for
// comparison with the budgets in the same run.
func BenchmarkMutexFloor(b *testing.B) {
	var mu sync.Mutex
	n := 0
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
}

// benchStart returns a time that carries a monotonic clock reading, as the
// times of time.Now do; arithmetic on such times is cheaper than on wall
// times alone.
func benchStart() time.Time { return time.Now() }

func benchSerial(b *testing.B, allow func(time.Time) bool, recordStep func(time.Time)) {
	b.ReportAllocs()
	now := benchStart()
	for i := 0; b.Loop(); i++ {
		if i%8 == 0 {
			now = now.Add(benchStep)
			recordStep(now)
		}
		allow(now)
	}
}

func benchParallel(b *testing.B, allow func(time.Time) bool) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine keeps its own clock, so the budget also sees times
		// slightly out of order, as it does in service.
		now := benchStart()
		for i := 0; pb.Next(); i++ {
			if i%8 == 0 {
				now = now.Add(benchStep)
			}
			allow(now)
		}
	})
}
