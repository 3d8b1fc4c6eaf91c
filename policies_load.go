package retryfuse

import "time"

// This file is the policy of load: the bulkhead (fixed or learnt), the
// rate limiter, slow start and the throttle of new calls, as a Transport
// is given them.

// LoadPolicy bounds the load a Transport puts on each scope: the attempts
// in flight (a fixed or a learnt limit, with a queue), their rate, the
// throttle of new calls to a dependency that rejects most of them, and
// the ramp after recovery. The zero value refuses nothing and delays
// nothing: no bulkhead, no rate limit, no throttle, no pace, no slow
// start. Each control is turned on by its own setting: MaxInFlight,
// Adaptive, RateLimit, Throttle.On, Pace, SlowStart.
type LoadPolicy struct {
	// MaxInFlight, when above zero, is the bulkhead of each scope: at most
	// this many attempts of this Transport to one scope are in flight (from
	// the attempt's send until its response headers, or its error). An
	// attempt beyond it waits in the scope's queue, for at most MaxWait
	// and at most half of what is left of the caller's deadline (the
	// other half is left for the attempt); when the queue is full
	// (MaxQueued) or the wait runs out, the attempt is not sent, and the
	// call gets a *BulkheadFullError (or, after earlier attempts, its last
	// result). Zero means no bulkhead. With Adaptive it is the ceiling of
	// the learnt limit instead.
	MaxInFlight int

	// Adaptive, when true, learns each scope's bulkhead limit rather than
	// taking it from MaxInFlight: the attempts in flight the dependency
	// takes without queueing, between MinInFlight and MaxInFlight (1000
	// when zero). It starts at 4 and doubles while the fastest tenth of
	// the answers stays at its unloaded level, then grows by one a window
	// (a tenth of a second or more), holds while that tenth is up to 1.2
	// times the unloaded level, and is cut in proportion beyond, or by a
	// tenth on overload signals (429, 503, timeouts, lost connections)
	// from the attempts sent with the most in flight (see the README's
	// "Load"). Attempts over it wait in the scope's queue (a quarter of
	// the limit, for a quarter of the unloaded latency; while it doubles,
	// four times the limit, for that latency; never past the caller's
	// deadline less that latency; MaxQueued and MaxWait, when set,
	// instead), or are refused with a *BulkheadFullError (Learnt) matching
	// ErrDeclined. Retries and hedges pass it too. Changes are reported
	// (Hooks.Policy, "adaptive_limit"). Off by default: a learnt limit
	// refuses work that a dependency would have queued and served within
	// the callers' deadlines (a burst).
	Adaptive bool

	// MinInFlight is the floor of the learnt limit: it is never cut below
	// it. Zero means 2 (or MaxInFlight when that is lower). Set without
	// Adaptive, it learns the limit as Adaptive does. It is refused above
	// MaxInFlight.
	MinInFlight int

	// MaxQueued bounds the attempts waiting for a slot of a scope's
	// bulkhead. Zero means none wait: a full bulkhead rejects at once;
	// with Adaptive, zero means a quarter of the learnt limit (four times
	// it while the limit doubles). It is refused without MaxInFlight or
	// Adaptive, and with a negative MaxWait (no attempt would wait in the
	// queue).
	MaxQueued int

	// RateLimit, when above zero, is the rate limiter of each scope: at
	// most this many attempts per second to one scope, with bursts of
	// RateBurst (a token bucket, golang.org/x/time/rate). Retries and
	// hedges draw from it too. An attempt the limiter cannot admit at once
	// waits for it, for at most MaxWait and never past the caller's
	// deadline; one that would have to wait longer is not sent, and the
	// call gets a *RateLimitError (or, after earlier attempts, its last
	// result). Zero means no limit.
	RateLimit float64

	// RateBurst is the size of the rate limiter's bucket: the attempts it
	// admits at once after a quiet spell. Zero means 1 beside a
	// RateLimit; it is refused without one.
	RateBurst int

	// MaxWait bounds the wait of an attempt for the bulkhead's queue, the
	// rate limiter, slow start or the pace (Pace): at most MaxWait, and
	// never past the caller's deadline. The rate limiter refuses at once
	// an attempt whose wait would reach the deadline; the pace, a fixed
	// bulkhead's queue (MaxInFlight's, slow start's), and a learnt limit
	// whose latency is not known yet, one whose wait would take half of
	// what is left of it, leaving the other half to the call (a call sent
	// late is served too late). A 429's Retry-After held by
	// the pace is waited for within the same bound. Zero means one second
	// (with Adaptive, once the learnt limit has met a queue, a quarter of
	// the scope's unloaded latency in the queue); a negative value means
	// no waiting: an attempt is admitted at once or refused. A queued attempt whose caller's context
	// ends first gets that context's error, as any wait of the call does.
	// It is refused when nothing waits: without a RateLimit, a MaxQueued,
	// Adaptive, SlowStart or Pace.
	MaxWait time.Duration

	// SlowStart, when above zero, is the window over which admission
	// ramps up after a scope's Breaker closes (one this Transport's calls
	// saw close), and after its learnt limit rises from its floor: the
	// attempts admitted at once start from the Breaker's MaxProbes (or the
	// floor), double every tenth of the window and grow by one per
	// success, whichever is lower, under the bulkhead's limit; the rest
	// wait in the queue (for MaxWait, as for the bulkhead) and are then
	// refused with a *BulkheadFullError (SlowStart; ReasonName
	// slow_start). Reported through Hooks.Policy ("slow_start"). Zero
	// means no slow start: a Breaker that closes admits every call at
	// once. Negative, or set without a Breaker or a learnt limit, is
	// refused.
	SlowStart time.Duration

	// Pace, when true, spaces new calls to a scope that answers 429 at the
	// rate it accepts (learnt from its 429s), and holds them for a 429's
	// Retry-After, rather than sending what would be answered 429. A new
	// call waits for its place within MaxWait's bound (see MaxWait); a
	// call whose place comes later is refused
	// with a *RateLimitError (Learnt), having sent nothing. A scope whose
	// Breaker is open or half-open is not paced: the breaker decides first,
	// and an open one fails fast. The pace falls idle once 429s stop. Off
	// by default.
	Pace bool

	// Throttle refuses a share of new calls to a dependency that rejects
	// most of what it is sent. Off unless Throttle.On (or another of its
	// fields) is set.
	Throttle ThrottlePolicy
}

