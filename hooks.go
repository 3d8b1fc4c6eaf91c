package retryfuse

import (
	"context"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/decide"
)

// Hooks observe what the transport decides. Every field may be nil. Hooks
// run synchronously on the goroutine of the call (a call that
// ReadPolicy.Share shares runs on a goroutine of its own), never
// while the transport holds a lock, and may be called concurrently by
// concurrent calls. A hook must not keep the Info's fields that are documented as
// borrowed. A panicking hook is recovered: it never breaks the call. The
// first panic of a Transport's hooks (or its Classifier's) is reported
// through Policy ("hook", "panicked"), unless Policy is what panicked.
// Combine several Hooks values with JoinHooks.
//
// The Info types may gain fields in later versions.
type Hooks struct {
	// AttemptStart is called before each attempt is sent.
	AttemptStart func(AttemptStartInfo)
	// AttemptDone is called when an attempt has a result: a response (Err
	// nil, or a *StatusError when its status is retryable) or an error.
	AttemptDone func(AttemptDoneInfo)
	// Decision is called with the decision core's verdict after each
	// attempt that is not a confirmed result (a confirmed result ends the
	// call and asks it nothing), and before the first attempt only when the
	// verdict stops the call or answers it from the Ledger (replay_stored,
	// reject_conflict, brake): a first attempt is not a replay, so a
	// replay_safe verdict then is not reported.
	Decision func(DecisionInfo)
	// Retry is called when a retry is scheduled, before the wait.
	Retry func(RetryInfo)
	// Reconcile is called when a write's outcome is uncertain, once the
	// Reconciler (if any) has answered.
	Reconcile func(ReconcileInfo)
	// GiveUp is called when a call stops with a failure it does not
	// repeat, with the reason. It is not called for a confirmed result
	// (any response that is not retryable), nor for a write left
	// uncertain by its attempt and never repeated (see Reconcile). A
	// keyed write repeated toward a server that honours keys is: when its
	// repeats stop (attempts, budget, deadline or a brake ran out) or the
	// server answers that an earlier request under the key ended without a
	// result, GiveUp reports why, and Reconcile follows with the
	// *ReconcileRequiredError the call ends with.
	GiveUp func(GiveUpInfo)
	// HiddenResend is called, before AttemptDone, when the base transport
	// obtained more than one connection within one attempt (Connections):
	// it re-sent the request by itself (net/http does so when nothing was
	// written, or, for requests it judges replayable, after a failure on a
	// reused connection).
	HiddenResend func(AttemptDoneInfo)
	// BreakerChange is called when a breaker scope changes state, and on a
	// scope's first request under settings of a new version (From == To;
	// see breaker.Breaker.Update).
	BreakerChange func(breaker.Change)
	// EvidenceUnavailable is called when a budget or ledger could not
	// establish its answer (a remote store is down or slow) and its
	// declared fail-safe was applied instead. Unlike the other hooks, it
	// may also be called after RoundTrip has returned, from the goroutine
	// that reads or closes a response body: when the ledger fails to record
	// the call's completed result.
	EvidenceUnavailable func(EvidenceUnavailableInfo)
	// Policy is called when a hedge is sent or refused, when the bulkhead
	// queues or rejects an attempt, when the rate limiter makes one wait or
	// rejects it, when the throttle refuses a call, when a learnt limit
	// changes, when slow start begins, when the Fallback answers, hands
	// on, is withheld or fails, and when a read leads, follows or does not
	// share a shared call. See PolicyInfo.
	Policy func(PolicyInfo)
}

