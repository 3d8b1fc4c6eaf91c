// Package sloghooks logs the events of a retryfuse.Transport's hooks to a
// log/slog logger, one structured record per event:
//
//	tr := &retryfuse.Transport{Hooks: sloghooks.New(logger)}
//
// Combine it with other hooks (metrics, a counter) with
// retryfuse.JoinHooks. Besides retryfuse, it needs the standard library
// alone.
package sloghooks

import (
	"context"
	"errors"
	"log/slog"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/decide"
)

// New returns Hooks that log every event to logger. A nil logger means
// slog.Default() as it is when New is called: a default set later is not
// seen. Records are built only when the logger is enabled for their
// level. Like every hook, they may be called concurrently (a
// *slog.Logger is safe for concurrent use), and one set may serve several
// Transports.
//
// Levels:
//
//   - Debug: an attempt starting or done, and every verdict of the
//     decision core except the two below. A call whose first attempt
//     succeeds logs at Debug only.
//   - Info: a retry being scheduled; a breaker scope closing or turning
//     half open, or coming under settings of a new version ("retryfuse:
//     breaker settings").
//   - Warn: what an operator must act on: a reconcile error; a verdict
//     that stops a call on evidence of failure (brake or reject_conflict
//     with evidence fail, rules 1, 6 and 7); a call giving up on the
//     dependency's failures (its attempts, streak or cost ran out); a
//     hidden re-send by the base of a method that is not idempotent (of
//     an idempotent one: Debug); a breaker scope opening; a budget or
//     ledger applying its fail-safe; a hook or the Classifier that
//     panicked (policy "hook", action "panicked", once per Transport).
//   - A call refused by a limit that passes (its reason matches
//     retryfuse.ErrDeclined: an open breaker, the budget, a bulkhead, the
//     rate limiter or pace, the throttle, slow start, a learnt limit, the
//     deadline): Debug. It is the policy working, once per refused call;
//     the events that change the policy (a breaker opening, a limit cut)
//     are logged at their own levels.
//   - Policy events (hedge, bulkhead, rate limiter, throttle, learnt
//     limit, slow start, fallback, single flight): Info for a learnt limit
//     cut, slow start beginning, a fallback answering, handing on,
//     withheld or failing, or a read left unshared; Debug for a refusal or
//     a rejection of one call, a hedge sent, an attempt that waited, a
//     learnt limit that grew, or a read that led or followed a shared
//     call.
//
// Messages ("retryfuse: retry", ...) and attribute names are a
// compatibility promise; new attributes may be added. Attributes, each
// present only when it applies:
//
//	call_id          uint   retryfuse.CallInfo.CallID, shared by all records of a call
//	attempt          int    attempt number, from 1; 0 before the first
//	method           string request method
//	url              string request URL, credentials removed and query redacted
//	phase            string how far the attempt got: pre_write, post_write (a response, too), unknown
//	idempotency_key  string the key's value
//	key_generated    bool   true when the transport generated the key
//	branch           int    the attempt's branch in a hedged group, when above 0
//	elapsed          dur    time since RoundTrip was called
//	timeout          dur    the attempt's timeout (attempt start)
//	status           int    HTTP status of the attempt or of the response handed back
//	outcome          string success, failure, timeout, unknown (attempt done)
//	retryable        bool   the classification before the safety rules (attempt done)
//	duration         dur    the attempt's duration (attempt done)
//	decision         string replay_safe, replay_stored, reconcile_required, brake, reject_conflict
//	evidence         string pass, fail, unknown
//	rule             int    the contract rule that decided, 1 to 8
//	key_state        string the ledger's state of the key when not none
//	delay            dur    the wait before the retry
//	delay_source     string backoff or retry_after
//	retry_after      dur    the server's Retry-After, when it set the delay
//	reason           string why: the verdict's reason (decision), or for a
//	                        give-up one of attempts_exhausted, budget_exhausted,
//	                        not_repeatable, failure_streak, call_cost,
//	                        retry_after_too_long, deadline, circuit_open,
//	                        bulkhead_full, rate_limited, throttled, ledger_unavailable,
//	                        duplicate_in_flight, idempotency_conflict, final,
//	                        canceled, deadline_exceeded, else other (retryfuse.ReasonName)
//	error            string the error's text
//	connections      int    connections obtained within one attempt (hidden re-send)
//	source           string budget or ledger (evidence unavailable)
//	scope, from, to  string breaker scope and states (closed, open, half_open)
//	version          uint   the version of the breaker's settings in force
//	policy, action   string hedge, bulkhead, rate_limit, throttle, adaptive_limit, slow_start,
//	                        server_keys, fallback or single_flight, and what it did (see retryfuse.PolicyInfo)
//	wait             dur    how long the attempt waited, or slow start's window (policy)
//	limit, prev_limit int   the learnt limit after and before a change; slow start's first (policy)
//	why              string why a learnt limit changed or slow start began (policy)
//	shared_call_id   uint   the call whose result is shared (single_flight)
//
// Durations are slog Duration values (the JSON handler writes nanoseconds).
//
// The idempotency key's value is logged. Keys are not credentials, though
// they may be business identifiers; the value is what an operator needs to
// look up the effect of a write that requires reconciliation. Drop it with
// a HandlerOptions.ReplaceAttr if your logs must not hold it. URLs are
// logged as the transport reports them, without user information and with
// the query parameters of retryfuse.Transport.RedactQueryParams redacted.
//
// Records are logged with the request's context
// (retryfuse.CallInfo.Context), so a handler that reads values from the
// context — a trace ID, a request ID — sees the caller's. Breaker changes
// belong to no one call and are logged with context.Background().
func New(logger *slog.Logger) retryfuse.Hooks {
	if logger == nil {
		logger = slog.Default()
	}
	l := slogHooks{logger}
	return retryfuse.Hooks{
		AttemptStart:        l.attemptStart,
		AttemptDone:         l.attemptDone,
		Decision:            l.decision,
		Retry:               l.retry,
		Reconcile:           l.reconcile,
		GiveUp:              l.giveUp,
		HiddenResend:        l.hiddenResend,
		BreakerChange:       l.breakerChange,
		EvidenceUnavailable: l.evidenceUnavailable,
		Policy:              l.policy,
	}
}

