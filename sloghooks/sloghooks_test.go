package sloghooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/throttle"
	"github.com/retryfuse/retryfuse/sloghooks"
)

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
// with a backoff of at most a millisecond. Its clock is the real one: the
// tests here assert no time or delay (the root package's tests, which can
// fix its clock, assert them).
func slogTransport(t *testing.T, level slog.Level) (*retryfuse.Transport, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
	tr := &retryfuse.Transport{
		Hooks: sloghooks.New(logger),
		Retry: retryfuse.RetryPolicy{InitialBackoff: time.Millisecond},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr, &buf
}

// statusSequence returns a loopback server that answers its requests with
// statuses in order, then 200.
func statusSequence(t *testing.T, statuses ...int) *httptest.Server {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i := int(n.Add(1)) - 1; i < len(statuses) {
			w.WriteHeader(statuses[i])
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func roundTrip(t *testing.T, tr *retryfuse.Transport, method, url, key string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
	}
	return resp, err
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// finalReason returns the reason a Transport gives up with when an
// attempt fails with an error it does not repeat (ReasonName "final"), as
// its GiveUp hook reports it.
func finalReason(t *testing.T) error {
	t.Helper()
	var reason error
	tr := &retryfuse.Transport{
		Base:  roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("malformed request") }),
		Hooks: retryfuse.Hooks{GiveUp: func(i retryfuse.GiveUpInfo) { reason = i.Reason }},
	}
	if _, err := roundTrip(t, tr, http.MethodGet, "http://example.invalid/", ""); err == nil {
		t.Fatal("RoundTrip: got no error, want the base's")
	}
	if retryfuse.ReasonName(reason) != "final" {
		t.Fatalf("GiveUpInfo.Reason: got %v (%q), want one named final", reason, retryfuse.ReasonName(reason))
	}
	return reason
}

func TestSlogHooksLevels(t *testing.T) {
	t.Run("first attempt succeeds: nothing above debug", func(t *testing.T) {
		srv := statusSequence(t)
		tr, buf := slogTransport(t, slog.LevelInfo)
		if _, err := roundTrip(t, tr, http.MethodGet, srv.URL, ""); err != nil {
			t.Fatal(err)
		}
		if buf.Len() != 0 {
			t.Errorf("got %q, want no records at info", buf.String())
		}
	})
	t.Run("a retry logs once at info", func(t *testing.T) {
		srv := statusSequence(t, http.StatusTooManyRequests)
		tr, buf := slogTransport(t, slog.LevelInfo)
		if _, err := roundTrip(t, tr, http.MethodGet, srv.URL, ""); err != nil {
			t.Fatal(err)
		}
		recs := slogRecords(t, buf)
		if len(recs) != 1 || recs[0][slog.MessageKey] != "retryfuse: retry" || recs[0][slog.LevelKey] != "INFO" {
			t.Errorf("got %v, want one INFO retryfuse: retry", recs)
		}
	})
}

func TestSlogHooksDirectEvents(t *testing.T) {
	var buf bytes.Buffer
	h := sloghooks.New(slog.New(slog.NewJSONHandler(&buf, nil))) // info
	ci := retryfuse.CallInfo{CallID: 7, Attempt: 2, Method: "PUT", URL: "http://x/y", IdempotencyKey: "k1", KeyGenerated: true, Phase: decide.PhasePostWrite, Elapsed: time.Second}
	h.HiddenResend(retryfuse.AttemptDoneInfo{CallInfo: ci, Connections: 2}) // a PUT, idempotent: debug, dropped
	post := ci
	post.Method = "POST"
	h.HiddenResend(retryfuse.AttemptDoneInfo{CallInfo: post, Connections: 2}) // a write that may have gone twice: warn
	h.EvidenceUnavailable(retryfuse.EvidenceUnavailableInfo{CallInfo: ci, Source: "budget", Err: errors.New("store down")})
	h.GiveUp(retryfuse.GiveUpInfo{CallInfo: ci, Reason: retryfuse.ErrBudgetExhausted, Err: errors.New("boom")}) // a refusal, the policy working: debug, dropped
	h.GiveUp(retryfuse.GiveUpInfo{CallInfo: ci, Reason: retryfuse.ErrAttemptsExhausted, Err: errors.New("boom")})
	h.Decision(retryfuse.DecisionInfo{CallInfo: ci, Verdict: decide.Verdict{Decision: decide.Brake, Evidence: decide.EvidenceFail, Rule: decide.RuleFailureThreshold, Reason: "streak"}})
	h.Decision(retryfuse.DecisionInfo{CallInfo: ci, Verdict: decide.Verdict{Decision: decide.Brake, Evidence: decide.EvidencePass, Rule: decide.RuleInFlight, Reason: "in flight"}, KeyState: decide.KeyInFlight}) // debug: dropped
	hedge := ci
	hedge.Branch = 1
	h.Policy(retryfuse.PolicyInfo{CallInfo: hedge, Policy: "hedge", Action: "sent", Wait: 20 * time.Millisecond})                                                 // debug: dropped
	h.Policy(retryfuse.PolicyInfo{CallInfo: hedge, Policy: "hedge", Action: "refused", Wait: 20 * time.Millisecond, Err: retryfuse.ErrBudgetExhausted})           // one call's refusal: debug, dropped
	h.Policy(retryfuse.PolicyInfo{CallInfo: ci, Policy: "bulkhead", Action: "rejected", Err: &retryfuse.BulkheadFullError{Scope: "http://x:80", MaxInFlight: 8}}) // debug, dropped

	call := []any{"call_id", 7, "attempt", 2, "method", "PUT", "url", "http://x/y", "phase", "post_write",
		"idempotency_key", "k1", "key_generated", true, "elapsed", time.Second}
	with := func(kv ...any) []any { return append(append([]any{}, call...), kv...) }
	want := []map[string]any{
		rec("WARN", "retryfuse: hidden resend", append([]any{"call_id", 7, "attempt", 2, "method", "POST", "url", "http://x/y", "phase", "post_write",
			"idempotency_key", "k1", "key_generated", true, "elapsed", time.Second}, "connections", 2)...),
		rec("WARN", "retryfuse: evidence unavailable", with("source", "budget", "error", "store down")...),
		rec("WARN", "retryfuse: give up", with("reason", "attempts_exhausted", "error", "boom")...),
		rec("WARN", "retryfuse: decision", with("decision", "brake", "evidence", "fail", "rule", 6, "reason", "streak")...),
	}
	assertRecords(t, slogRecords(t, &buf), want)
}

func TestSlogHooksLoadEvents(t *testing.T) {
	var buf bytes.Buffer
	h := sloghooks.New(slog.New(slog.NewJSONHandler(&buf, nil))) // info
	ci := retryfuse.CallInfo{CallID: 9, Attempt: 1, Method: "GET", URL: "http://x/", Elapsed: time.Millisecond}
	throttled := &throttle.Error{Scope: "http://x:80", Share: 0.42}
	h.Policy(retryfuse.PolicyInfo{CallInfo: retryfuse.CallInfo{CallID: 9, Method: "GET", URL: "http://x/"}, Scope: "http://x:80", Policy: "throttle", Action: "rejected", Err: throttled}) // one call's refusal: debug, dropped
	h.Policy(retryfuse.PolicyInfo{CallInfo: ci, Scope: "http://x:80", Policy: "adaptive_limit", Action: "changed", Limit: 12, PrevLimit: 9, Why: "growth"})                                // debug: dropped
	h.Policy(retryfuse.PolicyInfo{CallInfo: ci, Scope: "http://x:80", Policy: "adaptive_limit", Action: "changed", Limit: 9, PrevLimit: 13, Why: "latency"})
	h.Policy(retryfuse.PolicyInfo{CallInfo: ci, Scope: "http://x:80", Policy: "slow_start", Action: "started", Wait: time.Second, Limit: 1, Why: "breaker_closed"})
	call := []any{"call_id", 9, "attempt", 1, "method", "GET", "url", "http://x/", "elapsed", time.Millisecond, "scope", "http://x:80"}
	with := func(kv ...any) []any { return append(append([]any{}, call...), kv...) }
	want := []map[string]any{
		rec("INFO", "retryfuse: adaptive_limit changed", with("policy", "adaptive_limit", "action", "changed", "limit", 9, "prev_limit", 13, "why", "latency")...),
		rec("INFO", "retryfuse: slow_start started", with("policy", "slow_start", "action", "started", "wait", time.Second, "limit", 1, "why", "breaker_closed")...),
	}
	assertRecords(t, slogRecords(t, &buf), want)
}

func TestSlogHooksBreakerChange(t *testing.T) {
	var buf bytes.Buffer
	h := sloghooks.New(slog.New(slog.NewJSONHandler(&buf, nil)))
	h.BreakerChange(breaker.Change{Scope: "api.example:443", From: breaker.Closed, To: breaker.Open, Cause: errors.New("503")})
	h.BreakerChange(breaker.Change{Scope: "api.example:443", From: breaker.Open, To: breaker.Closed})
	want := []map[string]any{
		rec("WARN", "retryfuse: breaker change", "scope", "api.example:443", "from", "closed", "to", "open", "error", "503"),
		rec("INFO", "retryfuse: breaker change", "scope", "api.example:443", "from", "open", "to", "closed"),
	}
	assertRecords(t, slogRecords(t, &buf), want)
}

func TestSlogHooksBreakerSettingsAndVersion(t *testing.T) {
	var buf bytes.Buffer
	h := sloghooks.New(slog.New(slog.NewJSONHandler(&buf, nil)))
	set := breaker.Settings{FailureThreshold: 5, Version: 4}
	h.BreakerChange(breaker.Change{Scope: "api.example:443", From: breaker.Open, To: breaker.Open, Settings: set})
	h.BreakerChange(breaker.Change{Scope: "api.example:443", From: breaker.Open, To: breaker.HalfOpen, Settings: set})
	want := []map[string]any{
		rec("INFO", "retryfuse: breaker settings", "scope", "api.example:443", "from", "open", "to", "open", "version", 4),
		rec("INFO", "retryfuse: breaker change", "scope", "api.example:443", "from", "open", "to", "half_open", "version", 4),
	}
	assertRecords(t, slogRecords(t, &buf), want)
}

func TestSlogHooksSingleFlightAndFallbackWithheld(t *testing.T) {
	var buf bytes.Buffer
	h := sloghooks.New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ci := retryfuse.CallInfo{CallID: 9, Method: "GET", URL: "http://x/y"}
	h.Policy(retryfuse.PolicyInfo{CallInfo: ci, Policy: "single_flight", Action: "followed", SharedCallID: 3})
	h.Policy(retryfuse.PolicyInfo{CallInfo: ci, Policy: "single_flight", Action: "unshared", SharedCallID: 3, Err: errors.New("too large")})
	h.Policy(retryfuse.PolicyInfo{CallInfo: ci, Policy: "fallback", Action: "withheld", Err: retryfuse.ErrAttemptsExhausted})
	base := []any{"call_id", 9, "attempt", 0, "method", "GET", "url", "http://x/y", "elapsed", 0}
	with := func(kv ...any) []any { return append(slices.Clone(base), kv...) }
	want := []map[string]any{
		rec("DEBUG", "retryfuse: single_flight followed", with("policy", "single_flight", "action", "followed", "shared_call_id", 3)...),
		rec("INFO", "retryfuse: single_flight unshared", with("policy", "single_flight", "action", "unshared", "shared_call_id", 3, "error", "too large")...),
		rec("INFO", "retryfuse: fallback withheld", with("policy", "fallback", "action", "withheld", "error", retryfuse.ErrAttemptsExhausted.Error())...),
	}
	assertRecords(t, slogRecords(t, &buf), want)
}

// ctxKey keys the test's values in a context.
type ctxKey string

// ctxHandler logs through a JSON handler, adds the context's request_id to
// each record, and is enabled at debug only for a context marked verbose.
type ctxHandler struct{ slog.Handler }

func (h ctxHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo || ctx.Value(ctxKey("verbose")) != nil
}

func (h ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	if id, ok := ctx.Value(ctxKey("request_id")).(string); ok {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

// Records are logged with the request's context: a handler sees its values
// both when asked whether it is enabled and when it handles the record.
func TestSlogHooksRequestContext(t *testing.T) {
	tr, _ := slogTransport(t, slog.LevelDebug)
	var buf bytes.Buffer
	tr.Hooks = sloghooks.New(slog.New(ctxHandler{slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})}))

	// Each request is retried once after a 503: a retry at info, the rest
	// at debug.
	send := func(ctx context.Context) {
		t.Helper()
		srv := statusSequence(t, http.StatusServiceUnavailable)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("RoundTrip: got %v, want a response", err)
		}
		resp.Body.Close()
	}
	send(context.WithValue(context.Background(), ctxKey("request_id"), "r-1"))
	recs := slogRecords(t, &buf)
	if len(recs) != 1 || recs[0][slog.MessageKey] != "retryfuse: retry" || recs[0]["request_id"] != "r-1" {
		t.Errorf("quiet request: got %v, want one retry record with request_id r-1", recs)
	}

	buf.Reset()
	ctx := context.WithValue(context.Background(), ctxKey("request_id"), "r-2")
	send(context.WithValue(ctx, ctxKey("verbose"), true))
	recs = slogRecords(t, &buf)
	if len(recs) != 6 {
		t.Errorf("verbose request: got %d records, want 6 (the debug records too)", len(recs))
	}
	for i, r := range recs {
		if r["request_id"] != "r-2" {
			t.Errorf("verbose request, record %d (%v): got request_id %v, want r-2", i, r[slog.MessageKey], r["request_id"])
		}
	}
}

