package breaker

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// The hot path: a closed scope, one admission and one outcome per request.

func BenchmarkBreakerClosed(b *testing.B) {
	br, _ := New(Settings{})
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		tk, _, err := br.Allow("api.example", now)
		if err != nil {
			b.Fatal(err)
		}
		tk.Done(Success, nil, now)
	}
}

func BenchmarkBreakerClosedParallel(b *testing.B) {
	br, _ := New(Settings{})
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, _, err := br.Allow("api.example", now)
			if err != nil {
				b.Error(err)
				return
			}
			tk.Done(Success, nil, now)
		}
	})
}

// One scope per goroutine: only the breaker's lock is shared.
func BenchmarkBreakerClosedParallelScopes(b *testing.B) {
	br, _ := New(Settings{})
	var n atomic.Int32
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		scope := "api-" + strconv.Itoa(int(n.Add(1))) + ".example"
		for pb.Next() {
			tk, _, err := br.Allow(scope, now)
			if err != nil {
				b.Error(err)
				return
			}
			tk.Done(Success, nil, now)
		}
	})
}

// BenchmarkBreakerClosedCalls is the closed path as calls meet it: callers
// on every core, each with some work of its own (callerWork) before the
// ticket and before its outcome, as a call has. Its time less
// BenchmarkCallerWork's twice is what the breaker costs. The benchmarks
// above, with nothing between tickets, favour a lock: one core takes it
// many times over while the other waits.
func BenchmarkBreakerClosedCalls(b *testing.B) {
	br, _ := New(Settings{})
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			callerWork()
			tk, _, err := br.Allow("api.example", now)
			if err != nil {
				b.Error(err)
				return
			}
			callerWork()
			tk.Done(Success, nil, now)
		}
	})
}

// BenchmarkCallerWork is callerWork alone, on every core.
func BenchmarkCallerWork(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			callerWork()
		}
	})
}

// callerWork stands for what a caller does between two tickets: some 200
// ns of arithmetic on its own registers.
func callerWork() {
	x := uint64(1)
	for range 300 {
		x = x*6364136223846793005 + 1442695040888963407
	}
	callerSink.Add(x & 1)
}

var callerSink atomic.Uint64
