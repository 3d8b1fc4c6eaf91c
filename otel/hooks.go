// Package retryfuseotel reports what a retryfuse Transport does to
// OpenTelemetry: NewHooks returns Hooks that record metrics and add an
// event for each of its decisions to a span; NewTransport traces each call
// by the HTTP semantic conventions, with otelhttp's Transport as the
// retryfuse Transport's base:
//
//	hooks, err := retryfuseotel.NewHooks()
//	if err != nil { ... }
//	rf := &retryfuse.Transport{
//		Base:  otelhttp.NewTransport(base), // a CLIENT span per request sent
//		Hooks: hooks,
//	}
//	client := &http.Client{Transport: retryfuseotel.NewTransport(rf)}
//
// A GET answered 503, 503, 200 is then an INTERNAL span named GET, with no
// HTTP attributes, holding the call's decisions (retryfuse.decision,
// retryfuse.retry, and retryfuse.give_up or retryfuse.reconcile_required
// when the call ends so), over three CLIENT spans, otelhttp's, each with
// the HTTP attributes, its own trace context on the wire, its result
// (retryfuse.attempt) and, on the second and third,
// http.request.resend_count 1 and 2. See README.md for the instruments and
// the events.
package retryfuseotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/decide"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/retryfuse/retryfuse/otel"

// Option configures NewHooks or NewTransport.
type Option func(*config)

type config struct {
	mp   metric.MeterProvider
	tp   trace.TracerProvider
	name func(*http.Request) string
}

// WithMeterProvider sets the MeterProvider the instruments of NewHooks
// are created with. Nil, or no option, means otel.GetMeterProvider() at
// the time NewHooks is called. NewTransport ignores it.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets the TracerProvider NewTransport starts the
// calls' spans with; the attempts' spans below (otelhttp's) take it from
// them. Nil, or no option, means otel.GetTracerProvider() at the time
// NewTransport is called. NewHooks ignores it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithSpanName sets how NewTransport names a call's span, after the
// operation it stands for ("GetInvoice"); an empty name, or no option,
// means the request's method. NewHooks ignores it.
func WithSpanName(name func(*http.Request) string) Option {
	return func(c *config) { c.name = name }
}