type slogHooks struct{ l *slog.Logger }

// maxSlogAttrs bounds the attributes of one record; an array of this size
// holds them without allocating.
const maxSlogAttrs = 16

type slogAttrs struct {
	buf [maxSlogAttrs]slog.Attr
	n   int
}

func (a *slogAttrs) add(attr slog.Attr) {
	if a.n < len(a.buf) {
		a.buf[a.n] = attr
		a.n++
	}
}

func (a *slogAttrs) call(ci retryfuse.CallInfo, phase bool) {
	a.add(slog.Uint64("call_id", ci.CallID))
	a.add(slog.Int("attempt", ci.Attempt))
	a.add(slog.String("method", ci.Method))
	a.add(slog.String("url", ci.URL))
	if phase {
		a.add(slog.String("phase", ci.Phase.String()))
	}
	if ci.IdempotencyKey != "" {
		a.add(slog.String("idempotency_key", ci.IdempotencyKey))
	}
	if ci.KeyGenerated {
		a.add(slog.Bool("key_generated", true))
	}
	if ci.Branch > 0 {
		a.add(slog.Int("branch", ci.Branch))
	}
	a.add(slog.Duration("elapsed", ci.Elapsed))
}

func (a *slogAttrs) err(err error) {
	if err != nil {
		a.add(slog.String("error", err.Error()))
	}
}

func (h slogHooks) log(ctx context.Context, level slog.Level, msg string, a *slogAttrs) {
	h.l.LogAttrs(orBackground(ctx), level, msg, a.buf[:a.n]...)
}

