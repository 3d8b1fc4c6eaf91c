package retryfuseotel

import (
	"errors"
	"net/http"

	"github.com/retryfuse/retryfuse"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Event names Wrap adds to the active span.
const (
	EventReconcileRequired = "retryfuse.reconcile_required"
	EventGiveUp            = "retryfuse.give_up"
)

// Wrap returns a RoundTripper that calls rt, a retryfuse Transport (or a
// RoundTripper over one), and records on the span active in the request's
// context how a call ended without a response:
//
//   - a *retryfuse.ReconcileRequiredError adds the event
//     retryfuse.reconcile_required (http.request.method, retryfuse.phase,
//     retryfuse.attempts, retryfuse.idempotency_key.source and, when
//     there is one, retryfuse.idempotency_key — the value, needed to
//     reconcile);
//   - a *retryfuse.RetryError adds the event retryfuse.give_up
//     (http.request.method, retryfuse.reason, retryfuse.attempts);
//   - either sets http.request.resend_count on the span to the attempts
//     made less one, when that is above zero.
//
// A call that returns a response adds nothing: what happened between its
// attempts is not visible from outside RoundTrip. Place Wrap directly
// above the retryfuse Transport and beneath otelhttp's Transport, whose
// span is then the active one. Wrap does nothing when no span is
// recording. It forwards CloseIdleConnections to rt.
func Wrap(rt http.RoundTripper) http.RoundTripper {
	return &wrapped{rt: rt}
}

type wrapped struct{ rt http.RoundTripper }

var _ http.RoundTripper = (*wrapped)(nil)

func (w *wrapped) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.rt.RoundTrip(req)
	if err != nil {
		if span := trace.SpanFromContext(req.Context()); span.IsRecording() {
			recordEnd(span, req.Method, err)
		}
	}
	return resp, err
}

// CloseIdleConnections closes the idle connections of the wrapped
// RoundTripper, when it has such a method.
func (w *wrapped) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := w.rt.(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

// recordEnd records on span how a call ended with err.
func recordEnd(span trace.Span, m string, err error) {
	var (
		rre      *retryfuse.ReconcileRequiredError
		re       *retryfuse.RetryError
		attempts int
	)
	switch {
	case errors.As(err, &rre):
		attempts = rre.Attempts
		attrs := []attribute.KeyValue{method(m), keyPhase.String(rre.Phase.String()),
			keyAttempts.Int(attempts), idempotencyKeySource(rre.IdempotencyKey, rre.KeyGenerated)}
		if rre.IdempotencyKey != "" {
			attrs = append(attrs, keyKey.String(rre.IdempotencyKey))
		}
		span.AddEvent(EventReconcileRequired, trace.WithAttributes(attrs...))
	case errors.As(err, &re):
		attempts = re.Attempts
		span.AddEvent(EventGiveUp, trace.WithAttributes(method(m),
			keyReason.String(reason(re.Reason)), keyAttempts.Int(attempts)))
	default:
		return
	}
	if attempts > 1 {
		span.SetAttributes(semconv.HTTPRequestResendCount(attempts - 1))
	}
}
