package idempotency

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
)

// TestDraftCases runs each case of draft-ietf-httpapi-idempotency-key-header-07
// (and the cases this package adds to it), named by the draft's section:
// the requests before (run to the end), the request, and what it must get.
func TestDraftCases(t *testing.T) {
	const key = `"8e03978e-40d5-43e8-bc93-6894a57f9324"`
	tests := []struct {
		name   string
		before []*http.Request
		ledger ledger.Ledger
		req    *http.Request
		// want
		status     int
		problem    string // "" for the handler's response
		retryAfter bool
		replayed   bool
		runs       int64 // of the handler, over before and req
	}{
		{
			name:   "2.6 first time request: processed normally",
			req:    post("/charges", key, `{"amount":100}`),
			status: http.StatusCreated, runs: 1,
		},
		{
			name:   "2.6 duplicate request after completion: the earlier result",
			before: []*http.Request{post("/charges", key, `{"amount":100}`)},
			req:    post("/charges", key, `{"amount":100}`),
			status: http.StatusCreated, replayed: true, runs: 1,
		},
		{
			name:   "2.1 the sf-string and the bare form name one key",
			before: []*http.Request{post("/charges", key, `{"amount":100}`)},
			req:    post("/charges", strings.Trim(key, `"`), `{"amount":100}`),
			status: http.StatusCreated, replayed: true, runs: 1,
		},
		{
			name:   "2.7 key missing: 400",
			req:    post("/charges", "", `{"amount":100}`),
			status: http.StatusBadRequest, problem: ProblemKeyMissing,
		},
		{
			name:   "2.1 key not a String (unterminated): 400",
			req:    post("/charges", `"8e03978e`, `{"amount":100}`),
			status: http.StatusBadRequest, problem: ProblemKeyMalformed,
		},
		{
			name:   "2.1 key with parameters: 400",
			req:    post("/charges", key+";v=1", `{"amount":100}`),
			status: http.StatusBadRequest, problem: ProblemKeyMalformed,
		},
		{
			name:   "5 key of 10 KiB: 400",
			req:    post("/charges", strings.Repeat("k", 10<<10), `{"amount":100}`),
			status: http.StatusBadRequest, problem: ProblemKeyMalformed,
		},
		{
			name:   "5 key with a control character: 400",
			req:    post("/charges", "abc\x01def", `{"amount":100}`),
			status: http.StatusBadRequest, problem: ProblemKeyMalformed,
		},
		{
			name:   "2.2, 2.7 key reused with another payload: 422",
			before: []*http.Request{post("/charges", key, `{"amount":100}`)},
			req:    post("/charges", key, `{"amount":999}`),
			status: http.StatusUnprocessableEntity, problem: ProblemKeyReused, runs: 1,
		},
		{
			name:   "2.2, 2.7 key reused on another route: 422",
			before: []*http.Request{post("/charges", key, `{"amount":100}`)},
			req:    post("/refunds", key, `{"amount":100}`),
			status: http.StatusUnprocessableEntity, problem: ProblemKeyReused, runs: 1,
		},
		{
			name:   "2.2, 2.7 key reused with another method: 422",
			before: []*http.Request{post("/charges", key, `{"amount":100}`)},
			req: func() *http.Request {
				r := post("/charges", key, `{"amount":100}`)
				r.Method = http.MethodPatch
				return r
			}(),
			status: http.StatusUnprocessableEntity, problem: ProblemKeyReused, runs: 1,
		},
		{
			name:   "2.4 body longer than the fingerprint bound: 413, not run",
			req:    post("/charges", key, strings.Repeat("x", defaultMaxBodyBytes+1)),
			status: http.StatusRequestEntityTooLarge, problem: ProblemBodyTooLarge,
		},
		{
			name:   "2.7 other errors: a ledger that is down: 503, not run",
			ledger: stubLedger{errLedgerDown},
			req:    post("/charges", key, `{"amount":100}`),
			status: http.StatusServiceUnavailable, problem: ProblemLedgerUnavailable, retryAfter: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &counter{}
			h, _ := newHandler(t, c, Config{Ledger: tt.ledger})
			for _, r := range tt.before {
				serve(h, r)
			}
			w := serve(h, tt.req)
			if tt.problem != "" {
				problemOf(t, w, tt.problem, tt.status)
			} else if w.Code != tt.status {
				t.Errorf("status %d, want %d (body %s)", w.Code, tt.status, w.Body)
			}
			if got := w.Header().Get("Retry-After") != ""; got != tt.retryAfter {
				t.Errorf("Retry-After %q, want one: %v", w.Header().Get("Retry-After"), tt.retryAfter)
			}
			if got := w.Header().Get(HeaderReplayed) == "true"; got != tt.replayed {
				t.Errorf("%s %q, want replayed: %v", HeaderReplayed, w.Header().Get(HeaderReplayed), tt.replayed)
			}
			if got := w.Header().Get(HeaderHonoured); got != "?1" {
				t.Errorf("%s %q, want ?1", HeaderHonoured, got)
			}
			if got := c.runs.Load(); got != tt.runs {
				t.Errorf("the handler ran %d times, want %d", got, tt.runs)
			}
		})
	}
}

// TestDraftConcurrentRequest is Section 2.7's 409: a repeat while the
// first request runs, with Retry-After.
func TestDraftConcurrentRequest(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	runs := 0
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		close(entered)
		<-release
		w.WriteHeader(http.StatusCreated)
	}), Config{RetryAfter: 2500 * time.Millisecond})
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve(h, post("/charges", "k", "body")) }()
	<-entered
	w := serve(h, post("/charges", "k", "body"))
	problemOf(t, w, ProblemInFlight, http.StatusConflict)
	if got := w.Header().Get("Retry-After"); got != "3" {
		t.Errorf("Retry-After %q, want 3 (2.5s rounded up)", got)
	}
	close(release)
	if first := <-done; first.Code != http.StatusCreated {
		t.Errorf("first request: status %d, want 201", first.Code)
	}
	if w := serve(h, post("/charges", "k", "body")); w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("after the first completed: status %d, replayed %q; want 201, true", w.Code, w.Header().Get(HeaderReplayed))
	}
	if runs != 1 {
		t.Errorf("the handler ran %d times, want 1", runs)
	}
}

// The draft's 2.7 problem examples carry Content-Language; every refusal
// here does.
func TestProblemsCarryTheirLanguage(t *testing.T) {
	h, _ := newHandler(t, &counter{}, Config{})
	w := serve(h, post("/charges", "", "x"))
	if got := w.Header().Get("Content-Language"); got != "en" {
		t.Errorf("Content-Language %q, want en", got)
	}
}
