package retryfuse

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/decide"
)

// secretURL puts credentials where callers put them: user information
// and token query parameters.
func secretURL(base string) string {
	u, _ := url.Parse(base)
	u.User = url.UserPassword("alice", "secret")
	u.Path = "/payments"
	u.RawQuery = "token=secret&access_token=secret2&page=2"
	return u.String()
}

// renderedEvents records every hook event, rendered with %+v (errors through
// their Error method), and is safe for concurrent use.
type renderedEvents struct {
	mu   sync.Mutex
	text []string
}

func addRendered[T any](e *renderedEvents) func(T) {
	return func(v T) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.text = append(e.text, fmt.Sprintf("%T %+v", v, v))
	}
}

func (e *renderedEvents) hooks() Hooks {
	return Hooks{
		AttemptStart: addRendered[AttemptStartInfo](e), AttemptDone: addRendered[AttemptDoneInfo](e),
		Decision: addRendered[DecisionInfo](e), Retry: addRendered[RetryInfo](e), Reconcile: addRendered[ReconcileInfo](e),
		GiveUp: addRendered[GiveUpInfo](e), HiddenResend: addRendered[AttemptDoneInfo](e),
		BreakerChange: addRendered[breaker.Change](e), EvidenceUnavailable: addRendered[EvidenceUnavailableInfo](e),
	}
}

// noCredential fails the test if s shows a credential of secretURL.
func noCredential(t *testing.T, where, s string) {
	t.Helper()
	for _, c := range []string{"secret", "alice"} {
		if strings.Contains(s, c) {
			t.Errorf("%s shows %q: %s", where, c, s)
		}
	}
}

// No credential of the request URL — user, password, a token in the
// query — reaches an error the transport returns, a hook, or the slog
// hooks' log, on the paths that report a URL: a reconcile error, a retry
// error after refused connections, retries of a 503.
func TestCredentialsNeverReported(t *testing.T) {
	tests := []struct {
		name    string
		handler func(int, http.ResponseWriter, *http.Request) // nil: a refused connection
		tr      *Transport
		key     string
		wantErr error
	}{
		{"reconcile", stallUntilGone, &Transport{Retry: RetryPolicy{AttemptTimeout: shortTimeout}}, "pay-s1", ErrReconcileRequired},
		{"refused", nil, &Transport{}, "pay-s2", ErrAttemptsExhausted},
		{"retried 503", failThenOK(9), &Transport{}, "pay-s3", nil},
		{"not repeatable", failThenOK(9), &Transport{}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := refusedURL(t)
			if tt.handler != nil {
				target = newTestServer(t, tt.handler).URL
			}
			var events renderedEvents
			var logged bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
			tt.tr.Hooks = JoinHooks(events.hooks(), SloghooksNew(logger))
			tr := newTransport(t, newFakeClock(), tt.tr)
			req := newRequest(t, testCtx(t), http.MethodPost, secretURL(target), `{"amount":10}`)
			if tt.key != "" {
				req.Header.Set(headerIdempotencyKey, tt.key)
			}

			resp, err := tr.RoundTrip(req)
			if resp != nil {
				_ = resp.Body.Close()
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("RoundTrip: got %v, want an error matching %v", err, tt.wantErr)
			}
			if err != nil {
				noCredential(t, "the error", err.Error())
				var rec *ReconcileRequiredError
				if errors.As(err, &rec) {
					u := strings.TrimPrefix(target, "http://")
					if want := "http://" + u + "/payments?access_token=REDACTED&page=2&token=REDACTED"; rec.URL != want {
						t.Errorf("ReconcileRequiredError.URL: got %q, want %q", rec.URL, want)
					}
				}
			}
			events.mu.Lock()
			defer events.mu.Unlock()
			if len(events.text) == 0 {
				t.Fatal("no hook events recorded")
			}
			for _, e := range events.text {
				noCredential(t, "a hook event", e)
			}
			noCredential(t, "the slog hooks' log", logged.String())
		})
	}
}

// What http.Client adds: it wraps every error in a *url.Error whose URL is
// the request's with the password replaced by "***" (net/http's
// stripPassword) — the user name and the query are kept. The transport's
// own error inside carries the redacted URL. SECURITY.md documents this.
func TestCredentialsInHTTPClientURLError(t *testing.T) {
	srv := stallingServer(t, 1)
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{AttemptTimeout: shortTimeout}})
	req := newRequest(t, testCtx(t), http.MethodPost, secretURL(srv.URL), `{"amount":10}`)
	req.Header.Set(headerIdempotencyKey, "pay-s5")
	_, _, err := do(tr, req)

	var uerr *url.Error
	if !errors.As(err, &uerr) {
		t.Fatalf("Do: got %v (%T), want a *url.Error", err, err)
	}
	if strings.Contains(uerr.URL, ":secret@") || strings.Contains(uerr.Error(), ":secret@") {
		t.Errorf("url.Error shows the password: %s", uerr.Error())
	}
	if !strings.Contains(uerr.URL, "alice:***@") || !strings.Contains(uerr.URL, "token=secret") {
		t.Errorf("url.Error.URL: got %q; net/http used to keep the user name and the query there — update SECURITY.md if it no longer does", uerr.URL)
	}
	var rec *ReconcileRequiredError
	if !errors.As(err, &rec) {
		t.Fatalf("Do: got %v, want a *ReconcileRequiredError inside", err)
	}
	noCredential(t, "the reconcile error inside", rec.Error())
}

// A header value that would inject a header line is refused by net/http
// before it dials, and that refusal is final: nothing reaches the server,
// and the transport does not try again.
func TestHeaderInjectionRefusedBeforeSending(t *testing.T) {
	srv := statusServer(t, http.StatusOK, "ok")
	var log hookLog
	tr := newTransport(t, newFakeClock(), &Transport{Hooks: log.hooks()})
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req := newRequest(t, testCtx(t), method, srv.URL, "body")
		req.Header.Set("Idempotency-Key", "k-1")
		req.Header["X-Note"] = []string{"a\r\nX-Injected: 1"}
		_, _, err := do(tr, req)
		if err == nil {
			t.Fatalf("%s: got a nil error, want the request refused", method)
		}
		if errors.Is(err, ErrReconcileRequired) {
			t.Errorf("%s: got %v, want no reconcile error (nothing was written)", method, err)
		}
	}
	if got := srv.count(); got != 0 {
		t.Errorf("requests seen by the server: got %d, want 0", got)
	}
	if got := len(log.starts); got != 2 {
		t.Errorf("attempts: got %d, want 2 (one per call, none repeated)", got)
	}
	for _, d := range log.dones {
		if d.Phase != decide.PhasePreWrite || d.Retryable {
			t.Errorf("call %d: got phase %v, retryable %v; want pre_write, not retryable", d.CallID, d.Phase, d.Retryable)
		}
	}
}
