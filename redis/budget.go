package retryfuseredis

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/budget"
)

// This file holds what both Redis budgets share: their options, and the
// local state every call is answered from.

// DefaultBudgetPrefix is put before a budget's name to make its key when
// BudgetOptions.Prefix is empty.
const DefaultBudgetPrefix = "retryfuse:budget:"

// DefaultSyncInterval is how often a budget syncs with Redis when
// BudgetOptions.SyncInterval is zero.
const DefaultSyncInterval = 100 * time.Millisecond

// DefaultMaxLease is the most retries a budget leases at once when
// BudgetOptions.MaxLease is zero.
const DefaultMaxLease = 256

// BudgetOptions configures how a Redis budget talks to Redis. The zero
// value is valid.
type BudgetOptions struct {
	// Prefix is put before the budget's name to make its Redis key:
	// Prefix + "{" + name + "}", the name being the key's hash tag. Empty
	// means DefaultBudgetPrefix. Budgets of different kinds, or of the
	// same kind with different settings, must not share a key.
	Prefix string
	// Timeout bounds each Redis call (all of them run in the background).
	// Zero means DefaultTimeout (50ms). Must not be negative.
	Timeout time.Duration
	// FailSafe is the answer of AllowRetry while Redis cannot give one.
	// The zero value is FailSafeLocal.
	FailSafe FailSafe
	// SyncInterval is how often the budget syncs with Redis: one script
	// call that deposits the requests recorded since the last, and leases
	// retries. A retry asked for with no lease left may bring the next
	// sync forward, to half an interval after the last; so a budget sends
	// Redis at most 2/SyncInterval commands per second, whatever the
	// request rate. Zero means DefaultSyncInterval (100ms: at most 20 per
	// second). Must not be negative.
	SyncInterval time.Duration
	// MaxLease is the most retries the budget leases from Redis at once.
	// Each lease is sized to the local rate of retries asked for (enough
	// for two intervals), between 1 and MaxLease. It is the error term of
	// the fleet's bound: each process may hold up to MaxLease retries
	// leased in an earlier window. Zero means DefaultMaxLease (256). Must
	// not be negative.
	MaxLease int
	// RedisLogger, when not nil, receives go-redis's own log lines (such
	// as "failed to dial after 5 attempts", which go-redis writes to
	// stderr by default), at level Warn. go-redis has one logger for the
	// whole process (redis.SetLogger): the constructor sets it, so it
	// applies to every go-redis client in the process, and the last
	// budget made with a RedisLogger wins. Pass
	// slog.New(slog.DiscardHandler) to silence them. Nil leaves
	// go-redis's logger as it is.
	RedisLogger *slog.Logger
}

// ErrRecovered is wrapped by the error of the first AllowRetry after Redis
// answers again, once an earlier AllowRetry reported it unavailable: the
// shared budget is back, and ok is its real answer.
var ErrRecovered = errors.New("retryfuseredis: redis available again")

// kind is what tells a ratio budget from a token bucket: its script call,
// and its local fallback.
type kind interface {
	// sync runs the script once: deposit n requests, charge credit
	// retries, give back back retries leased at tick backTick, and lease
	// up to want. It returns the retries leased and their tick.
	sync(ctx context.Context, c redis.UniversalClient, key string, n, credit, back, backTick, want int64) (leased, tick int64, err error)
}

// shared is the local side of a Redis budget: every call is answered from
// it, and a goroutine (see budget_sync.go) syncs it with Redis.
type shared struct {
	client   redis.UniversalClient
	key      string
	kind     kind
	timeout  time.Duration
	interval time.Duration
	maxLease int64
	failSafe FailSafe
	local    budget.Budget // the FailSafeLocal fallback; nil for the other modes
	// leaseTTL is how long leased retries may be spent (0: for ever);
	// quiet is how long without a retry asked for makes a process quiet,
	// so that its next retry is granted on credit (at least an interval).
	leaseTTL, quiet time.Duration
	now             func() time.Time

	pending atomic.Int64  // requests recorded since the last sync
	wake    chan struct{} // asks the sync goroutine for an early sync
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when the sync goroutine returns; nil until start
	once    sync.Once

	mu       sync.Mutex
	held     int64     // retries leased and not yet granted
	tick     int64     // the tick of the oldest of them
	leasedAt time.Time // when the oldest of them was leased
	asks     int64     // AllowRetry calls since the last lease
	askedAt  time.Time // the latest AllowRetry call
	sinceAt  time.Time // start of the asks count
	credit   int64     // retries granted on credit, not yet charged
	state    state
}

