package retryfuse

import (
	"strconv"
	"sync/atomic"
	"testing"
)

// The hot path: a closed scope, one Allow and one Done per request.

func BenchmarkBreakerClosed(b *testing.B) {
	br, _ := NewBreaker(BreakerSettings{})
	b.ReportAllocs()
	for b.Loop() {
		tk, _, err := br.allow("api.example")
		if err != nil {
			b.Fatal(err)
		}
		tk.done(observeSuccess, nil)
	}
}

func BenchmarkBreakerClosedParallel(b *testing.B) {
	br, _ := NewBreaker(BreakerSettings{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, _, err := br.allow("api.example")
			if err != nil {
				b.Error(err)
				return
			}
			tk.done(observeSuccess, nil)
		}
	})
}

// One scope per goroutine: only the breaker's lock is shared.
func BenchmarkBreakerClosedParallelScopes(b *testing.B) {
	br, _ := NewBreaker(BreakerSettings{})
	var n atomic.Int32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		scope := "api-" + strconv.Itoa(int(n.Add(1))) + ".example"
		for pb.Next() {
			tk, _, err := br.allow(scope)
			if err != nil {
				b.Error(err)
				return
			}
			tk.done(observeSuccess, nil)
		}
	})
}
