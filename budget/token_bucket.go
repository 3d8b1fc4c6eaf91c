package budget

import (
	"context"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// TokenBucket is a budget of retry tokens: it holds up to Capacity tokens,
// starts full, gains Refill tokens per Interval, and each retry takes one
// token. Requests are counted but add nothing: the retry rate it allows is
// the same whether one request or a million share it, which is why
// Ratio is the recommended budget and TokenBucket the simple one.
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
	if err := sentinel.Finite("TokenBucketConfig.Capacity", cfg.Capacity); err != nil {
		return nil, err
	}
	if err := sentinel.Finite("TokenBucketConfig.Refill", cfg.Refill); err != nil {
		return nil, err
	}
	if cfg.Interval < 0 {
		return nil, sentinel.InvalidPolicy("TokenBucketConfig.Interval", "is negative")
	}
	capacity := orDefault(cfg.Capacity, defaultTokenCapacity)
	if capacity < 1 {
		return nil, sentinel.InvalidPolicy("TokenBucketConfig.Capacity", "is below 1, so no retry could ever be granted")
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

// AllowRetryAt takes one token at time now and reports whether there was one.
func (b *TokenBucket) AllowRetryAt(now time.Time) bool {
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

// RecordRequestAt counts a request. It adds no token.
func (b *TokenBucket) RecordRequestAt(now time.Time) {
	b.mu.Lock()
	b.refill(now)
	b.requests++
	b.mu.Unlock()
}

// RecordRequest counts a request. It adds no token.
func (b *TokenBucket) RecordRequest(context.Context) { b.RecordRequestAt(time.Now()) }

// AllowRetry takes one token, and reports whether there was one. Its error
// is always nil.
func (b *TokenBucket) AllowRetry(context.Context) (bool, error) {
	return b.AllowRetryAt(time.Now()), nil
}

// Snapshot returns the counters and the tokens available now.
func (b *TokenBucket) Snapshot() Snapshot { return b.SnapshotAt(time.Now()) }

// SnapshotAt returns the counters and the tokens available at time now.
func (b *TokenBucket) SnapshotAt(now time.Time) Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return Snapshot{
		Requests:  b.requests,
		Retries:   b.retries,
		Refused:   b.refused,
		Available: b.tokens,
	}
}
