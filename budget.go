package retryfuse

import (
	"context"
	"math"
	"sync"
	"time"
)

// This file owns the shared retry budgets: the Budget interface, the
// TokenBucket and the UnlimitedBudget. The RatioBudget, the recommended one,
// has budget_ratio.go to itself.
//
// Both stateful budgets follow golang.org/x/time/rate: one mutex, no
// goroutine, no ticker; state is brought up to date lazily, under the lock,
// from the time passed in. Unlike rate.Limiter, a time earlier than the
// latest one seen does not move the budget's clock back: it counts as "no
// time has passed". Callers that read the clock before contending for the
// lock arrive slightly out of order, and moving the clock back for them would
// credit the same stretch of time twice.

// Budget bounds retries across every call that shares it. The transport calls
// RecordRequest once per call (first attempt) and AllowRetry before every
// retry (never before a first attempt). Implementations must be safe for
// concurrent use.
type Budget interface {
	RecordRequest(ctx context.Context)
	// AllowRetry takes one retry from the budget; ok false refuses it. A
	// non-nil err means the budget could not establish the answer (evidence
	// unavailable, e.g. a remote store is down); ok is then the budget's
	// declared fail-safe answer.
	AllowRetry(ctx context.Context) (ok bool, err error)
}

// Compile-time checks.
var (
	_ Budget = (*RatioBudget)(nil)
	_ Budget = (*TokenBucket)(nil)
	_ Budget = unlimitedBudget{}
)

// BudgetSnapshot is a point-in-time view of a budget, for metrics and tests.
type BudgetSnapshot struct {
	Requests uint64 // requests recorded since creation
	Retries  uint64 // retries granted since creation
	Refused  uint64 // retries refused since creation
	// Available is the retry balance right now. Its whole part is how many
	// retries would be granted back to back; a fractional part is credit
	// still building up. Never negative.
	Available float64
}

// UnlimitedBudget returns a Budget that never refuses: set it as
// Transport.Budget, or return it from NewBudget, to turn budgets off.
func UnlimitedBudget() Budget { return unlimitedBudget{} }

// unlimitedBudget records nothing and grants every retry.
type unlimitedBudget struct{}

func (unlimitedBudget) RecordRequest(context.Context) {}

func (unlimitedBudget) AllowRetry(context.Context) (bool, error) { return true, nil }

// snapEpsilon absorbs the rounding error of float credit: a balance within
// snapEpsilon of a whole number counts as that number, so that ten refills of
// 0.1 token make one token and not 0.9999999999999999.
const snapEpsilon = 1e-9

// snap takes a non-negative x within snapEpsilon of a whole number to that
// number. (The conversion through int64 costs far less than math.Round.)
func snap(x float64) float64 {
	if x >= 1<<52 || x < 0 {
		return x // whole already, or not ours to round
	}
	if r := float64(int64(x + 0.5)); x-r < snapEpsilon && r-x < snapEpsilon {
		return r
	}
	return x
}

// checkFinite reports a negative, NaN or infinite setting.
func checkFinite(field string, v float64) error {
	switch {
	case math.IsNaN(v):
		return invalidPolicy(field, "is NaN")
	case math.IsInf(v, 0):
		return invalidPolicy(field, "is infinite")
	case v < 0:
		return invalidPolicy(field, "is negative")
	}
	return nil
}

// TokenBucket is a budget of retry tokens: it holds up to Capacity tokens,
// starts full, gains Refill tokens per Interval, and each retry takes one
// token. Requests are counted but add nothing: the retry rate it allows is
// the same whether one request or a million share it, which is why
// RatioBudget is the recommended budget and TokenBucket the simple one.
//
// The zero value is a full TokenBucket with the default configuration (see
// TokenBucketConfig). This type is concurrency safe.
type TokenBucket struct {
	mu       sync.Mutex
	capacity float64 // zero until a zero TokenBucket is first used
	perNano  float64 // tokens added per nanosecond
	tokens   float64
	last     time.Time // latest time seen; zero before the first call
	requests uint64
	retries  uint64
	refused  uint64
}

