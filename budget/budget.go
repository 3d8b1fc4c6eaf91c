// Package budget holds the retry budgets of retryfuse: one budget, shared by
// every call that uses it, bounds how many retries those calls may make, so
// that a failing dependency sees a bounded multiple of its normal load and
// not a retry storm. A retryfuse.Transport asks its RetryPolicy.Budget
// before every retry, the stage of the pipeline right before a retry is
// scheduled; the zero RetryPolicy uses a Ratio per scope.
//
// Ratio is the recommended budget (a share of recent requests plus a small
// reserve), TokenBucket the simple one (a fixed rate, whatever the traffic),
// Unlimited the one that never refuses. A Budget of another package (one
// shared across a fleet in Redis, say) plugs in through the Budget interface.
//
// Both stateful budgets follow golang.org/x/time/rate: one mutex, no
// goroutine, no ticker; state is brought up to date lazily, under the lock,
// from the time passed in. Unlike rate.Limiter, a time earlier than the
// latest one seen does not move the budget's clock back: it counts as "no
// time has passed". Callers that read the clock before contending for the
// lock arrive slightly out of order, and moving the clock back for them would
// credit the same stretch of time twice. Their methods ending in At take
// that time as an argument, as rate.Limiter's AllowN does; the others read
// time.Now.
package budget

import (
	"context"
	"time"
)

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
	_ Budget = (*Ratio)(nil)
	_ Budget = (*TokenBucket)(nil)
	_ Budget = unlimited{}
)

// Snapshot is a point-in-time view of a budget, for metrics and tests.
type Snapshot struct {
	Requests uint64 // requests recorded since creation
	Retries  uint64 // retries granted since creation
	Refused  uint64 // retries refused since creation
	// Available is the retry balance right now. Its whole part is how many
	// retries would be granted back to back; a fractional part is credit
	// still building up. Never negative.
	Available float64
}

// Unlimited returns a Budget that never refuses: set it as
// RetryPolicy.Budget of a retryfuse.Transport, or return it from
// RetryPolicy.NewBudget, to turn budgets off.
func Unlimited() Budget { return unlimited{} }

// unlimited records nothing and grants every retry.
type unlimited struct{}

func (unlimited) RecordRequest(context.Context) {}

func (unlimited) AllowRetry(context.Context) (bool, error) { return true, nil }

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

// orDefault returns v, or def when v is zero.
func orDefault[T int64 | float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
