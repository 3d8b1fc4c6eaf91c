package retryfuse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The records of sloghooks.New for what a Transport reports, on a fixed
// clock with jitter at half the ceiling: the times and delays of its
// records are asserted exactly, which the package's test seams alone
// allow. The adapter's own tests are in sloghooks; SloghooksNew is
// sloghooks.New (export_test.go).

// slogRecords decodes the JSON lines of buf, dropping the time.
func slogRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		delete(m, slog.TimeKey)
		recs = append(recs, m)
	}
	return recs
}

// rec builds an expected record; numbers are float64 as JSON decodes them.
func rec(level, msg string, kv ...any) map[string]any {
	m := map[string]any{slog.LevelKey: level, slog.MessageKey: msg}
	for i := 0; i < len(kv); i += 2 {
		v := kv[i+1]
		switch x := v.(type) {
		case int:
			v = float64(x)
		case time.Duration:
			v = float64(x)
		}
		m[kv[i].(string)] = v
	}
	return m
}

func assertRecords(t *testing.T, got, want []map[string]any) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			t.Errorf("record %d: missing, want %v", i, want[i])
		case i >= len(want):
			t.Errorf("record %d: got %v, want none", i, got[i])
		case !reflect.DeepEqual(got[i], want[i]):
			t.Errorf("record %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}

// slogTransport returns a Transport logging to a JSON handler at level,
// with a fixed clock, no real waits and jitter at half the ceiling.
func slogTransport(level slog.Level) (*Transport, *bytes.Buffer) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tr := &Transport{Hooks: SloghooksNew(logger)}
	setClock(tr, func() time.Time { return fixed }, func(context.Context, time.Duration) error { return nil })
	setRandN(tr, func(n int64) int64 { return n / 2 })
	return tr, &buf
}

func roundTrip(t *testing.T, tr *Transport, method, url, key string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(headerIdempotencyKey, key)
	}
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
	}
	return resp, err
}

func TestSlogHooksRetryThenSuccess(t *testing.T) {
	srv := statusSequence(t, http.StatusServiceUnavailable)
	tr, buf := slogTransport(slog.LevelDebug)
	resp, err := roundTrip(t, tr, http.MethodGet, srv.URL+"/things?token=abc", "")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("RoundTrip: got %v, %v; want 200, nil", resp, err)
	}
	url := srv.URL + "/things?token=REDACTED"
	call := func(attempt int) []any {
		return []any{"call_id", 1, "attempt", attempt, "method", "GET", "url", url}
	}
	with := func(base []any, kv ...any) []any { return append(append([]any{}, base...), kv...) }
	want := []map[string]any{
		// Nothing stops the first attempt: no decision record before it.
		rec("DEBUG", "retryfuse: attempt start", with(call(1), "elapsed", 0)...),
		rec("DEBUG", "retryfuse: attempt done", with(call(1), "phase", "post_write", "elapsed", 0,
			"status", 503, "outcome", "failure", "retryable", true, "duration", 0,
			"error", "retryfuse: retryable status 503 Service Unavailable")...),
		rec("DEBUG", "retryfuse: decision", with(call(1), "phase", "post_write", "elapsed", 0,
			"decision", "replay_safe", "evidence", "pass", "rule", 8, "reason", "the request may be sent")...),
		rec("INFO", "retryfuse: retry", with(call(1), "phase", "post_write", "elapsed", 0,
			"delay", 50*time.Millisecond, "delay_source", "backoff", "status", 503,
			"error", "retryfuse: retryable status 503 Service Unavailable")...),
		rec("DEBUG", "retryfuse: attempt start", with(call(2), "elapsed", 0)...),
		rec("DEBUG", "retryfuse: attempt done", with(call(2), "phase", "post_write", "elapsed", 0,
			"status", 200, "outcome", "success", "retryable", false, "duration", 0)...),
		// A confirmed result asks the decision core nothing: no decision record.
	}
	assertRecords(t, slogRecords(t, buf), want)
}

// A POST without an idempotency key that gets a 503 is braked by rule 5
// (evidence pass: debug) and the call gives up (warn).
func TestSlogHooksBrakeNotRepeatable(t *testing.T) {
	srv := statusSequence(t, http.StatusServiceUnavailable)
	tr, buf := slogTransport(slog.LevelInfo)
	resp, err := roundTrip(t, tr, http.MethodPost, srv.URL+"/orders", "")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("RoundTrip: got %v, %v; want 503, nil", resp, err)
	}
	want := []map[string]any{
		rec("WARN", "retryfuse: give up", "call_id", 1, "attempt", 1, "method", "POST",
			"url", srv.URL+"/orders", "phase", "post_write", "elapsed", 0,
			"reason", "not_repeatable", "decision", "brake", "evidence", "pass", "rule", 5, "status", 503),
	}
	assertRecords(t, slogRecords(t, buf), want)
}

// A keyed POST whose attempt stalls past AttemptTimeout after it was
// written must be reconciled, and says so at warn with its key.
func TestSlogHooksReconcile(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	tr, buf := slogTransport(slog.LevelDebug)
	tr.Retry.AttemptTimeout = 50 * time.Millisecond
	_, err := roundTrip(t, tr, http.MethodPost, srv.URL+"/orders", "order-42")
	var rre *ReconcileRequiredError
	if !errors.As(err, &rre) {
		t.Fatalf("RoundTrip: got %v, want a *ReconcileRequiredError", err)
	}
	cause := rre.Cause.Error()
	call := []any{"call_id", 1, "method", "POST", "url", srv.URL + "/orders", "idempotency_key", "order-42", "elapsed", 0}
	with := func(kv ...any) []any { return append(append([]any{}, call...), kv...) }
	want := []map[string]any{
		rec("DEBUG", "retryfuse: attempt start", with("attempt", 1, "timeout", 50*time.Millisecond)...),
		rec("DEBUG", "retryfuse: attempt done", with("attempt", 1, "phase", "post_write",
			"outcome", "timeout", "retryable", true, "duration", 0, "error", cause)...),
		rec("DEBUG", "retryfuse: decision", with("attempt", 1, "phase", "post_write",
			"decision", "reconcile_required", "evidence", "unknown", "rule", 3,
			"reason", "the last attempt's outcome is uncertain and the method is not idempotent")...),
		rec("WARN", "retryfuse: reconcile required", with("attempt", 1, "phase", "post_write", "error", cause)...),
	}
	assertRecords(t, slogRecords(t, buf), want)
	if !errors.Is(err, ErrAttemptTimeout) {
		t.Errorf("cause: got %v, want one matching ErrAttemptTimeout", rre.Cause)
	}
}