func (h slogHooks) enabled(ctx context.Context, level slog.Level) bool {
	return h.l.Enabled(orBackground(ctx), level)
}

// orBackground is ctx, or context.Background() for an Info built without
// one (as a test or another package may).
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

func (h slogHooks) attemptStart(i retryfuse.AttemptStartInfo) {
	if !h.enabled(i.Context, slog.LevelDebug) {
		return
	}
	var a slogAttrs
	a.call(i.CallInfo, false)
	if i.Timeout > 0 {
		a.add(slog.Duration("timeout", i.Timeout))
	}
	h.log(i.Context, slog.LevelDebug, "retryfuse: attempt start", &a)
}

func (h slogHooks) attemptDone(i retryfuse.AttemptDoneInfo) {
	if !h.enabled(i.Context, slog.LevelDebug) {
		return
	}
	var a slogAttrs
	a.call(i.CallInfo, true)
	if i.StatusCode != 0 {
		a.add(slog.Int("status", i.StatusCode))
	}
	a.add(slog.String("outcome", i.Outcome.String()))
	a.add(slog.Bool("retryable", i.Retryable))
	a.add(slog.Duration("duration", i.Duration))
	if i.Replayed {
		a.add(slog.Bool("replayed", true))
	}
	a.err(i.Err)
	h.log(i.Context, slog.LevelDebug, "retryfuse: attempt done", &a)
}

func (h slogHooks) decision(i retryfuse.DecisionInfo) {
	level := slog.LevelDebug
	v := i.Verdict
	if (v.Decision == decide.Brake || v.Decision == decide.RejectConflict) && v.Evidence == decide.EvidenceFail {
		level = slog.LevelWarn
	}
	if !h.enabled(i.Context, level) {
		return
	}
	var a slogAttrs
	a.call(i.CallInfo, i.Attempt > 0)
	a.add(slog.String("decision", v.Decision.String()))
	a.add(slog.String("evidence", v.Evidence.String()))
	a.add(slog.Int("rule", int(v.Rule)))
	a.add(slog.String("reason", v.Reason))
	if i.KeyState != decide.KeyNone {
		a.add(slog.String("key_state", i.KeyState.String()))
	}
	h.log(i.Context, level, "retryfuse: decision", &a)
}

func (h slogHooks) retry(i retryfuse.RetryInfo) {
	if !h.enabled(i.Context, slog.LevelInfo) {
		return
	}
	var a slogAttrs
	a.call(i.CallInfo, true)
	a.add(slog.Duration("delay", i.Delay))
	a.add(slog.String("delay_source", i.Source))
	if i.Source == "retry_after" {
		a.add(slog.Duration("retry_after", i.RetryAfter))
	}
	var se *retryfuse.StatusError
	if errors.As(i.Err, &se) {
		a.add(slog.Int("status", se.StatusCode))
	}
	a.err(i.Err)
	h.log(i.Context, slog.LevelInfo, "retryfuse: retry", &a)
}

func (h slogHooks) reconcile(i retryfuse.ReconcileInfo) {
	if !h.enabled(i.Context, slog.LevelWarn) {
		return
	}
	var a slogAttrs
	a.call(i.CallInfo, true)
	if i.Err != nil {
		a.err(i.Err.Cause)
	}
	h.log(i.Context, slog.LevelWarn, "retryfuse: reconcile required", &a)
}

func (h slogHooks) giveUp(i retryfuse.GiveUpInfo) {
	level := slog.LevelWarn
	if errors.Is(i.Reason, retryfuse.ErrDeclined) {
		level = slog.LevelDebug // a refusal: the policy working
	}
	if !h.enabled(i.Context, level) {
		return
	}
	var a slogAttrs
	a.call(i.CallInfo, i.Attempt > 0)
	a.add(slog.String("reason", retryfuse.ReasonName(i.Reason)))
	if i.Verdict.Decision != 0 {
		a.add(slog.String("decision", i.Verdict.Decision.String()))
		a.add(slog.String("evidence", i.Verdict.Evidence.String()))
		a.add(slog.Int("rule", int(i.Verdict.Rule)))
	}
	if i.StatusCode != 0 {
		a.add(slog.Int("status", i.StatusCode))
	}
	a.err(i.Err)
	h.log(i.Context, level, "retryfuse: give up", &a)
}