// TokenBucketConfig configures a TokenBucket. The zero value is valid: 10
// tokens, refilled at one token per second.
type TokenBucketConfig struct {
	// Capacity is the number of tokens when full, and the bucket starts full.
	// Zero means 10. It must be at least 1: a smaller bucket could never
	// grant a retry.
	Capacity float64
	// Refill is the number of tokens added per Interval; zero means 1. Credit
	// accrues continuously, not in steps of Interval.
	Refill float64
	// Interval is the period of Refill; zero means one second.
	Interval time.Duration
}

// NewTokenBucket returns a full TokenBucket. A negative, NaN or infinite
// setting, or a Capacity below 1, gives an error wrapping ErrInvalidPolicy
// that names the field.
func NewTokenBucket(cfg TokenBucketConfig) (*TokenBucket, error) {
	if err := checkFinite("TokenBucketConfig.Capacity", cfg.Capacity); err != nil {
		return nil, err
	}
	if err := checkFinite("TokenBucketConfig.Refill", cfg.Refill); err != nil {
		return nil, err
	}
	if cfg.Interval < 0 {
		return nil, invalidPolicy("TokenBucketConfig.Interval", "is negative")
	}
	capacity := orDefault(cfg.Capacity, defaultTokenCapacity)
	if capacity < 1 {
		return nil, invalidPolicy("TokenBucketConfig.Capacity", "is below 1, so no retry could ever be granted")
	}
	refill := orDefault(cfg.Refill, defaultTokenRefill)
	interval := orDefault(cfg.Interval, defaultTokenInterval)
	return &TokenBucket{capacity: capacity, perNano: refill / float64(interval), tokens: capacity}, nil
}

// The defaults of TokenBucketConfig.
const (
	defaultTokenCapacity = 10.0
	defaultTokenRefill   = 1.0
	defaultTokenInterval = time.Second
)

// initLocked gives a zero TokenBucket the default configuration, full.
// b.mu is held.
func (b *TokenBucket) initLocked() {
	if b.capacity == 0 {
		b.capacity = defaultTokenCapacity
		b.perNano = defaultTokenRefill / float64(defaultTokenInterval)
		b.tokens = b.capacity
	}
}

// refill adds the credit earned since the latest time seen. b.mu is held.
func (b *TokenBucket) refill(now time.Time) {
	b.initLocked()
	if b.last.IsZero() {
		b.last = now
		return
	}
	if !now.After(b.last) {
		return // time went backwards or stood still: nothing earned
	}
	elapsed := now.Sub(b.last)
	b.last = now
	if b.tokens >= b.capacity {
		return
	}
	// A long idle spell cannot overflow: elapsed is at most ~292 years, so
	// the product is finite, and the bucket is capped.
	b.tokens = snap(min(b.capacity, b.tokens+float64(elapsed)*b.perNano))
}

// allowRetryAt takes one token at time now and reports whether there was one.
func (b *TokenBucket) allowRetryAt(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens < 1 {
		b.refused++
		return false
	}
	b.tokens--
	b.retries++
	return true
}

// recordRequestAt counts a request. It adds no token.
func (b *TokenBucket) recordRequestAt(now time.Time) {
	b.mu.Lock()
	b.refill(now)
	b.requests++
	b.mu.Unlock()
}

// RecordRequest counts a request. It adds no token.
func (b *TokenBucket) RecordRequest(context.Context) { b.recordRequestAt(time.Now()) }

// AllowRetry takes one token, and reports whether there was one. Its error
// is always nil.
func (b *TokenBucket) AllowRetry(context.Context) (bool, error) {
	return b.allowRetryAt(time.Now()), nil
}

// Snapshot returns the counters and the tokens available now.
func (b *TokenBucket) Snapshot() BudgetSnapshot { return b.snapshotAt(time.Now()) }

func (b *TokenBucket) snapshotAt(now time.Time) BudgetSnapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return BudgetSnapshot{
		Requests:  b.requests,
		Retries:   b.retries,
		Refused:   b.refused,
		Available: b.tokens,
	}
}