// CallInfo is carried by every event of one RoundTrip.
type CallInfo struct {
	// Context is the request's context, so that a hook can reach what the
	// caller put there (the active trace span, a logger's values). A hook
	// must not keep it after it returns.
	Context context.Context
	// CallID is shared by all events of one RoundTrip and unique within
	// its Transport.
	CallID uint64
	// Attempt is the number of the attempt the event is about, from 1; 0
	// before the first attempt.
	Attempt int
	// Branch numbers the attempt within a hedged group: 0 for the first,
	// 1 for the first hedge, and so on. Always 0 without hedging.
	Branch int
	Method string
	// URL is the request URL without user information and with redacted
	// query parameters.
	URL string
	// IdempotencyKey is the key the request carries, or the key generated
	// for it (KeyGenerated).
	IdempotencyKey string
	KeyGenerated   bool
	// Phase is how far the attempt got; PhaseUnknown before it is sent.
	Phase decide.Phase
	// Elapsed is the time since RoundTrip was called.
	Elapsed time.Duration
}

// AttemptStartInfo describes an attempt about to be sent.
type AttemptStartInfo struct {
	CallInfo
	// Timeout is the attempt's timeout (until response headers), zero when
	// none applies beyond the caller's deadline.
	Timeout time.Duration
}

// AttemptDoneInfo describes the result of one attempt.
type AttemptDoneInfo struct {
	CallInfo
	StatusCode int   // 0 when there is no response
	Err        error // the attempt's error; a *StatusError for a retryable status
	Outcome    decide.Outcome
	// Retryable is the classification before the safety rules: an EOF
	// after a POST was written is retryable as an error, yet the call
	// then requires reconciliation (see Decision and Reconcile).
	Retryable bool
	Duration  time.Duration
	// Connections is the number of connections the base obtained within
	// the attempt, when it reports them (net/http does): more than one
	// means it re-sent the request by itself. Zero when unknown.
	Connections int
	// Replayed is true when the response is the stored response of an
	// earlier request under the key, replayed by a server that honours
	// Idempotency-Key (its Idempotent-Replayed header): the write was not
	// run again.
	Replayed bool
}

// DecisionInfo carries a verdict of the decision core.
type DecisionInfo struct {
	CallInfo
	Verdict  decide.Verdict
	KeyState decide.KeyState
}

// RetryInfo describes a scheduled retry.
type RetryInfo struct {
	CallInfo
	Delay time.Duration
	// Source says where Delay came from: "backoff" (capped exponential
	// backoff with full jitter) or "retry_after" (the server's Retry-After,
	// plus jitter).
	Source string
	// RetryAfter is the server's Retry-After when Source is "retry_after".
	RetryAfter time.Duration
	Err        error // the failed attempt's error (a *StatusError for a status)
}

// ReconcileInfo carries a reconcile error and, when a Reconciler is set,
// its answer.
type ReconcileInfo struct {
	CallInfo
	Err *ReconcileRequiredError
	// Resolution is what the Reconciler established: "applied",
	// "not_applied" or "still_unknown" (also without a Reconciler, and for
	// a key left uncertain by an earlier call).
	Resolution string
}

// GiveUpInfo says why a call stopped repeating.
type GiveUpInfo struct {
	CallInfo
	// Reason is, or matches with errors.Is (a *breaker.OpenError does),
	// one of: ErrAttemptsExhausted, ErrBudgetExhausted,
	// ErrNotRepeatable, ErrFailureStreak, ErrCallCost, ErrDeadline,
	// ErrCircuitOpen, ErrDuplicateInFlight, ErrIdempotencyConflict; the
	// context's error when the caller gave up during a wait; or an error of
	// the package's own that ReasonName calls "retry_after_too_long" (the
	// server asked for a wait longer than MaxRetryAfter or the deadline
	// leaves) or "final" (the result was not retryable). ReasonName names
	// every reason.
	Reason error
	// Verdict is the decision core's verdict when it decided, else zero.
	Verdict decide.Verdict
	// StatusCode is the status of the response handed back, 0 for none.
	StatusCode int
	Err        error // the last error, if any
}

