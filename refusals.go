package retryfuse

import "time"

// This file is the refusals of admission (admission.go) and of the pace
// (overload.go), each named for what refused: *BulkheadFullError (the
// bulkhead, slow start or the learnt limit) and *RateLimitError (the rate
// limiter or the pace), with the sentinels that ReasonName names.

// The sentinels behind *BulkheadFullError and *RateLimitError, so that
// ReasonName names each refusal for what refused it: the fixed bulkhead,
// slow start, the learnt limit, the rate limiter or the pace.
var (
	errBulkheadFull = declined("retryfuse: bulkhead full")
	errSlowStart    = declined("retryfuse: slow start")
	errLearntLimit  = declined("retryfuse: learnt limit")
	errRateLimited  = declined("retryfuse: rate limited")
)

// BulkheadFullError is returned when the bulkhead of the request's scope
// (LoadPolicy.MaxInFlight, or the limit LoadPolicy.Adaptive learns, or slow
// start's ramp) had no slot for an attempt, and its queue (MaxQueued) no
// room or no time: the attempt was not sent. errors.Is(err, ErrDeclined)
// holds. ReasonName names it for what refused: slow_start (SlowStart),
// learnt_limit (Learnt), else bulkhead_full.
type BulkheadFullError struct {
	Scope string
	// MaxInFlight is the limit the attempt met: MaxInFlight, the learnt
	// limit (Learnt), or less during slow start (SlowStart).
	MaxInFlight int
	// QueueWait is how long the attempt waited in the queue before it gave
	// up; zero when the queue was full too.
	QueueWait time.Duration
	// Learnt says that the limit was learnt (LoadPolicy.Adaptive).
	Learnt bool
	// SlowStart says that slow start admitted fewer than the limit.
	SlowStart bool
}

func (e *BulkheadFullError) Error() string {
	var s string
	switch {
	case e.SlowStart:
		s = "retryfuse: slow start: " + counted(e.MaxInFlight, "attempt") + " admitted at once to " + e.Scope + " as it ramps up"
	case e.Learnt:
		s = "retryfuse: learnt limit: " + counted(e.MaxInFlight, "attempt") + " in flight to " + e.Scope
	default:
		s = "retryfuse: bulkhead full: " + counted(e.MaxInFlight, "attempt") + " in flight to " + e.Scope
	}
	if e.QueueWait > 0 {
		s += " (waited " + e.QueueWait.String() + " in the queue)"
	}
	return s
}

// Unwrap makes errors.Is match ErrDeclined, through the sentinel that
// names what refused (ReasonName: slow_start, learnt_limit or
// bulkhead_full).
func (e *BulkheadFullError) Unwrap() error {
	switch {
	case e.SlowStart:
		return errSlowStart
	case e.Learnt:
		return errLearntLimit
	}
	return errBulkheadFull
}

// RateLimitError is returned when the rate limiter of the request's scope
// (LoadPolicy.RateLimit), or the pace learnt from its 429s (Learnt,
// LoadPolicy.Pace), would have made an attempt wait past LoadPolicy.MaxWait
// or the caller's deadline: the attempt was not sent, and no token was
// taken. errors.Is(err, ErrDeclined) holds; ReasonName: rate_limited.
type RateLimitError struct {
	Scope string
	// Learnt says that the rate was learnt from the dependency's 429s (the
	// pace of new calls, LoadPolicy.Pace), not set by RateLimit: the
	// call's place came too late for MaxWait or its deadline.
	Learnt bool
	// RetryAfter is how long until the limiter would admit the attempt,
	// as it stood when the attempt was refused.
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	s := "retryfuse: rate limited: " + e.Scope + " admits the next attempt in " + e.RetryAfter.String()
	if e.Learnt {
		s += " (the rate learnt from its 429s)"
	}
	return s
}

// Unwrap makes errors.Is match ErrDeclined.
func (e *RateLimitError) Unwrap() error { return errRateLimited }
