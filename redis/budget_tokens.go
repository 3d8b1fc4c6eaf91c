package retryfuseredis

import (
	"context"
	_ "embed"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/budget"
)

//go:embed lua/token_bucket.lua
var tokenBucketSource string

var tokenBucketScript = redis.NewScript(tokenBucketSource)

// Defaults of budget.TokenBucketConfig, resolved here as there.
const (
	defaultBucketCapacity = 10
	defaultBucketRefill   = 1
	defaultBucketInterval = time.Second
)

// TokenBucket is a budget.TokenBucket kept in Redis, shared by every
// process that uses the same Redis, key prefix and name: it holds up to
// Capacity tokens, starts full, gains Refill tokens per Interval, and each
// retry takes one token.
//
// AllowRetry is answered in memory, never waiting on Redis: it spends
// tokens leased from the shared bucket by a goroutine that the
// constructor starts and Close stops, in one script call (EVALSHA) at most
// every SyncInterval, and only while retries are asked for. A lease is
// sized to the local rate of retries asked for (enough for two intervals,
// at most MaxLease); once the process has asked for none for two
// intervals, what is left is given back. The first retry of a quiet
// process (one that asked for none during the time the bucket takes to
// earn a token) is granted on credit, and charged at the next sync (the bucket may go below zero: refills pay it back). A retry
// asked for with no lease left is refused, and brings the next sync
// forward. RecordRequest costs nothing: a token bucket adds no credit per
// request.
//
// So over any time T, with P processes, the fleet's retries are at most
// Capacity + Refill·T/Interval + P·(MaxLease + 1).
//
// While Redis does not answer, AllowRetry answers from the fail-safe (see
// RatioBudget.AllowRetry, which reports the change the same way) and the
// goroutine probes Redis with backoff; the shared bucket is back with the
// first sync that succeeds.
//
// The key expires when the bucket has been idle long enough to be full
// again (Capacity/Refill intervals, plus a second; at most the longest
// Duration, some 292 years): an expired bucket and a full one are the same.
//
// Create it with NewTokenBucket, and Close it. This type is concurrency
// safe.
type TokenBucket struct {
	s *shared
}

var _ budget.Budget = (*TokenBucket)(nil)

// NewTokenBucket returns the token bucket called name, and starts its
// sync goroutine: Close stops it. cfg is validated as
// budget.NewTokenBucket does; a nil client, a client without
// ContextTimeoutEnabled, an empty name or an invalid option (negative
// Timeout, SyncInterval or MaxLease, unknown FailSafe) gives an error
// wrapping retryfuse.ErrInvalidPolicy.
func NewTokenBucket(client redis.UniversalClient, name string, cfg budget.TokenBucketConfig, opts BudgetOptions) (*TokenBucket, error) {
	b, err := newTokenBucket(client, name, cfg, opts)
	if err != nil {
		return nil, err
	}
	b.s.start()
	return b, nil
}

// newTokenBucket returns the bucket without starting its goroutine.
func newTokenBucket(client redis.UniversalClient, name string, cfg budget.TokenBucketConfig, opts BudgetOptions) (*TokenBucket, error) {
	local, err := budget.NewTokenBucket(cfg) // validates cfg
	if err != nil {
		return nil, err
	}
	s, err := newShared(client, name, opts)
	if err != nil {
		return nil, err
	}
	if s.failSafe == FailSafeLocal {
		s.local = local
	}
	capacity := orDefault(cfg.Capacity, defaultBucketCapacity)
	refill := orDefault(cfg.Refill, defaultBucketRefill)
	interval := orDefault(cfg.Interval, defaultBucketInterval)
	perNano := refill / float64(interval)
	// Time for an empty bucket to fill: after it, the key holds nothing a
	// fresh bucket would not. Sooner, it would hand back unearned tokens;
	// so it is capped only by the longest Duration.
	fill := time.Duration(math.MaxInt64)
	if f := capacity / perNano; f < float64(math.MaxInt64) {
		fill = time.Duration(f)
	}
	// A process is quiet when it has asked for no retry during the time
	// the bucket takes to earn one token.
	s.quiet = time.Duration(math.MaxInt64)
	if q := 1 / perNano; q < float64(math.MaxInt64) {
		s.quiet = max(time.Duration(q), s.interval)
	}
	s.kind = &bucketKind{args: []any{formatFloat(capacity), formatFloat(perNano), ceilMillis(addSat(fill, time.Second))}}
	return &TokenBucket{s: s}, nil
}

// Key returns the bucket's Redis key: Prefix + "{" + name + "}".
func (b *TokenBucket) Key() string { return b.s.key }

// RecordRequest does nothing: a token bucket counts no credit per request.
func (b *TokenBucket) RecordRequest(context.Context) {}

// AllowRetry takes one token from the local lease, never waiting on
// Redis. Its answers and errors while Redis does not answer, and after,
// are those of RatioBudget.AllowRetry.
func (b *TokenBucket) AllowRetry(ctx context.Context) (ok bool, err error) {
	return b.s.allowRetry(ctx)
}

// Close stops the sync goroutine, then gives back the unused lease and
// charges the retries granted on credit, within ctx's deadline and the
// Timeout. Its error wraps ErrUnavailable when Redis did not answer. When
// ctx had already ended and there was something to send, it sends
// nothing and its error wraps ErrContextEnded: the requests not yet
// deposited are not counted, and a lease not given back is lost to the
// other processes until it expires. Later calls do nothing.
func (b *TokenBucket) Close(ctx context.Context) error { return b.s.close(ctx) }

// bucketKind is the script call of a token bucket.
type bucketKind struct {
	args []any // capacity, refill per nanosecond, expiry
	// now, when set, is passed to the script as the time (a test seam);
	// nil means the server's clock.
	now func() time.Time
}

func (k *bucketKind) sync(ctx context.Context, c redis.UniversalClient, key string, _, credit, back, _, want int64) (int64, int64, error) {
	args := append([]any{back, credit, want}, k.args...)
	if k.now != nil {
		args = append(args, micros(k.now()))
	}
	return runSync(ctx, c, tokenBucketScript, key, args)
}

func orDefault[T float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