// state is the budget's view of Redis, and what AllowRetry still has to
// report about it.
type state struct {
	down         bool  // the latest sync failed: answer from the fail-safe
	downReported bool  // an AllowRetry has returned the failure
	upToReport   bool  // Redis is back after a reported failure
	cause        error // the failure, wrapping ErrUnavailable
	closed       bool  // Close was called
}

func newShared(client redis.UniversalClient, name string, opts BudgetOptions) (*shared, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, invalid("budget name", "is empty")
	}
	timeout, err := resolveTimeout("BudgetOptions.Timeout", opts.Timeout)
	if err != nil {
		return nil, err
	}
	if opts.FailSafe > FailSafeAllow {
		return nil, invalid("BudgetOptions.FailSafe", "is "+opts.FailSafe.String()+", not a known mode")
	}
	interval := opts.SyncInterval
	switch {
	case interval < 0:
		return nil, invalid("BudgetOptions.SyncInterval", "must not be negative")
	case interval == 0:
		interval = DefaultSyncInterval
	}
	maxLease := int64(opts.MaxLease)
	switch {
	case maxLease < 0:
		return nil, invalid("BudgetOptions.MaxLease", "must not be negative")
	case maxLease == 0:
		maxLease = DefaultMaxLease
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultBudgetPrefix
	}
	if opts.RedisLogger != nil {
		redis.SetLogger(slogLogger{opts.RedisLogger})
	}
	watchDials(client)
	return &shared{
		client:   client,
		key:      prefix + "{" + name + "}",
		timeout:  timeout,
		interval: interval,
		maxLease: maxLease,
		failSafe: opts.FailSafe,
		now:      time.Now,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}, nil
}

// recordRequest counts one request, to deposit at the next sync.
func (s *shared) recordRequest(ctx context.Context) {
	s.pending.Add(1)
	if s.local != nil {
		s.local.RecordRequest(ctx)
	}
}

// allowRetry answers from the lease, or from the fail-safe while Redis is
// down; it never waits on Redis. Its error reports a change of Redis's
// state, once each way (see RatioBudget.AllowRetry).
func (s *shared) allowRetry(ctx context.Context) (bool, error) {
	now := s.now()
	s.mu.Lock()
	quiet := s.askedAt.IsZero() || now.Sub(s.askedAt) >= s.quiet
	s.askedAt = now
	s.asks++
	if s.state.down || s.state.closed {
		var err error
		if s.state.down && !s.state.downReported {
			s.state.downReported = true
			err = s.state.cause
		}
		s.mu.Unlock()
		return s.fallback(ctx), err
	}
	var err error
	if s.state.upToReport {
		s.state.upToReport = false
		err = ErrRecovered
	}
	ok, fromLease := false, false
	switch {
	case s.held > 0 && (s.leaseTTL == 0 || now.Sub(s.leasedAt) < s.leaseTTL):
		s.held--
		ok, fromLease = true, true
	case quiet && s.credit == 0:
		// The first retry of a quiet process is granted on credit, and
		// charged at the next sync: it could not have a lease yet.
		s.credit++
		ok = true
	}
	// No lease left (or an expired one): ask for the next sync sooner.
	empty := !fromLease || s.held == 0
	s.mu.Unlock()
	if ok && s.local != nil {
		// The fallback counts this process's retries too, so that when it
		// answers it grants what a budget without Redis would have left.
		_, _ = s.local.AllowRetry(ctx)
	}
	if empty {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return ok, err
}

// fallback is the fail-safe's answer.
func (s *shared) fallback(ctx context.Context) bool {
	switch s.failSafe {
	case FailSafeRefuse:
		return false
	case FailSafeAllow:
		return true
	}
	ok, _ := s.local.AllowRetry(ctx) // an in-memory budget never fails
	return ok
}
