package retryfuse

import (
	"context"
	"math"
	"sync"
	"time"
)

// This file owns the shared retry budgets: the Budget interface and the
// budgets the package ships (RatioBudget, TokenBucket, UnlimitedBudget).
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
	_ Budget = UnlimitedBudget{}
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

// UnlimitedBudget never refuses (use it to turn budgets off). Its zero value
// is ready to use. This type is concurrency safe.
type UnlimitedBudget struct{}

// RecordRequest does nothing.
func (UnlimitedBudget) RecordRequest(context.Context) {}

// AllowRetry always grants the retry.
func (UnlimitedBudget) AllowRetry(context.Context) (bool, error) { return true, nil }

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
// Create it with NewTokenBucket. This type is concurrency safe.
type TokenBucket struct {
	capacity float64
	perNano  float64 // tokens added per nanosecond
	now      func() time.Time

	mu       sync.Mutex
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
	if cfg.Capacity == 0 {
		cfg.Capacity = 10
	}
	if cfg.Capacity < 1 {
		return nil, invalidPolicy("TokenBucketConfig.Capacity", "is below 1, so no retry could ever be granted")
	}
	if cfg.Refill == 0 {
		cfg.Refill = 1
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	return &TokenBucket{
		capacity: cfg.Capacity,
		perNano:  cfg.Refill / float64(cfg.Interval),
		now:      time.Now,
		tokens:   cfg.Capacity,
	}, nil
}

// refill adds the credit earned since the latest time seen. b.mu is held.
func (b *TokenBucket) refill(now time.Time) {
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

// RecordRequest counts a request at the current time.
func (b *TokenBucket) RecordRequest(context.Context) { b.RecordRequestAt(b.now()) }

// AllowRetry takes one token at the current time. Its error is always nil.
func (b *TokenBucket) AllowRetry(context.Context) (bool, error) {
	return b.AllowRetryAt(b.now()), nil
}

// Snapshot returns the counters and the tokens available at the current time.
func (b *TokenBucket) Snapshot() BudgetSnapshot {
	now := b.now()
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

// ratioBuckets is the number of time buckets a RatioBudget divides its
// Window into. A deposit expires whole with its bucket, so it lives between
// (1-1/ratioBuckets)·Window and Window.
const ratioBuckets = 10

// RatioBudget allows retries in proportion to requests, in the manner of
// Finagle's RetryBudget and gRPC's retry throttling. It is the recommended
// budget. This type is concurrency safe.
//
// Each request deposits Ratio of a retry, and the deposit lives for Window.
// Each retry withdraws one whole retry, which is likewise counted for Window.
// On top of the deposits a fixed reserve of MinPerSecond·Window (in seconds)
// retries per window lets a service with little traffic retry at all. With
// Q requests recorded and G retries granted within the last Window, a retry
// is granted when the balance covers it:
//
//	G + 1 ≤ Ratio·Q + MinPerSecond·Window
//
// so over every window G ≤ Ratio·Q + reserve, and the attempts sent, first
// attempts included, are at most (1+Ratio)·Q + reserve. The bound holds for
// the total, however many callers share the budget and however many retries
// each would like: when a dependency fails for everyone, retries add at most
// Ratio (10% by default) to its load, plus the reserve. A TokenBucket, by
// contrast, grants a fixed rate: too few retries for a busy service, too many
// for a quiet one. With the defaults, 100 callers failing at the same instant
// send at most 100 + 10 + 10 = 120 attempts.
//
// The window slides in steps of Window/10: a ring of ten buckets holds the
// counts, and buckets whose time has passed are emptied lazily when the
// budget is next used. Memory is constant, and there is no goroutine.
//
// Create it with NewRatioBudget.
type RatioBudget struct {
	ratio   float64
	reserve float64
	width   time.Duration // time span of one bucket
	now     func() time.Time

	mu      sync.Mutex
	started bool
	origin  time.Time // time of the first call: bucket ticks count from here
	head    int64     // tick of the newest bucket
	next    time.Time // when the tick after head begins
	ring    [ratioBuckets]ratioBucket
	winReq  uint64 // requests in the ring
	winRet  uint64 // retries in the ring
	// Totals since creation.
	requests uint64
	retries  uint64
	refused  uint64
}

type ratioBucket struct {
	requests uint64
	retries  uint64
}

// RatioBudgetConfig configures a RatioBudget. The zero value is valid: 10%
// retries, at least one retry per second, over a 10-second window.
type RatioBudgetConfig struct {
	// Ratio is the retry credit each request deposits, in retries; zero
	// means 0.1. Must not be negative.
	Ratio float64
	// MinPerSecond sets the reserve, MinPerSecond·Window retries per window,
	// granted whatever the traffic; zero means 1. A negative value means no
	// reserve: retries then come from deposits alone, and a lone request
	// cannot retry until 1/Ratio requests have been recorded in the window
	// (the convention of net.Dialer.KeepAlive, where negative turns a
	// feature off).
	MinPerSecond float64
	// Window is how long a request's deposit (and a retry's withdrawal)
	// counts; zero means 10 seconds. It must be at least 10ns.
	Window time.Duration
}

// NewRatioBudget returns an empty RatioBudget. A negative, NaN or infinite
// Ratio, a NaN or infinite MinPerSecond, or a negative or too short Window
// gives an error wrapping ErrInvalidPolicy that names the field.
func NewRatioBudget(cfg RatioBudgetConfig) (*RatioBudget, error) {
	if err := checkFinite("RatioBudgetConfig.Ratio", cfg.Ratio); err != nil {
		return nil, err
	}
	// A negative MinPerSecond is allowed (no reserve), so only its size is checked.
	if err := checkFinite("RatioBudgetConfig.MinPerSecond", math.Abs(cfg.MinPerSecond)); err != nil {
		return nil, err
	}
	switch {
	case cfg.Window < 0:
		return nil, invalidPolicy("RatioBudgetConfig.Window", "is negative")
	case cfg.Window == 0:
		cfg.Window = 10 * time.Second
	case cfg.Window < ratioBuckets:
		return nil, invalidPolicy("RatioBudgetConfig.Window", "is shorter than 10ns, the least that divides into 10 buckets")
	}
	if cfg.Ratio == 0 {
		cfg.Ratio = 0.1
	}
	switch {
	case cfg.MinPerSecond == 0:
		cfg.MinPerSecond = 1
	case cfg.MinPerSecond < 0:
		cfg.MinPerSecond = 0
	}
	return &RatioBudget{
		ratio:   cfg.Ratio,
		reserve: cfg.MinPerSecond * cfg.Window.Seconds(),
		width:   cfg.Window / ratioBuckets,
		now:     time.Now,
	}, nil
}

// advance empties the buckets whose time has passed. b.mu is held.
func (b *RatioBudget) advance(now time.Time) {
	if !b.started {
		b.started, b.origin, b.next = true, now, now.Add(b.width)
		return
	}
	if now.Before(b.next) {
		return // same bucket, or time went backwards: no time has passed
	}
	tick := int64(now.Sub(b.origin) / b.width)
	if tick <= b.head {
		return // Sub saturates some 292 years after the first call
	}
	if tick-b.head >= ratioBuckets {
		b.ring = [ratioBuckets]ratioBucket{}
		b.winReq, b.winRet = 0, 0
	} else {
		for t := b.head + 1; t <= tick; t++ {
			bk := &b.ring[t%ratioBuckets]
			b.winReq -= bk.requests
			b.winRet -= bk.retries
			*bk = ratioBucket{}
		}
	}
	b.head = tick
	b.next = b.origin.Add(time.Duration(tick) * b.width).Add(b.width)
}

// balance is the retry credit left in the window. b.mu is held.
func (b *RatioBudget) balance() float64 {
	return b.ratio*float64(b.winReq) + b.reserve - float64(b.winRet)
}

// AllowRetryAt withdraws one retry at time now and reports whether the
// balance covered it.
func (b *RatioBudget) AllowRetryAt(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	if b.balance() < 1-snapEpsilon {
		b.refused++
		return false
	}
	b.ring[b.head%ratioBuckets].retries++
	b.winRet++
	b.retries++
	return true
}

// RecordRequestAt deposits one request's credit at time now.
func (b *RatioBudget) RecordRequestAt(now time.Time) {
	b.mu.Lock()
	b.advance(now)
	b.ring[b.head%ratioBuckets].requests++
	b.winReq++
	b.requests++
	b.mu.Unlock()
}

// RecordRequest deposits one request's credit at the current time.
func (b *RatioBudget) RecordRequest(context.Context) { b.RecordRequestAt(b.now()) }

// AllowRetry withdraws one retry at the current time. Its error is always nil.
func (b *RatioBudget) AllowRetry(context.Context) (bool, error) {
	return b.AllowRetryAt(b.now()), nil
}

// Snapshot returns the counters and the balance at the current time.
func (b *RatioBudget) Snapshot() BudgetSnapshot {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return BudgetSnapshot{
		Requests:  b.requests,
		Retries:   b.retries,
		Refused:   b.refused,
		Available: max(0, snap(b.balance())),
	}
}