// retryDelayBuckets are the boundaries of retryfuse.retry.delay, in
// seconds: from a jittered 100ms backoff up to the 30s Retry-After cap.
var retryDelayBuckets = []float64{0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// attemptDurationBuckets are the boundaries of retryfuse.attempt.duration
// and match the HTTP semantic conventions' client duration.
var attemptDurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

type instruments struct {
	attempts           metric.Int64Counter
	attemptDuration    metric.Float64Histogram
	retries            metric.Int64Counter
	retryDelay         metric.Float64Histogram
	reconcile          metric.Int64Counter
	brakes             metric.Int64Counter
	giveUps            metric.Int64Counter
	budgetRefusals     metric.Int64Counter
	hiddenResends      metric.Int64Counter
	breakerTransitions metric.Int64Counter
	breakerState       metric.Int64Gauge
	breakerVersion     metric.Int64Gauge
	evidenceUnavail    metric.Int64Counter
	policyActions      metric.Int64Counter
	learntLimit        metric.Int64Gauge
}

// NewHooks returns Hooks that record retryfuse's metrics and add an event
// for each of the transport's decisions to a span, when it is recording;
// both are listed in README.md. They start no span. Under NewTransport,
// an attempt's result goes to the attempt's CLIENT span and the call's
// decisions to the call's span (see NewTransport); otherwise every event
// goes to the span active in the request's context
// (trace.SpanFromContext(CallInfo.Context)), which then also gets
// http.request.resend_count. Combine the Hooks with others through
// retryfuse.JoinHooks. The error
// joins those of the instruments that could not be created; the Hooks are
// then empty.
//
// The Hooks are safe for concurrent use.
func NewHooks(opts ...Option) (retryfuse.Hooks, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	m := c.mp.Meter(ScopeName)
	var (
		ins  instruments
		errs []error
	)
	counter := func(name, unit, desc string) metric.Int64Counter {
		i, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	ins.attempts = counter("retryfuse.attempts", "{attempt}", "Attempts sent by the transport, by outcome.")
	ins.retries = counter("retryfuse.retries", "{retry}", "Retries scheduled, by where the delay came from.")
	ins.reconcile = counter("retryfuse.reconcile_required", "{call}", "Calls that ended with a write of uncertain outcome, not replayed.")
	ins.brakes = counter("retryfuse.brakes", "{call}", "Calls stopped by the decision core, by rule.")
	ins.giveUps = counter("retryfuse.give_ups", "{call}", "Calls that stopped repeating for a reason other than success.")
	ins.budgetRefusals = counter("retryfuse.budget.refusals", "{call}", "Retries refused by a shared retry budget.")
	ins.hiddenResends = counter("retryfuse.hidden_resends", "{resend}", "Requests the base transport re-sent by itself within one attempt.")
	ins.breakerTransitions = counter("retryfuse.breaker.transitions", "{transition}", "Breaker state changes, by scope.")
	ins.evidenceUnavail = counter("retryfuse.evidence_unavailable", "{event}", "Fail-safes applied because a budget or ledger could not answer.")
	ins.policyActions = counter("retryfuse.policy.actions", "{event}", "Actions of the hedge, bulkhead, rate limiter, throttle, learnt limit, slow start, fallback and single flight, by policy and action.")
	var err error
	ins.attemptDuration, err = m.Float64Histogram("retryfuse.attempt.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one attempt, until its response headers or its error."),
		metric.WithExplicitBucketBoundaries(attemptDurationBuckets...))
	errs = append(errs, err)
	ins.retryDelay, err = m.Float64Histogram("retryfuse.retry.delay", metric.WithUnit("s"),
		metric.WithDescription("Wait before a retry."),
		metric.WithExplicitBucketBoundaries(retryDelayBuckets...))
	errs = append(errs, err)
	ins.breakerState, err = m.Int64Gauge("retryfuse.breaker.state", metric.WithUnit("1"),
		metric.WithDescription("1 for the state a breaker scope is in, 0 for the states it left."))
	errs = append(errs, err)
	ins.breakerVersion, err = m.Int64Gauge("retryfuse.breaker.settings.version", metric.WithUnit("1"),
		metric.WithDescription("The version of the breaker settings a scope was last reported under."))
	errs = append(errs, err)
	ins.learntLimit, err = m.Int64Gauge("retryfuse.adaptive_limit", metric.WithUnit("{attempt}"),
		metric.WithDescription("The attempts in flight a scope's learnt limit admits (Load.Adaptive), as it changes."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return retryfuse.Hooks{}, fmt.Errorf("retryfuseotel: creating instruments: %w", err)
	}
	return ins.hooks(), nil
}

func (ins *instruments) hooks() retryfuse.Hooks {
	return retryfuse.Hooks{
		AttemptStart:        attemptStart,
		AttemptDone:         ins.attemptDone,
		Decision:            ins.decision,
		Retry:               ins.retry,
		Reconcile:           ins.reconcileRequired,
		GiveUp:              ins.giveUp,
		HiddenResend:        ins.hiddenResend,
		BreakerChange:       ins.breakerChange,
		EvidenceUnavailable: ins.evidenceUnavailable,
		Policy:              ins.policy,
	}
}

// Attribute keys of retryfuse's own.
const (
	keyOutcome     = attribute.Key("retryfuse.outcome")
	keyPhase       = attribute.Key("retryfuse.phase")
	keyDelaySource = attribute.Key("retryfuse.delay.source")
	keyDecision    = attribute.Key("retryfuse.decision")
	keyEvidence    = attribute.Key("retryfuse.evidence")
	keyRule        = attribute.Key("retryfuse.rule")
	keyReason      = attribute.Key("retryfuse.reason")
	keyKeySource   = attribute.Key("retryfuse.idempotency_key.source")
	keySource      = attribute.Key("retryfuse.source")
	keyScope       = attribute.Key("retryfuse.breaker.scope")
	keyFrom        = attribute.Key("retryfuse.breaker.from")
	keyTo          = attribute.Key("retryfuse.breaker.to")
	keyState       = attribute.Key("retryfuse.breaker.state")
	keyPolicy      = attribute.Key("retryfuse.policy")
	keyAction      = attribute.Key("retryfuse.policy.action")
	keyPolicyScope = attribute.Key("retryfuse.policy.scope")
	keyLimit       = attribute.Key("retryfuse.policy.limit")
	keyPrevLimit   = attribute.Key("retryfuse.policy.limit.previous")
	keyWhy         = attribute.Key("retryfuse.policy.why")
)

// ctxOf is the context to record a measurement with: the request's, so that
// exemplars link to its trace, or context.Background() when an Info has
// none.
func ctxOf(ci retryfuse.CallInfo) context.Context {
	if ci.Context == nil {
		return context.Background()
	}
	return ci.Context
}

// method is the http.request.method attribute: the known methods as they
// are, any other as _OTHER, which bounds its cardinality.
func method(m string) attribute.KeyValue {
	if knownMethod(m) {
		return semconv.HTTPRequestMethodKey.String(m)
	}
	return semconv.HTTPRequestMethodOther
}

// knownMethod reports whether the semantic conventions know method m.
func knownMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH":
		return true
	}
	return false
}

// idempotencyKeySource says where a call's idempotency key came from:
// generated, carried or none.
func idempotencyKeySource(key string, generated bool) attribute.KeyValue {
	switch {
	case generated:
		return keyKeySource.String("generated")
	case key != "":
		return keyKeySource.String("carried")
	}
	return keyKeySource.String("none")
}

