package retryfuse_test

import (
	"fmt"
	"time"

	"github.com/retryfuse/retryfuse"
)

// A storm: 100 callers fail at the same instant and each would retry twice.
// With the default ratio budget they send 120 attempts, not 300.
func ExampleRatioBudget() {
	b, err := retryfuse.NewRatioBudget(retryfuse.RatioBudgetConfig{}) // 10%, 1/s floor, 10s window
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for range 100 {
		b.RecordRequestAt(now)
	}
	granted := 0
	for range 100 {
		for range 2 {
			if !b.AllowRetryAt(now) {
				break
			}
			granted++
		}
	}
	fmt.Println("attempts:", 100+granted)
	// Ten seconds later the storm's deposits and withdrawals have expired:
	// the reserve is back.
	fmt.Println("retry later:", b.AllowRetryAt(now.Add(10*time.Second)))
	// Output:
	// attempts: 120
	// retry later: true
}

func ExampleTokenBucket() {
	b, err := retryfuse.NewTokenBucket(retryfuse.TokenBucketConfig{
		Capacity: 2,
		Refill:   1,
		Interval: time.Second,
	})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	fmt.Println(b.AllowRetryAt(now), b.AllowRetryAt(now), b.AllowRetryAt(now))
	fmt.Println(b.AllowRetryAt(now.Add(500 * time.Millisecond))) // half a token
	fmt.Println(b.AllowRetryAt(now.Add(time.Second)))            // a whole one
	s := b.Snapshot()
	fmt.Println("granted:", s.Retries, "refused:", s.Refused)
	// Output:
	// true true false
	// false
	// true
	// granted: 3 refused: 2
}