// An Info built without a context is logged with context.Background().
func TestSlogHooksNilContext(t *testing.T) {
	var buf bytes.Buffer
	h := sloghooks.New(slog.New(ctxHandler{slog.NewJSONHandler(&buf, nil)}))
	h.GiveUp(retryfuse.GiveUpInfo{CallInfo: retryfuse.CallInfo{CallID: 1, Method: "GET"}, Reason: finalReason(t)})
	if recs := slogRecords(t, &buf); len(recs) != 1 || recs[0]["reason"] != "final" {
		t.Errorf("got %v, want one give-up record with reason final", recs)
	}
}

// A nil logger is slog.Default(); every field of Hooks is set, a hook
// added to the struct but not to New fails here.
func TestSlogHooksNilLogger(t *testing.T) {
	h := sloghooks.New(nil)
	if h.AttemptStart == nil || h.BreakerChange == nil || h.EvidenceUnavailable == nil {
		t.Fatal("sloghooks.New(nil): got nil hooks, want every hook set")
	}
	v := reflect.ValueOf(h)
	for i := range v.NumField() {
		if v.Field(i).IsNil() {
			t.Errorf("sloghooks.New(nil) leaves %s nil", v.Type().Field(i).Name)
		}
	}
}

func BenchmarkSlogHooksDisabled(b *testing.B) {
	h := sloghooks.New(slog.New(slog.NewJSONHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelError})))
	info := retryfuse.AttemptDoneInfo{CallInfo: retryfuse.CallInfo{CallID: 1, Attempt: 1, Method: "GET", URL: "http://x/"}, StatusCode: 200, Outcome: decide.OutcomeSuccess}
	b.ReportAllocs()
	for b.Loop() {
		h.AttemptDone(info)
	}
}