// ThrottlePolicy is the throttle of new calls. The zero value is off; a
// ThrottlePolicy with On, Ratio or Window set is on, with K = 2 over 2
// seconds for what is left zero.
type ThrottlePolicy struct {
	// On turns the throttle on with its defaults.
	On bool

	// Ratio is K: while a scope's dependency rejects most of what it is
	// sent (503s, no answer), a share of new calls is refused
	// before anything is sent (ErrDeclined, ReasonName throttled), so that
	// what reaches it stays about K times what it accepts. Any other
	// answer the dependency gave is accepted, a replayed one
	// (Idempotent-Replayed) too; a 429 is the pace's (Pace), not a
	// rejection. A call that settles an uncertain write
	// (Reconciling, and a Reconciler's lookups) is never refused. Zero
	// means 2; below 1, NaN or infinite is refused.
	Ratio float64

	// Window is how long the throttle remembers requests, in twenty
	// buckets. Zero means 2s; a negative or shorter than 20ns window is
	// refused.
	Window time.Duration

	// Disable keeps the throttle and the pace off.
	//
	// Deprecated: both are off unless asked for (On, LoadPolicy.Pace);
	// Disable is refused beside either.
	Disable bool
}

// on reports whether th asks for the throttle: any field but Disable set.
func (th ThrottlePolicy) on() bool { return th.On || th.Ratio != 0 || th.Window != 0 }