// PolicyInfo reports an action of the hedge, the bulkhead, the rate
// limiter, the throttle, the learnt limit, slow start, the fallback or
// single flight (see Transport). Policy and Action name it:
//
//	Policy            Action
//	"hedge"           "sent": a hedge was sent after Wait (Branch numbers it)
//	                  "refused": a hedge was due but not sent (Err says why:
//	                  the budget, the breaker, the rate limiter, the bulkhead)
//	"bulkhead"        "queued": the attempt waited Wait for a slot
//	                  "rejected": the attempt was not sent (Err, a
//	                  *BulkheadFullError; its limit learnt or slow start's)
//	"rate_limit"      "waited": the attempt waited Wait for the limiter
//	                  "rejected": the attempt was not sent (Err, a *RateLimitError)
//	"throttle"        "rejected": the call was refused before anything was
//	                  sent (Err matches ErrDeclined: ReasonName throttled,
//	                  saying the share refused; or a *RateLimitError with
//	                  Learnt, its place in the pace learnt from 429s too late)
//	                  "waited": the call waited Wait for its place in the
//	                  pace learnt from the scope's 429s
//	"server_keys"     "confirmed": a response's marker says the scope's server
//	                  honours Idempotency-Key: an uncertain keyed write may be
//	                  sent again (see KeyPolicy.ServerHonours)
//	                  "revoked": a response to a keyed write came without the
//	                  marker (Why: its status): no longer
//	"adaptive_limit"  "changed": the scope's learnt limit went from PrevLimit
//	                  to Limit; Why is "latency" (queueing shows in the
//	                  latency), "overload" (the dependency shed or lost
//	                  attempts) or "growth" (in use, without queueing)
//	"slow_start"      "started": admission ramps up from Limit attempts over
//	                  Wait; Why is "breaker_closed" or "limit_recovered"
//	                  (the learnt limit rose from its floor)
//	"fallback"        "answered": the Fallback answered a failed call with a
//	                  response of its own (marked: see Transport.Fallback), or
//	                  with an error (Err)
//	                  "handed_on": it handed back the call's own response,
//	                  which goes to the caller unmarked
//	                  "withheld": the request needs current data (see
//	                  WithCurrentData), so the Fallback was not asked; the
//	                  call's own outcome was returned (Err, its error)
//	                  "failed": it panicked or returned neither a response nor
//	                  an error (Err); the call's own outcome was returned
//	"single_flight"   (ReadPolicy.Share; SharedCallID names the shared call)
//	                  "led": the call's result is shared with the reads of its
//	                  key that come while it is in flight (SharedCallID is its
//	                  own CallID)
//	                  "followed": the call waits for the shared call's result,
//	                  and takes a copy of it
//	                  "unshared": the call makes its own: ShareKey panicked
//	                  (Err), or the shared response's body was over
//	                  MaxSharedBody (Err; SharedCallID names the call)
//	"hook"            "panicked": a hook or the Classifier panicked (Err names
//	                  it and the value); recovered, the call went on.
//	                  Reported once per Transport
//
// A limit's change and slow start are about a scope, not one call: they
// are reported with the CallInfo of the call whose attempt moved them.
// The names are a compatibility promise; names may be added.
type PolicyInfo struct {
	CallInfo
	Policy string
	Action string
	// Scope is the scope of the call (see Transport.Scope).
	Scope string
	// Wait is how long the attempt waited, or, for a hedge, how long its
	// group had waited for an answer before it was sent; for slow start,
	// the length of its ramp (SlowStart).
	Wait time.Duration
	Err  error
	// SharedCallID is, for "single_flight", the CallID of the call whose
	// result is shared; zero otherwise.
	SharedCallID uint64
	// Limit and PrevLimit are the learnt limit after and before a change
	// ("adaptive_limit"), or the attempts admitted at once as slow start
	// begins (Limit alone); zero for the other actions.
	Limit, PrevLimit int
	// Why says why a limit changed or slow start began; empty for the
	// other actions.
	Why string
}

