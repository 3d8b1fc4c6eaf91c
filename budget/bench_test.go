package budget

import (
	"sync"
	"sync/atomic"
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
	benchSerial(b, tb.AllowRetryAt, tb.RecordRequestAt)
}

func BenchmarkRatioBudgetAllowRetryAt(b *testing.B) {
	rb, err := NewRatio(RatioConfig{})
	if err != nil {
		b.Fatal(err)
	}
	benchSerial(b, rb.AllowRetryAt, rb.RecordRequestAt)
}

func BenchmarkTokenBucketAllowRetryAtParallel(b *testing.B) {
	tb, err := NewTokenBucket(TokenBucketConfig{Capacity: 100, Refill: 1000, Interval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	benchParallel(b, tb.AllowRetryAt)
}

func BenchmarkRatioBudgetAllowRetryAtParallel(b *testing.B) {
	rb, err := NewRatio(RatioConfig{})
	if err != nil {
		b.Fatal(err)
	}
	benchParallel(b, rb.AllowRetryAt)
}

// BenchmarkRatioBudgetRecordRequestAt is the deposit every call of a
// scope makes once its first attempt is over: one goroutine, its time
// advancing by benchStep every eight calls (a new bucket every 1,250).
func BenchmarkRatioBudgetRecordRequestAt(b *testing.B) {
	rb, err := NewRatio(RatioConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	now := benchStart()
	for i := 0; b.Loop(); i++ {
		if i%8 == 0 {
			now = now.Add(benchStep)
		}
		rb.RecordRequestAt(now)
	}
}

// BenchmarkRatioBudgetRecordRequestAtParallel is the deposit of callers on
// every core sharing one budget, with nothing between deposits: the worst
// case for a lock-free counter, whose cache line then moves between the
// cores at every deposit, while a mutex lets one core take it many times
// over before the other's turn.
func BenchmarkRatioBudgetRecordRequestAtParallel(b *testing.B) {
	rb, err := NewRatio(RatioConfig{})
	if err != nil {
		b.Fatal(err)
	}
	benchParallel(b, func(now time.Time) bool { rb.RecordRequestAt(now); return true })
}

// BenchmarkRatioBudgetRecordRequestAtCalls is the deposit of callers on
// every core sharing one budget, each deposit after some work of the
// caller's own (callerWork), as a call makes one after its attempt. Its
// time less BenchmarkCallerWork's is what the deposits cost.
func BenchmarkRatioBudgetRecordRequestAtCalls(b *testing.B) {
	rb, err := NewRatio(RatioConfig{})
	if err != nil {
		b.Fatal(err)
	}
	benchParallel(b, func(now time.Time) bool { callerWork(); rb.RecordRequestAt(now); return true })
}

// BenchmarkCallerWork is callerWork alone, on every core.
func BenchmarkCallerWork(b *testing.B) {
	benchParallel(b, func(time.Time) bool { callerWork(); return true })
}

// callerWork stands for what a caller does between two deposits: some 200
// ns of arithmetic on its own registers.
func callerWork() {
	x := uint64(1)
	for range 300 {
		x = x*6364136223846793005 + 1442695040888963407
	}
	callerSink.Add(x & 1)
}

var callerSink atomic.Uint64

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
