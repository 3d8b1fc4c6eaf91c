package retryfuseredis

import (
	"context"
	_ "embed"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
)

//go:embed lua/token_bucket.lua
var tokenBucketSource string

var tokenBucketScript = redis.NewScript(tokenBucketSource)

// Defaults of retryfuse.TokenBucketConfig, resolved here as there.
const (
	defaultBucketCapacity = 10
	defaultBucketRefill   = 1
	defaultBucketInterval = time.Second
)

// TokenBucket is a retryfuse.TokenBucket kept in Redis, shared by every
// process that uses the same client, key prefix and name: it holds up to
// Capacity tokens, starts full, gains Refill tokens per Interval, and each
// retry takes one token.
//
// AllowRetry is one round trip: one script (EVALSHA) that refills the
// bucket from the server's clock, takes a token, and refreshes the key's
// expiry. RecordRequest costs nothing: a token bucket adds no credit per
// request, so it does not go to Redis.
//
// The key expires when the bucket has been idle long enough to be full
// again (Capacity/Refill intervals, plus a second; at most the longest
// Duration, some 292 years): an expired bucket and a full one are the same.
//
// Create it with NewTokenBucket. This type is concurrency safe.
type TokenBucket struct {
	r    remote
	args []any
}

var _ retryfuse.Budget = (*TokenBucket)(nil)

// NewTokenBucket returns the token bucket called name. cfg is validated as
// retryfuse.NewTokenBucket does; a nil client, a client without
// ContextTimeoutEnabled, an empty name or an invalid option gives an error
// wrapping retryfuse.ErrInvalidPolicy.
func NewTokenBucket(client redis.UniversalClient, name string, cfg retryfuse.TokenBucketConfig, opts BudgetOptions) (*TokenBucket, error) {
	local, err := retryfuse.NewTokenBucket(cfg) // validates cfg
	if err != nil {
		return nil, err
	}
	r, err := newRemote(client, name, opts)
	if err != nil {
		return nil, err
	}
	if r.failSafe == FailSafeLocal {
		r.local = local
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
	return &TokenBucket{
		r:    r,
		args: []any{formatFloat(capacity), formatFloat(perNano), ceilMillis(addSat(fill, time.Second))},
	}, nil
}

// Key returns the bucket's Redis key.
func (b *TokenBucket) Key() string { return b.r.key() }

// RecordRequest does nothing: a token bucket counts no credit per request.
func (b *TokenBucket) RecordRequest(context.Context) {}

// AllowRetry takes one token. A non-nil error (wrapping ErrUnavailable)
// means Redis could not answer within the timeout, and ok is the
// fail-safe's answer.
func (b *TokenBucket) AllowRetry(ctx context.Context) (ok bool, err error) {
	return b.r.allowRetry(ctx, tokenBucketScript, b.args)
}

func orDefault[T float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
