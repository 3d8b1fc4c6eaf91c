package retryfuseotel

import (
	"errors"
	"math"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Names of the events NewHooks adds to the span in the request's context.
const (
	EventAttempt             = "retryfuse.attempt"
	EventDecision            = "retryfuse.decision"
	EventRetry               = "retryfuse.retry"
	EventReconcileRequired   = "retryfuse.reconcile_required"
	EventGiveUp              = "retryfuse.give_up"
	EventHiddenResend        = "retryfuse.hidden_resend"
	EventEvidenceUnavailable = "retryfuse.evidence_unavailable"
	EventPolicy              = "retryfuse.policy"
)

// Attribute keys found on span events only.
const (
	keyAttemptNumber   = attribute.Key("retryfuse.attempt.number")
	keyAttemptDuration = attribute.Key("retryfuse.attempt.duration")
	keyRetryable       = attribute.Key("retryfuse.retryable")
	keyDelay           = attribute.Key("retryfuse.delay.duration")
	keyRetryAfter      = attribute.Key("retryfuse.delay.retry_after")
	keyKeyState        = attribute.Key("retryfuse.idempotency_key.state")
	keyKeyValue        = attribute.Key("retryfuse.idempotency_key.value")
	keyResolution      = attribute.Key("retryfuse.reconcile.resolution")
	keyConnections     = attribute.Key("retryfuse.connections")
	keyReplayed        = attribute.Key("retryfuse.attempt.replayed")
	keyBranch          = attribute.Key("retryfuse.attempt.branch")
	keyWait            = attribute.Key("retryfuse.policy.wait")
	keySharedCall      = attribute.Key("retryfuse.single_flight.call_id")
)

// maxEventAttrs bounds the attributes of one event; an array of this size
// holds them.
const maxEventAttrs = 8

// eventAttrs collects an event's attributes without growing a slice.
type eventAttrs struct {
	buf [maxEventAttrs]attribute.KeyValue
	n   int
}

func (a *eventAttrs) add(kv attribute.KeyValue) {
	if a.n < len(a.buf) {
		a.buf[a.n] = kv
		a.n++
	}
}

// span returns the recording span of the call, or nil: the caller's span
// is the one active in the request's context.
func span(ci retryfuse.CallInfo) trace.Span {
	if ci.Context == nil {
		return nil
	}
	if s := trace.SpanFromContext(ci.Context); s.IsRecording() {
		return s
	}
	return nil
}

// start begins an event's attributes with the attempt number.
func (a *eventAttrs) start(ci retryfuse.CallInfo) {
	a.add(keyAttemptNumber.Int(ci.Attempt))
}

func addEvent(s trace.Span, name string, a *eventAttrs, opts ...trace.EventOption) {
	s.AddEvent(name, append(opts, trace.WithAttributes(a.buf[:a.n]...))...)
}

// callState returns the state of the call NewTransport traces, or nil:
// the span in the request's context is then the caller's.
func callStateOf(ci retryfuse.CallInfo) *callState {
	if ci.Context == nil {
		return nil
	}
	if s, ok := trace.SpanFromContext(ci.Context).(*callSpan); ok {
		return s.st
	}
	return nil
}

// attemptSpanOf returns the recording span of the attempt ci is about, or
// nil, and the options of an event on it. Under NewTransport, that is the
// attempt's CLIENT span (its events are stamped with the time its end was
// asked for, when it is held); when the attempt has no span of its own,
// or without NewTransport, the call's span.
func attemptSpanOf(ci retryfuse.CallInfo) (trace.Span, []trace.EventOption) {
	if st := callStateOf(ci); st != nil {
		if s, endAt := st.span(ci.Attempt); s != nil {
			if !s.IsRecording() {
				return nil, nil
			}
			if !endAt.IsZero() {
				return s, []trace.EventOption{trace.WithTimestamp(endAt)}
			}
			return s, nil
		}
	}
	return span(ci), nil
}

// attemptStart records, under NewTransport, the attempt about to be sent,
// whose CLIENT span (otelhttp's, below) has the resend count. Without
// NewTransport, it sets http.request.resend_count on the call's span as a
// re-send begins: the semantic conventions count re-sends as they happen,
// so a retry that is scheduled but never sent (the caller gave up during
// the wait) does not count.
func attemptStart(i retryfuse.AttemptStartInfo) {
	if st := callStateOf(i.CallInfo); st != nil {
		st.starting(i.Attempt)
		return
	}
	if i.Attempt < 2 {
		return
	}
	if s := span(i.CallInfo); s != nil {
		s.SetAttributes(semconv.HTTPRequestResendCount(i.Attempt - 1))
	}
}

// attemptEvent adds an attempt's result to its span and, under
// NewTransport, lets that span end.
func attemptEvent(i retryfuse.AttemptDoneInfo) {
	if st := callStateOf(i.CallInfo); st != nil {
		defer st.reported(i.Attempt)
	}
	s, opts := attemptSpanOf(i.CallInfo)
	if s == nil {
		return
	}
	var a eventAttrs
	a.start(i.CallInfo)
	if i.Branch > 0 {
		a.add(keyBranch.Int(i.Branch))
	}
	a.add(keyOutcome.String(i.Outcome.String()))
	a.add(keyPhase.String(i.Phase.String()))
	if i.StatusCode != 0 {
		a.add(semconv.HTTPResponseStatusCode(i.StatusCode))
	}
	a.add(keyRetryable.Bool(i.Retryable))
	a.add(keyAttemptDuration.Float64(i.Duration.Seconds()))
	if i.Replayed {
		a.add(keyReplayed.Bool(true))
	}
	addEvent(s, EventAttempt, &a, opts...)
}

func decisionEvent(i retryfuse.DecisionInfo) {
	s := span(i.CallInfo)
	if s == nil {
		return
	}
	var a eventAttrs
	a.start(i.CallInfo)
	a.add(keyDecision.String(i.Verdict.Decision.String()))
	a.add(keyEvidence.String(i.Verdict.Evidence.String()))
	a.add(keyRule.Int(int(i.Verdict.Rule)))
	if i.KeyState != decide.KeyNone {
		a.add(keyKeyState.String(i.KeyState.String()))
	}
	addEvent(s, EventDecision, &a)
}

func retryEvent(i retryfuse.RetryInfo) {
	s := span(i.CallInfo)
	if s == nil {
		return
	}
	var a eventAttrs
	a.start(i.CallInfo)
	a.add(keyDelaySource.String(i.Source))
	a.add(keyDelay.Float64(i.Delay.Seconds()))
	if i.Source == "retry_after" {
		a.add(keyRetryAfter.Float64(i.RetryAfter.Seconds()))
	}
	var se *retryfuse.StatusError
	if errors.As(i.Err, &se) {
		a.add(semconv.HTTPResponseStatusCode(se.StatusCode))
	}
	addEvent(s, EventRetry, &a)
}

// reconcileEvent carries the idempotency key's value: it is what the
// reconciliation looks up.
func reconcileEvent(i retryfuse.ReconcileInfo) {
	s := span(i.CallInfo)
	if s == nil {
		return
	}
	var a eventAttrs
	a.start(i.CallInfo)
	a.add(keyPhase.String(i.Phase.String()))
	a.add(idempotencyKeySource(i.IdempotencyKey, i.KeyGenerated))
	if i.IdempotencyKey != "" {
		a.add(keyKeyValue.String(i.IdempotencyKey))
	}
	a.add(keyResolution.String(i.Resolution))
	addEvent(s, EventReconcileRequired, &a)
}

func giveUpEvent(i retryfuse.GiveUpInfo) {
	s := span(i.CallInfo)
	if s == nil {
		return
	}
	var a eventAttrs
	a.start(i.CallInfo)
	a.add(keyReason.String(retryfuse.ReasonName(i.Reason)))
	if i.StatusCode != 0 {
		a.add(semconv.HTTPResponseStatusCode(i.StatusCode))
	}
	addEvent(s, EventGiveUp, &a)
}

func hiddenResendEvent(i retryfuse.AttemptDoneInfo) {
	s, opts := attemptSpanOf(i.CallInfo)
	if s == nil {
		return
	}
	var a eventAttrs
	a.start(i.CallInfo)
	a.add(keyConnections.Int(i.Connections))
	addEvent(s, EventHiddenResend, &a, opts...)
}

func evidenceUnavailableEvent(i retryfuse.EvidenceUnavailableInfo) {
	s := span(i.CallInfo)
	if s == nil {
		return
	}
	var a eventAttrs
	a.start(i.CallInfo)
	a.add(keySource.String(i.Source))
	addEvent(s, EventEvidenceUnavailable, &a)
}

func policyEvent(i retryfuse.PolicyInfo) {
	s := span(i.CallInfo)
	if s == nil {
		return
	}
	var a eventAttrs
	a.start(i.CallInfo)
	if i.Branch > 0 {
		a.add(keyBranch.Int(i.Branch))
	}
	a.add(keyPolicy.String(i.Policy))
	a.add(keyAction.String(i.Action))
	if i.Scope != "" {
		a.add(keyPolicyScope.String(i.Scope))
	}
	if i.Wait > 0 {
		a.add(keyWait.Float64(i.Wait.Seconds()))
	}
	if i.SharedCallID != 0 {
		a.add(keySharedCall.Int64(int64(min(i.SharedCallID, math.MaxInt64))))
	}
	if i.Limit > 0 {
		a.add(keyLimit.Int(i.Limit))
	}
	if i.PrevLimit > 0 {
		a.add(keyPrevLimit.Int(i.PrevLimit))
	}
	if i.Why != "" {
		a.add(keyWhy.String(i.Why))
	}
	if i.Err != nil {
		a.add(keyReason.String(retryfuse.ReasonName(i.Err)))
	}
	addEvent(s, EventPolicy, &a)
}