func (ins *instruments) attemptDone(i retryfuse.AttemptDoneInfo) {
	attemptEvent(i)
	ctx := ctxOf(i.CallInfo)
	set := metric.WithAttributes(method(i.Method), keyOutcome.String(i.Outcome.String()))
	ins.attemptDuration.Record(ctx, i.Duration.Seconds(), set)
	kvs := []attribute.KeyValue{method(i.Method), keyOutcome.String(i.Outcome.String()), keyPhase.String(i.Phase.String())}
	if i.StatusCode != 0 {
		kvs = append(kvs, semconv.HTTPResponseStatusCode(i.StatusCode))
	}
	ins.attempts.Add(ctx, 1, metric.WithAttributes(kvs...))
}

func (ins *instruments) decision(i retryfuse.DecisionInfo) {
	decisionEvent(i)
	v := i.Verdict
	if v.Decision != decide.Brake && v.Decision != decide.RejectConflict {
		return
	}
	ins.brakes.Add(ctxOf(i.CallInfo), 1, metric.WithAttributes(method(i.Method),
		keyDecision.String(v.Decision.String()), keyEvidence.String(v.Evidence.String()), keyRule.Int(int(v.Rule))))
}

func (ins *instruments) retry(i retryfuse.RetryInfo) {
	retryEvent(i)
	ctx := ctxOf(i.CallInfo)
	set := metric.WithAttributes(method(i.Method), keyDelaySource.String(i.Source))
	ins.retries.Add(ctx, 1, set)
	ins.retryDelay.Record(ctx, i.Delay.Seconds(), set)
}

func (ins *instruments) reconcileRequired(i retryfuse.ReconcileInfo) {
	reconcileEvent(i)
	ins.reconcile.Add(ctxOf(i.CallInfo), 1, metric.WithAttributes(method(i.Method), keyPhase.String(i.Phase.String()), idempotencyKeySource(i.IdempotencyKey, i.KeyGenerated)))
}

func (ins *instruments) giveUp(i retryfuse.GiveUpInfo) {
	giveUpEvent(i)
	ctx := ctxOf(i.CallInfo)
	ins.giveUps.Add(ctx, 1, metric.WithAttributes(method(i.Method), keyReason.String(retryfuse.ReasonName(i.Reason))))
	if errors.Is(i.Reason, retryfuse.ErrBudgetExhausted) {
		ins.budgetRefusals.Add(ctx, 1, metric.WithAttributes(method(i.Method)))
	}
}

func (ins *instruments) hiddenResend(i retryfuse.AttemptDoneInfo) {
	hiddenResendEvent(i)
	if n := i.Connections - 1; n > 0 {
		ins.hiddenResends.Add(ctxOf(i.CallInfo), int64(n), metric.WithAttributes(method(i.Method)))
	}
}

// breakerChange records a transition, or a scope's first request under
// settings of a new version (From == To: no transition), with the version
// in force. It belongs to a scope, not to one call: it has no context and
// adds no span event.
func (ins *instruments) breakerChange(i breaker.Change) {
	ctx := context.Background()
	if v := i.Settings.Version; v != 0 {
		ins.breakerVersion.Record(ctx, int64(min(v, math.MaxInt64)), metric.WithAttributes(keyScope.String(i.Scope)))
	}
	if i.From == i.To {
		return
	}
	from, to := i.From.String(), i.To.String()
	ins.breakerTransitions.Add(ctx, 1, metric.WithAttributes(keyScope.String(i.Scope), keyFrom.String(from), keyTo.String(to)))
	ins.breakerState.Record(ctx, 0, metric.WithAttributes(keyScope.String(i.Scope), keyState.String(from)))
	ins.breakerState.Record(ctx, 1, metric.WithAttributes(keyScope.String(i.Scope), keyState.String(to)))
}

func (ins *instruments) evidenceUnavailable(i retryfuse.EvidenceUnavailableInfo) {
	evidenceUnavailableEvent(i)
	ins.evidenceUnavail.Add(ctxOf(i.CallInfo), 1, metric.WithAttributes(method(i.Method), keySource.String(i.Source)))
}

// policy counts an action of the hedge, the bulkhead, the rate limiter,
// the throttle, the learnt limit, slow start, the fallback or single
// flight, and adds it to the call's span; a learnt limit's change is also
// the scope's gauge.
func (ins *instruments) policy(i retryfuse.PolicyInfo) {
	policyEvent(i)
	ctx := ctxOf(i.CallInfo)
	ins.policyActions.Add(ctx, 1, metric.WithAttributes(method(i.Method), keyPolicy.String(i.Policy), keyAction.String(i.Action)))
	if i.Policy == "adaptive_limit" && i.Action == "changed" {
		ins.learntLimit.Record(ctx, int64(i.Limit), metric.WithAttributes(keyPolicyScope.String(i.Scope)))
	}
}
