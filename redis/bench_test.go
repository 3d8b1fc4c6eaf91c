package retryfuseredis

import (
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
)

// The budgets' checks against the local Redis, with the default timeout,
// beside a bare PING (the round trip alone) and the in-memory budget.
// Figures and the command are in BENCHMARKS.md.

// benchTimeout replaces the default 50ms timeout: the benchmarks measure
// the round trip, and a busy machine's rare stall past 50ms would turn a
// figure into a failure.
const benchTimeout = time.Second

func BenchmarkPing(b *testing.B) {
	c := sharedClient(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Ping(bg()).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTokenBucketAllowRetry(b *testing.B) {
	tb, err := NewTokenBucket(sharedClient(b), "bench", retryfuse.TokenBucketConfig{Capacity: 1e9, Refill: 1e9}, BudgetOptions{Prefix: uniq(b), Timeout: benchTimeout})
	if err != nil {
		b.Fatal(err)
	}
	benchAllow(b, tb)
}

func BenchmarkRatioAllowRetry(b *testing.B) {
	rb, err := NewRatioBudget(sharedClient(b), "bench", retryfuse.RatioBudgetConfig{MinPerSecond: 1e9}, BudgetOptions{Prefix: uniq(b), Timeout: benchTimeout})
	if err != nil {
		b.Fatal(err)
	}
	benchAllow(b, rb)
}

func BenchmarkRatioRecordRequest(b *testing.B) {
	rb, err := NewRatioBudget(sharedClient(b), "bench", retryfuse.RatioBudgetConfig{}, BudgetOptions{Prefix: uniq(b), Timeout: benchTimeout})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rb.RecordRequest(bg())
	}
}

func BenchmarkRatioAllowRetryParallel(b *testing.B) {
	rb, err := NewRatioBudget(sharedClient(b), "bench", retryfuse.RatioBudgetConfig{MinPerSecond: 1e9}, BudgetOptions{Prefix: uniq(b), Timeout: benchTimeout})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := rb.AllowRetry(bg()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkMemoryRatioAllowRetry is the in-memory budget, for scale.
func BenchmarkMemoryRatioAllowRetry(b *testing.B) {
	rb, err := retryfuse.NewRatioBudget(retryfuse.RatioBudgetConfig{MinPerSecond: 1e9})
	if err != nil {
		b.Fatal(err)
	}
	benchAllow(b, rb)
}

func BenchmarkLedgerBeginRelease(b *testing.B) {
	l, err := NewLedger(sharedClient(b), LedgerConfig{Prefix: uniq(b), InFlightTTL: time.Minute, Timeout: benchTimeout, AllowWithoutPersistence: true})
	if err != nil {
		b.Fatal(err)
	}
	closeLedger(b, l)
	b.ReportAllocs()
	for b.Loop() {
		cl, err := l.Begin(bg(), "k", fpA)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(bg(), "k", cl.Token); err != nil {
			b.Fatal(err)
		}
	}
}

// benchAllow measures AllowRetry; a check that meets the timeout is an
// error here, not a figure.
func benchAllow(b *testing.B, budget retryfuse.Budget) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := budget.AllowRetry(bg()); err != nil || !ok {
			b.Fatalf("AllowRetry: got (%v, %v), want a granted retry", ok, err)
		}
	}
}
