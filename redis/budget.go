package retryfuseredis

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
)

// This file holds what both Redis budgets share: their options, and the
// fail-safe applied when Redis cannot answer.

// DefaultBudgetPrefix is put before a budget's name to make its key when
// BudgetOptions.Prefix is empty.
const DefaultBudgetPrefix = "retryfuse:budget:"

// BudgetOptions configures how a Redis budget talks to Redis. The zero
// value is valid.
type BudgetOptions struct {
	// Prefix is put before the budget's name to make its Redis key. Empty
	// means DefaultBudgetPrefix. Budgets of different kinds, or of the same
	// kind with different settings, must not share a key.
	Prefix string
	// Timeout bounds each Redis call; the caller's context deadline, when
	// sooner, bounds it too. Zero means DefaultTimeout (50ms). Must not be
	// negative.
	Timeout time.Duration
	// FailSafe is the answer of AllowRetry when Redis cannot give one.
	// The zero value is FailSafeLocal.
	FailSafe FailSafe
}

// remote is the Redis side of a budget: the client, the key, the bound of
// each call and the fail-safe.
type remote struct {
	client   redis.UniversalClient
	keys     []string // the one key, as the scripts take it
	timeout  time.Duration
	failSafe FailSafe
	local    retryfuse.Budget // the FailSafeLocal fallback; nil for the other modes
	// now, when set, is passed to the scripts as the time (a test seam);
	// nil means the server's clock.
	now func() time.Time
}

func newRemote(client redis.UniversalClient, name string, opts BudgetOptions) (remote, error) {
	if err := checkClient(client); err != nil {
		return remote{}, err
	}
	if name == "" {
		return remote{}, invalid("budget name", "is empty")
	}
	timeout, err := resolveTimeout("BudgetOptions.Timeout", opts.Timeout)
	if err != nil {
		return remote{}, err
	}
	if opts.FailSafe > FailSafeAllow {
		return remote{}, invalid("BudgetOptions.FailSafe", "is "+opts.FailSafe.String()+", not a known mode")
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultBudgetPrefix
	}
	return remote{client: client, keys: []string{prefix + name}, timeout: timeout, failSafe: opts.FailSafe}, nil
}

// key returns the Redis key of the budget.
func (r *remote) key() string { return r.keys[0] }

// call runs script with args (plus the test clock, when set) and returns
// its verdict, or an error wrapping ErrUnavailable.
func (r *remote) call(ctx context.Context, s *redis.Script, args []any) (bool, error) {
	if r.now != nil {
		args = append(args[:len(args):len(args)], micros(r.now()))
	}
	v, err := run(ctx, r.client, r.timeout, s, r.keys, args...)
	if err != nil {
		return false, err
	}
	n, ok := v.(int64)
	if !ok {
		return false, unexpected(v)
	}
	return n == 1, nil
}

// allowRetry runs a retry check; when Redis cannot answer, it returns the
// fail-safe's answer with the error.
func (r *remote) allowRetry(ctx context.Context, s *redis.Script, args []any) (bool, error) {
	ok, err := r.call(ctx, s, args)
	if err == nil {
		return ok, nil
	}
	switch r.failSafe {
	case FailSafeRefuse:
		return false, err
	case FailSafeAllow:
		return true, err
	}
	ok, _ = r.local.AllowRetry(ctx) // an in-memory budget never fails
	return ok, err
}
