package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		// What each call returned.
		"/items: 200 OK",
		"/orders: reconcile required",
		"retryfuse: attempts exhausted after 3 attempts",
		// Each call an INTERNAL span, with no attributes: events come
		// next; each request sent a CLIENT span.
		"internal GET\n    event retryfuse.decision",
		"internal POST\n    event retryfuse.decision",
		"client HTTP POST\n",
		// Span events: the retried GET, the reconcile, the refused GET.
		"http.request.resend_count=1",
		"event retryfuse.retry retryfuse.attempt.number=1 retryfuse.delay.source=backoff",
		"event retryfuse.attempt retryfuse.attempt.number=2 retryfuse.outcome=success retryfuse.phase=post_write http.response.status_code=200",
		"event retryfuse.decision retryfuse.attempt.number=1 retryfuse.decision=reconcile_required retryfuse.evidence=unknown retryfuse.rule=3",
		"event retryfuse.reconcile_required retryfuse.attempt.number=1 retryfuse.phase=post_write retryfuse.idempotency_key.source=carried retryfuse.idempotency_key.value=order-42 retryfuse.reconcile.resolution=still_unknown",
		"http.request.resend_count=2",
		"event retryfuse.give_up retryfuse.attempt.number=3 retryfuse.reason=attempts_exhausted",
		// Metrics, with their values.
		"http.request.method=GET retryfuse.outcome=failure retryfuse.phase=pre_write 3\n",
		"http.request.method=POST retryfuse.outcome=timeout retryfuse.phase=post_write 1\n",
		"http.request.method=GET http.response.status_code=200 retryfuse.outcome=success retryfuse.phase=post_write 1\n",
		"http.request.method=GET http.response.status_code=503 retryfuse.outcome=failure retryfuse.phase=post_write 1\n",
		"http.request.method=GET retryfuse.delay.source=backoff 3\n",
		"http.request.method=POST retryfuse.idempotency_key.source=carried retryfuse.phase=post_write 1\n",
		"http.request.method=GET retryfuse.reason=attempts_exhausted 1\n",
		"retryfuse.retry.delay (s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