// hiddenResend warns of a re-send that may have applied a write twice: one
// of a method that is not idempotent. net/http's re-sends of a GET whose
// idle connection had died, say, are harmless, and logged at Debug.
func (h slogHooks) hiddenResend(i retryfuse.AttemptDoneInfo) {
	level := slog.LevelWarn
	if decide.IdempotentMethod(i.Method) {
		level = slog.LevelDebug
	}
	if !h.enabled(i.Context, level) {
		return
	}
	var a slogAttrs
	a.call(i.CallInfo, true)
	a.add(slog.Int("connections", i.Connections))
	h.log(i.Context, level, "retryfuse: hidden resend", &a)
}

func (h slogHooks) breakerChange(i breaker.Change) {
	level, msg := slog.LevelInfo, "retryfuse: breaker change"
	switch {
	case i.From == i.To:
		msg = "retryfuse: breaker settings" // the state did not change
	case i.To == breaker.Open:
		level = slog.LevelWarn
	}
	if !h.enabled(context.Background(), level) {
		return
	}
	var a slogAttrs
	a.add(slog.String("scope", i.Scope))
	a.add(slog.String("from", i.From.String()))
	a.add(slog.String("to", i.To.String()))
	if i.Settings.Version != 0 {
		a.add(slog.Uint64("version", i.Settings.Version))
	}
	a.err(i.Cause)
	h.log(context.Background(), level, msg, &a)
}

func (h slogHooks) evidenceUnavailable(i retryfuse.EvidenceUnavailableInfo) {
	if !h.enabled(i.Context, slog.LevelWarn) {
		return
	}
	var a slogAttrs
	a.call(i.CallInfo, i.Attempt > 0)
	a.add(slog.String("source", i.Source))
	a.err(i.Err)
	h.log(i.Context, slog.LevelWarn, "retryfuse: evidence unavailable", &a)
}

// policy logs an action of the hedge, the bulkhead, the rate limiter,
// the throttle, the learnt limit, slow start, the fallback or single
// flight: a cut or a ramp, the fallback's doing and a read left unshared
// at Info, the rest at Debug (a refusal of one call among them). The actions are named by the
// strings retryfuse.PolicyInfo documents, a compatibility promise.
func (h slogHooks) policy(i retryfuse.PolicyInfo) {
	level := slog.LevelDebug
	switch {
	case i.Action == "answered", i.Action == "failed",
		i.Action == "handed_on", i.Action == "withheld", i.Action == "unshared",
		i.Action == "started", i.Action == "changed" && i.Limit < i.PrevLimit:
		level = slog.LevelInfo
	case i.Action == "panicked": // the caller's hook or Classifier: a bug to fix, reported once
		level = slog.LevelWarn
	}
	if !h.enabled(i.Context, level) {
		return
	}
	var a slogAttrs
	a.call(i.CallInfo, false)
	if i.Scope != "" {
		a.add(slog.String("scope", i.Scope))
	}
	a.add(slog.String("policy", i.Policy))
	a.add(slog.String("action", i.Action))
	if i.Wait > 0 {
		a.add(slog.Duration("wait", i.Wait))
	}
	if i.SharedCallID != 0 {
		a.add(slog.Uint64("shared_call_id", i.SharedCallID))
	}
	if i.Limit > 0 {
		a.add(slog.Int("limit", i.Limit))
	}
	if i.PrevLimit > 0 {
		a.add(slog.Int("prev_limit", i.PrevLimit))
	}
	if i.Why != "" {
		a.add(slog.String("why", i.Why))
	}
	a.err(i.Err)
	h.log(i.Context, level, "retryfuse: "+i.Policy+" "+i.Action, &a)
}