// A refusal of one call is the policy working: logged at Debug, the give
// up and the policy event alike, never at Warn or Info.
func TestSlogHooksLogRefusalsAtDebug(t *testing.T) {
	var buf bytes.Buffer
	h := sloghooks.New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ci := retryfuse.CallInfo{CallID: 3, Method: "GET", URL: "http://x/"}
	throttled := &throttle.Error{Scope: "http://x:80", Share: 0.5}
	h.GiveUp(retryfuse.GiveUpInfo{CallInfo: ci, Reason: retryfuse.ErrCircuitOpen})
	h.GiveUp(retryfuse.GiveUpInfo{CallInfo: ci, Reason: throttled})
	h.Policy(retryfuse.PolicyInfo{CallInfo: ci, Scope: "http://x:80", Policy: "throttle", Action: "rejected", Err: throttled})
	recs := slogRecords(t, &buf)
	if len(recs) != 3 {
		t.Fatalf("got %d records, want 3: %v", len(recs), recs)
	}
	for i, r := range recs {
		if r[slog.LevelKey] != "DEBUG" {
			t.Errorf("record %d: level %v, want DEBUG: %v", i, r[slog.LevelKey], r)
		}
	}
}

// A hook or Classifier that panicked is reported once per Transport
// (policy "hook", action "panicked"): a bug in the caller's code, logged
// at Warn where the default handler shows it, not at Debug among one
// call's refusals.
func TestSlogHooksLogAPanickingHookAtWarn(t *testing.T) {
	var buf bytes.Buffer
	h := sloghooks.New(slog.New(slog.NewJSONHandler(&buf, nil))) // info
	ci := retryfuse.CallInfo{CallID: 4, Attempt: 1, Method: "GET", URL: "http://x/"}
	h.Policy(retryfuse.PolicyInfo{CallInfo: ci, Scope: "http://x:80", Policy: "hook", Action: "panicked",
		Err: errors.New("retryfuse: Hooks.AttemptDone panicked: boom")})
	want := []map[string]any{
		rec("WARN", "retryfuse: hook panicked", "call_id", 4, "attempt", 1, "method", "GET", "url", "http://x/", "elapsed", 0,
			"scope", "http://x:80", "policy", "hook", "action", "panicked", "error", "retryfuse: Hooks.AttemptDone panicked: boom"),
	}
	assertRecords(t, slogRecords(t, &buf), want)
}