// The names of PolicyInfo.Policy and PolicyInfo.Action.
const (
	policyHedge        = "hedge"
	policyBulkhead     = "bulkhead"
	policyRateLimit    = "rate_limit"
	policyFallback     = "fallback"
	policySingleFlight = "single_flight"

	actionSent     = "sent"
	actionRefused  = "refused"
	actionQueued   = "queued"
	actionRejected = "rejected"
	actionWaited   = "waited"
	actionAnswered = "answered"
	actionHandedOn = "handed_on"
	actionWithheld = "withheld"
	actionFailed   = "failed"
	actionLed      = "led"
	actionFollowed = "followed"
	actionUnshared = "unshared"
)

// EvidenceUnavailableInfo reports a fail-safe applied by a budget or ledger.
type EvidenceUnavailableInfo struct {
	CallInfo
	Source string // "budget" or "ledger"
	Err    error
}

// any reports whether some hook is set.
func (h Hooks) any() bool {
	return h.AttemptStart != nil || h.AttemptDone != nil || h.Decision != nil ||
		h.Retry != nil || h.Reconcile != nil || h.GiveUp != nil ||
		h.HiddenResend != nil || h.BreakerChange != nil || h.EvidenceUnavailable != nil ||
		h.Policy != nil
}

// JoinHooks returns Hooks that call each of hs in order. A hook that
// panics does not stop the ones after it; the joined hook then panics
// with the first value, as that hook alone would have, for the Transport
// to recover and report.
func JoinHooks(hs ...Hooks) Hooks {
	return Hooks{
		AttemptStart:        join(hs, func(h Hooks) func(AttemptStartInfo) { return h.AttemptStart }),
		AttemptDone:         join(hs, func(h Hooks) func(AttemptDoneInfo) { return h.AttemptDone }),
		Decision:            join(hs, func(h Hooks) func(DecisionInfo) { return h.Decision }),
		Retry:               join(hs, func(h Hooks) func(RetryInfo) { return h.Retry }),
		Reconcile:           join(hs, func(h Hooks) func(ReconcileInfo) { return h.Reconcile }),
		GiveUp:              join(hs, func(h Hooks) func(GiveUpInfo) { return h.GiveUp }),
		HiddenResend:        join(hs, func(h Hooks) func(AttemptDoneInfo) { return h.HiddenResend }),
		BreakerChange:       join(hs, func(h Hooks) func(breaker.Change) { return h.BreakerChange }),
		EvidenceUnavailable: join(hs, func(h Hooks) func(EvidenceUnavailableInfo) { return h.EvidenceUnavailable }),
		Policy:              join(hs, func(h Hooks) func(PolicyInfo) { return h.Policy }),
	}
}

func join[T any](hs []Hooks, field func(Hooks) func(T)) func(T) {
	var fs []func(T)
	for _, h := range hs {
		if f := field(h); f != nil {
			fs = append(fs, f)
		}
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(v T) {
		var first any
		for _, f := range fs {
			if p := emit(f, v); p != nil && first == nil { // one panicking hook does not silence the others
				first = p
			}
		}
		if first != nil {
			panic(first) // for the Transport's emit to recover and report (hookPanicked)
		}
	}
}

// emit calls hook f with v, recovering a panic, and returns what it
// panicked with (nil when it did not), for hookPanicked.
func emit[T any](f func(T), v T) (panicked any) {
	if f == nil {
		return nil
	}
	defer func() { panicked = recover() }()
	f(v)
	return nil
}

// info returns the CallInfo of the call's current attempt.
func (c *call) info() CallInfo {
	if c.id == 0 { // hooks set during the call
		c.id = c.t.calls.Add(1)
	}
	return CallInfo{
		Context:        c.req.Context(),
		CallID:         c.id,
		Attempt:        c.attempt,
		Method:         c.method,
		URL:            c.redactedURL(),
		IdempotencyKey: c.key.value,
		KeyGenerated:   c.key.generated,
		Phase:          c.phase,
		Elapsed:        c.now().Sub(c.start),
	}
}

// infoOf returns the CallInfo of attempt f at phase.
func (c *call) infoOf(f *flight, phase decide.Phase) CallInfo {
	ci := c.info()
	ci.Attempt, ci.Branch, ci.Phase = f.number, f.branch, phase
	return ci
}
