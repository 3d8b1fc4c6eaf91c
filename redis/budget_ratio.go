package retryfuseredis

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/budget"
)

//go:embed lua/ratio.lua
var ratioSource string

var ratioScript = redis.NewScript(ratioSource)

// Defaults of budget.RatioConfig, resolved here as there.
const (
	defaultRatio        = 0.1
	defaultMinPerSecond = 1
	defaultWindow       = 10 * time.Second
	ratioBuckets        = 10
)

// RatioBudget is a budget.Ratio kept in Redis, shared by every
// process that uses the same Redis, key prefix and name: each request
// deposits Ratio of a retry for Window, each retry withdraws one, and a
// reserve of MinPerSecond·Window retries per window lets a quiet service
// retry at all.
//
// Every RecordRequest and AllowRetry is answered in memory, never waiting
// on Redis. Requests are counted locally and deposited once per
// SyncInterval, by a goroutine that the constructor starts and Close
// stops, in one script call (EVALSHA) that also leases retries: Redis
// grants a lease while R + lease ≤ Ratio·Q + reserve, with Q requests and
// R retries (leased or charged) in the last Window, summed over every
// process, and counts the lease as retries at once. AllowRetry spends the
// lease. A lease is sized to the local rate of retries asked for (enough
// for two intervals, at most MaxLease); half-way to its expiry (0.8·Window)
// or once the process has asked for no retry for two intervals, what is
// left is given back. The first retry of a process that asked for none in
// the last Window is granted on credit, and charged at the next sync. A
// retry asked for with no lease left is refused, and brings the next sync
// forward.
//
// So over any Window, with P processes, the retries granted by the fleet
// are at most
//
//	Ratio·Q' + reserve + P·(MaxLease + 1)
//
// where Q' counts the requests deposited in the window: those recorded
// in it and in the SyncInterval before it. MaxLease + 1 is what one
// process may hold, or owe, from an earlier window; in practice a process
// holds about two intervals of its own retries, so the term is near
// 2·SyncInterval/Window of the budget when every process is busy
// (2% with the defaults), and near zero when few are.
//
// While Redis does not answer, AllowRetry answers from the fail-safe (see
// AllowRetry) and the goroutine probes Redis with backoff (from
// SyncInterval, doubling, up to a second); the shared budget is back with
// the first sync that succeeds.
//
// The key expires after Window (plus one bucket) without a sync: by then
// every count in it has left the window.
//
// Create it with NewRatioBudget, and Close it. This type is concurrency
// safe.
type RatioBudget struct {
	s *shared
}

var _ budget.Budget = (*RatioBudget)(nil)

// NewRatioBudget returns the ratio budget called name, and starts its
// sync goroutine: Close stops it. cfg is validated as
// budget.NewRatio does, and its Window must also be at least 10µs
// (the scripts count time in microseconds). A nil client, a client
// without ContextTimeoutEnabled, an empty name or an invalid option
// (negative Timeout, SyncInterval or MaxLease, unknown FailSafe) gives an
// error wrapping retryfuse.ErrInvalidPolicy.
func NewRatioBudget(client redis.UniversalClient, name string, cfg budget.RatioConfig, opts BudgetOptions) (*RatioBudget, error) {
	b, err := newRatioBudget(client, name, cfg, opts)
	if err != nil {
		return nil, err
	}
	b.s.start()
	return b, nil
}

// newRatioBudget returns the budget without starting its goroutine.
func newRatioBudget(client redis.UniversalClient, name string, cfg budget.RatioConfig, opts BudgetOptions) (*RatioBudget, error) {
	local, err := budget.NewRatio(cfg) // validates cfg
	if err != nil {
		return nil, err
	}
	if cfg.Window > 0 && cfg.Window < ratioBuckets*time.Microsecond {
		return nil, invalid("budget.RatioConfig.Window", "is shorter than 10µs, the least the Redis budget can count")
	}
	s, err := newShared(client, name, opts)
	if err != nil {
		return nil, err
	}
	if s.failSafe == FailSafeLocal {
		s.local = local
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
	s.kind = &ratioKind{args: []any{formatFloat(ratio), formatFloat(reserve), fmt.Sprint(int64(width)), ceilMillis(addSat(window, width))}}
	s.leaseTTL = window - 2*width
	s.quiet = max(window, s.interval)
	return &RatioBudget{s: s}, nil
}

// Key returns the budget's Redis key: Prefix + "{" + name + "}".
func (b *RatioBudget) Key() string { return b.s.key }

// RecordRequest counts one request, in memory: it is deposited in Redis
// at the next sync (and counted by the local fallback budget too, so that
// it is warm when it is needed).
func (b *RatioBudget) RecordRequest(ctx context.Context) { b.s.recordRequest(ctx) }

// AllowRetry takes one retry from the local lease, never waiting on Redis.
//
// While Redis does not answer (since a sync failed, until one succeeds)
// ok is the fail-safe's answer. The change is reported once each way: the
// first AllowRetry after a failed sync returns an error wrapping
// ErrUnavailable (the transport reports it through
// Hooks.EvidenceUnavailable), the next ones a nil error; and the first
// AllowRetry after Redis answers again returns an error wrapping
// ErrRecovered, with ok the shared budget's answer. After Close, ok is
// the fail-safe's answer.
func (b *RatioBudget) AllowRetry(ctx context.Context) (ok bool, err error) {
	return b.s.allowRetry(ctx)
}

// Close stops the sync goroutine, then deposits the requests not yet
// deposited and gives back the unused lease, within ctx's deadline and the
// Timeout. Its error wraps ErrUnavailable when Redis did not answer. When
// ctx had already ended and there was something to send, it sends
// nothing and its error wraps ErrContextEnded: the requests not yet
// deposited are not counted, and a lease not given back is lost to the
// other processes until it expires. Later calls do nothing.
func (b *RatioBudget) Close(ctx context.Context) error { return b.s.close(ctx) }

// ratioKind is the script call of a ratio budget.
type ratioKind struct {
	args []any // ratio, reserve, bucket width, expiry
	// now, when set, is passed to the script as the time (a test seam);
	// nil means the server's clock.
	now func() time.Time
}

func (k *ratioKind) sync(ctx context.Context, c redis.UniversalClient, key string, n, credit, back, backTick, want int64) (int64, int64, error) {
	args := append([]any{n, credit, back, backTick, want}, k.args...)
	if k.now != nil {
		args = append(args, micros(k.now()))
	}
	return runSync(ctx, c, ratioScript, key, args)
}

// runSync runs a sync script and reads its reply, {leased, tick}.
func runSync(ctx context.Context, c redis.UniversalClient, s *redis.Script, key string, args []any) (int64, int64, error) {
	v, err := s.Run(ctx, c, []string{key}, args...).Result()
	if err != nil {
		return 0, 0, unavailable(c, "", err)
	}
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return 0, 0, unexpected(v)
	}
	leased, ok1 := pair[0].(int64)
	tick, ok2 := pair[1].(int64)
	if !ok1 || !ok2 || leased < 0 {
		return 0, 0, unexpected(v)
	}
	return leased, tick, nil
}
