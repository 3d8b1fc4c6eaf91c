package retryfuseredis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
)

// This file holds what the budgets and the ledger share: the fail-safe
// modes, the bounded Redis call, and the checks of options and clients.

// ErrUnavailable is wrapped by every error of a Redis call that failed or
// did not answer in time: the shared evidence is unavailable, and a
// fail-safe applied. When the call got no answer and the client's last
// dial had failed, the error wraps that dial's error too, and says so
// ("last connection attempt: dial tcp ...: connect: connection refused"):
// errors.Is(err, syscall.ECONNREFUSED) holds.
var ErrUnavailable = errors.New("retryfuseredis: redis unavailable")

// DefaultTimeout bounds each Redis call when a Timeout option is zero.
const DefaultTimeout = 50 * time.Millisecond

// FailSafe is what a budget answers when Redis cannot.
type FailSafe uint8

const (
	// FailSafeLocal, the default, answers from a local in-memory budget
	// with the same settings (budget.Ratio or
	// budget.TokenBucket), which bounds this process's retries as a
	// budget without Redis would.
	FailSafeLocal FailSafe = iota
	// FailSafeRefuse refuses every retry while Redis cannot answer.
	FailSafeRefuse
	// FailSafeAllow grants every retry while Redis cannot answer (the
	// transport's other limits still apply).
	FailSafeAllow
)

func (f FailSafe) String() string {
	switch f {
	case FailSafeLocal:
		return "local"
	case FailSafeRefuse:
		return "refuse"
	case FailSafeAllow:
		return "allow"
	}
	return "FailSafe(" + strconv.Itoa(int(f)) + ")"
}

func invalid(field, problem string) error {
	return fmt.Errorf("%w: retryfuseredis: %s %s", retryfuse.ErrInvalidPolicy, field, problem)
}

// checkClient refuses a nil client, and a go-redis client that would not
// let a context bound its calls: without ContextTimeoutEnabled, go-redis
// waits for its own ReadTimeout (3s by default) whatever the context says,
// and the Timeout option could not be kept.
func checkClient(c redis.UniversalClient) error {
	switch c := c.(type) {
	case nil:
		return invalid("client", "is nil")
	case *redis.Client:
		if c == nil {
			return invalid("client", "is nil")
		}
		if !c.Options().ContextTimeoutEnabled {
			return invalid("client", "must be created with ContextTimeoutEnabled: true, so that the Timeout bounds each call")
		}
	case *redis.ClusterClient:
		if c == nil {
			return invalid("client", "is nil")
		}
		if !c.Options().ContextTimeoutEnabled {
			return invalid("client", "must be created with ContextTimeoutEnabled: true, so that the Timeout bounds each call")
		}
	case *redis.Ring:
		if c == nil {
			return invalid("client", "is nil")
		}
		if !c.Options().ContextTimeoutEnabled {
			return invalid("client", "must be created with ContextTimeoutEnabled: true, so that the Timeout bounds each call")
		}
	}
	return nil
}

func resolveTimeout(field string, d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, invalid(field, "must not be negative")
	case d == 0:
		return DefaultTimeout, nil
	}
	return d, nil
}

// run runs script on key with args, within timeout and the caller's ctx.
// Every failure is returned wrapping ErrUnavailable (see unavailable).
func run(ctx context.Context, c redis.UniversalClient, timeout time.Duration, s *redis.Script, keys []string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := s.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return nil, unavailable(c, "", err)
	}
	return v, nil
}

// micros is t in microseconds since the Unix epoch: the unit of the
// scripts' clock, as Redis TIME gives it.
func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// ceilMillis is d in whole milliseconds, rounded up, at least 1: the
// argument of SET PX and PEXPIRE. It divides before rounding up, so that
// the longest Durations do not wrap round to a negative, and then 1ms.
func ceilMillis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return max(1, int64(ms))
}

// addSat is a+b for non-negative a and b, or the longest Duration when the
// sum would overflow.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// unexpected is the error of a script reply of the wrong shape: a key of
// another kind under the same name, or a script changed underneath.
func unexpected(v any) error {
	return fmt.Errorf("%w: unexpected script reply %T", ErrUnavailable, v)
}
