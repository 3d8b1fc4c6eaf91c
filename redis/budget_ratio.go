package retryfuseredis

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
)

//go:embed lua/ratio.lua
var ratioSource string

var ratioScript = redis.NewScript(ratioSource)

// Defaults of retryfuse.RatioBudgetConfig, resolved here as there.
const (
	defaultRatio        = 0.1
	defaultMinPerSecond = 1
	defaultWindow       = 10 * time.Second
	ratioBuckets        = 10
)

// RatioBudget is a retryfuse.RatioBudget kept in Redis, shared by every
// process that uses the same client, key prefix and name: each request
// deposits Ratio of a retry for Window, each retry withdraws one, and a
// reserve of MinPerSecond·Window retries per window lets a quiet service
// retry at all. With Q requests and G retries in the last Window, summed
// over every process, a retry is granted when G + 1 ≤ Ratio·Q + reserve.
//
// Both RecordRequest and AllowRetry are one round trip each: one script
// (EVALSHA) that slides the window (ten buckets) by the server's clock,
// counts, and refreshes the key's expiry. So a call that is not retried
// costs one round trip, and each retry one more.
//
// The key expires after Window (plus one bucket) without use: by then
// every count in it has left the window.
//
// Create it with NewRatioBudget. This type is concurrency safe.
type RatioBudget struct {
	r         remote
	local     *retryfuse.RatioBudget // also records requests, to be warm when it is needed
	reqArgs   []any
	retryArgs []any
}

var _ retryfuse.Budget = (*RatioBudget)(nil)

// NewRatioBudget returns the ratio budget called name. cfg is validated as
// retryfuse.NewRatioBudget does, and its Window must also be at least 10µs
// (the scripts count time in microseconds). A nil client, a client without
// ContextTimeoutEnabled, an empty name or an invalid option gives an error
// wrapping retryfuse.ErrInvalidPolicy.
func NewRatioBudget(client redis.UniversalClient, name string, cfg retryfuse.RatioBudgetConfig, opts BudgetOptions) (*RatioBudget, error) {
	local, err := retryfuse.NewRatioBudget(cfg) // validates cfg
	if err != nil {
		return nil, err
	}
	if cfg.Window > 0 && cfg.Window < ratioBuckets*time.Microsecond {
		return nil, invalid("RatioBudgetConfig.Window", "is shorter than 10µs, the least the Redis budget can count")
	}
	r, err := newRemote(client, name, opts)
	if err != nil {
		return nil, err
	}
	b := &RatioBudget{r: r}
	if r.failSafe == FailSafeLocal {
		b.local, b.r.local = local, local
	}
	ratio := orDefault(cfg.Ratio, defaultRatio)
	window := orDefault(cfg.Window, defaultWindow)
	var reserve float64
	switch {
	case cfg.MinPerSecond == 0:
		reserve = defaultMinPerSecond * window.Seconds()
	case cfg.MinPerSecond > 0:
		reserve = cfg.MinPerSecond * window.Seconds()
	}
	width := window / ratioBuckets
	common := []any{formatFloat(ratio), formatFloat(reserve), fmt.Sprint(int64(width)), ceilMillis(addSat(window, width))}
	b.reqArgs = append([]any{"request"}, common...)
	b.retryArgs = append([]any{"retry"}, common...)
	return b, nil
}

// Key returns the budget's Redis key.
func (b *RatioBudget) Key() string { return b.r.key() }

// RecordRequest deposits one request's credit. When Redis cannot answer,
// the deposit is lost to the shared budget (which then grants fewer
// retries, never more); the local fallback budget records every request
// either way, so that it is ready when it is needed. RecordRequest has no
// error to return: the failure shows at the next AllowRetry, which will
// most likely meet it too.
func (b *RatioBudget) RecordRequest(ctx context.Context) {
	if b.local != nil {
		b.local.RecordRequest(ctx)
	}
	_, _ = b.r.call(ctx, ratioScript, b.reqArgs)
}

// AllowRetry withdraws one retry. A non-nil error (wrapping
// ErrUnavailable) means Redis could not answer within the timeout, and ok
// is the fail-safe's answer.
func (b *RatioBudget) AllowRetry(ctx context.Context) (ok bool, err error) {
	return b.r.allowRetry(ctx, ratioScript, b.retryArgs)
}

// RatioBudgets returns a function for retryfuse.Transport.NewBudget that
// gives each scope the RatioBudget named after it, so that every process
// using the same Redis shares one budget per dependency.
func RatioBudgets(client redis.UniversalClient, cfg retryfuse.RatioBudgetConfig, opts BudgetOptions) (func(scope string) (retryfuse.Budget, error), error) {
	if _, err := NewRatioBudget(client, "check", cfg, opts); err != nil {
		return nil, err
	}
	return func(scope string) (retryfuse.Budget, error) {
		return NewRatioBudget(client, scope, cfg, opts)
	}, nil
}

// TokenBuckets returns a function for retryfuse.Transport.NewBudget that
// gives each scope the TokenBucket named after it.
func TokenBuckets(client redis.UniversalClient, cfg retryfuse.TokenBucketConfig, opts BudgetOptions) (func(scope string) (retryfuse.Budget, error), error) {
	if _, err := NewTokenBucket(client, "check", cfg, opts); err != nil {
		return nil, err
	}
	return func(scope string) (retryfuse.Budget, error) {
		return NewTokenBucket(client, scope, cfg, opts)
	}, nil
}
