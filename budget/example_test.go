package budget_test

import (
	"context"
	"fmt"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// A storm: 100 callers fail at the same instant and each would retry twice.
// With the default ratio budget they send 120 attempts, not 300.
func ExampleRatio() {
	b, err := budget.NewRatio(budget.RatioConfig{}) // 10%, 1/s floor, 10s window
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 100 {
		b.RecordRequest(ctx)
	}
	granted := 0
	for range 100 {
		for range 2 {
			if ok, _ := b.AllowRetry(ctx); !ok {
				break
			}
			granted++
		}
	}
	fmt.Println("attempts:", 100+granted)
	s := b.Snapshot()
	fmt.Println("requests:", s.Requests, "retries:", s.Retries, "refused:", s.Refused)
	// Output:
	// attempts: 120
	// requests: 100 retries: 20 refused: 90
}

// A bucket of two tokens grants two retries back to back, then refuses
// until it has refilled (one token a second here).
func ExampleTokenBucket() {
	b, err := budget.NewTokenBucket(budget.TokenBucketConfig{
		Capacity: 2,
		Refill:   1,
		Interval: time.Second,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	var got []bool
	for range 3 {
		ok, _ := b.AllowRetry(ctx)
		got = append(got, ok)
	}
	s := b.Snapshot()
	fmt.Println(got)
	fmt.Println("granted:", s.Retries, "refused:", s.Refused)
	// Output:
	// [true true false]
	// granted: 2 refused: 1
}
