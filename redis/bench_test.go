package retryfuseredis

import (
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
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

// BenchmarkRecordRequest is the success path's share of a budget: the
// Redis ratio budget counts in memory (the deposit goes to Redis in the
// background), beside the in-memory budget. Run with -count, the two
// alternate.
func BenchmarkRecordRequest(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		mb, err := budget.NewRatio(budget.RatioConfig{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			mb.RecordRequest(bg())
		}
	})
	b.Run("redis", func(b *testing.B) {
		rb, err := NewRatioBudget(sharedClient(b), "bench", budget.RatioConfig{}, BudgetOptions{Prefix: uniq(b), Timeout: benchTimeout})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rb.Close(bg()) })
		b.ReportAllocs()
		for b.Loop() {
			rb.RecordRequest(bg())
		}
	})
}

// BenchmarkRatioSync is one background sync of a ratio budget: one script
// that deposits requests and leases a retry.
func BenchmarkRatioSync(b *testing.B) {
	rb, err := newRatioBudget(sharedClient(b), "bench", budget.RatioConfig{MinPerSecond: 1e9}, BudgetOptions{Prefix: uniq(b), Timeout: benchTimeout})
	if err != nil {
		b.Fatal(err)
	}
	benchSync(b, rb.s)
}

// BenchmarkTokenBucketSync is one background sync of a token bucket.
func BenchmarkTokenBucketSync(b *testing.B) {
	tb, err := newTokenBucket(sharedClient(b), "bench", budget.TokenBucketConfig{Capacity: 1e9, Refill: 1e9}, BudgetOptions{Prefix: uniq(b), Timeout: benchTimeout})
	if err != nil {
		b.Fatal(err)
	}
	benchSync(b, tb.s)
}

func benchSync(b *testing.B, s *shared) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.kind.sync(bg(), s.client, s.key, 10, 0, 0, 0, 4); err != nil {
			b.Fatal(err)
		}
	}
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
