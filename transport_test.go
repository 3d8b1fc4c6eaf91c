package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
	"github.com/retryfuse/retryfuse/decide"
)

// requestSnapshot is what a caller may rely on being unchanged after
// RoundTrip.
type requestSnapshot struct {
	method, url, host string
	header            http.Header
	ctx               context.Context
	body              any
	contentLength     int64
	hasGetBody        bool
}

func snapshot(r *http.Request) requestSnapshot {
	return requestSnapshot{
		method: r.Method, url: r.URL.String(), host: r.Host, header: r.Header.Clone(),
		ctx: r.Context(), body: r.Body, contentLength: r.ContentLength, hasGetBody: r.GetBody != nil,
	}
}

func (s requestSnapshot) diff(r *http.Request) string {
	switch {
	case r.Method != s.method:
		return "Method " + r.Method + ", want " + s.method
	case r.URL.String() != s.url:
		return "URL " + r.URL.String() + ", want " + s.url
	case r.Host != s.host:
		return "Host " + r.Host + ", want " + s.host
	case !equalHeaders(r.Header, s.header):
		return "Header changed"
	case r.Context() != s.ctx:
		return "Context replaced"
	case any(r.Body) != s.body:
		return "Body replaced"
	case r.ContentLength != s.contentLength:
		return "ContentLength changed"
	case (r.GetBody != nil) != s.hasGetBody:
		return "GetBody changed"
	}
	return ""
}

// The caller's request is never modified, and every body the transport
// was given or obtained is closed, whatever the path. RoundTrip is called
// directly: http.Client closes bodies too and would hide a leak.
func TestCallerRequestUnmodifiedAndBodyClosed(t *testing.T) {
	tests := []struct {
		name    string
		handler func(int, http.ResponseWriter, *http.Request)
		tr      *Transport
		key     string
		refused bool
		wantErr error
		wantN   int // requests the server sees
	}{
		{name: "success", handler: failThenOK(0), key: "k1", wantN: 1},
		{name: "success with generated key", handler: failThenOK(0), tr: &Transport{Keys: KeyPolicy{Generate: true}}, wantN: 1},
		{name: "retry", handler: failThenOK(2), key: "k1", wantN: 3},
		{name: "retry with attempt timeout", handler: failThenOK(2), key: "k1", tr: &Transport{Retry: RetryPolicy{AttemptTimeout: time.Minute}}, wantN: 3},
		{name: "invalid key", handler: failThenOK(0), key: "k\r\n1", wantErr: ErrInvalidIdempotencyKey},
		{name: "invalid policy", handler: failThenOK(0), key: "k1", tr: &Transport{Retry: RetryPolicy{MaxAttempts: -1}}, wantErr: ErrInvalidPolicy},
		{name: "not repeatable", handler: failThenOK(1), wantN: 1},
		{name: "uncertain write", handler: stallUntilGone, key: "k1", tr: &Transport{Retry: RetryPolicy{AttemptTimeout: shortTimeout}}, wantErr: ErrReconcileRequired, wantN: 1},
		{name: "refused connection", key: "k1", refused: true, wantErr: ErrAttemptsExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var srv *testServer
			url := refusedURL(t)
			if !tt.refused {
				srv = newTestServer(t, tt.handler)
				url = srv.URL + "/orders?token=secret"
			}
			tr := tt.tr
			if tr == nil {
				tr = &Transport{}
			}
			newTransport(t, newFakeClock(), tr)
			req := newRequest(t, testCtx(t), http.MethodPost, url, "")
			bs := &bodies{content: `{"amount":10}`}
			bs.attach(req, true)
			req.Header.Set("Accept", "application/json")
			if tt.key != "" {
				req.Header.Set(headerIdempotencyKey, tt.key)
			}
			before := snapshot(req)

			resp, err := tr.RoundTrip(req)
			if resp != nil {
				_ = resp.Body.Close()
			}
			if tt.wantErr == nil && err != nil {
				t.Errorf("RoundTrip: got error %v, want nil", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("RoundTrip: got error %v, want one matching %v", err, tt.wantErr)
			}
			if d := before.diff(req); d != "" {
				t.Errorf("caller's request modified: %s", d)
			}
			if srv != nil {
				if got := srv.count(); got != tt.wantN {
					t.Errorf("requests seen by the server: got %d, want %d", got, tt.wantN)
				}
			}
			if n, total := bs.unclosed(); n != 0 {
				t.Errorf("request bodies: %d of %d left unclosed, want none", n, total)
			}
		})
	}
}

func TestNilRequestIsAnError(t *testing.T) {
	resp, err := (&Transport{}).RoundTrip(nil)
	if resp != nil || err == nil {
		t.Fatalf("RoundTrip(nil): got %v, %v; want no response and an error", resp, err)
	}
}

func TestRetryableStatusRetriedForGET(t *testing.T) {
	for _, status := range []int{408, 425, 429, 500, 502, 503, 504} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			mock := httpmock.NewMockTransport()
			mock.RegisterResponder(http.MethodGet, mockURL, sequenceResponder(status, 200))
			clk := newFakeClock()
			tr := newTransport(t, clk, &Transport{Base: mock})

			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, mockURL, ""))
			if err != nil {
				t.Fatalf("Do: got error %v, want nil", err)
			}
			if resp.StatusCode != 200 || string(body) != "answer 2: 200" {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "answer 2: 200")
			}
			if got := mock.GetTotalCallCount(); got != 2 {
				t.Errorf("attempts sent: got %d, want 2", got)
			}
			if got := clk.Sleeps(); len(got) != 1 {
				t.Errorf("waits: got %v, want one", got)
			}
		})
	}
}

func TestTerminalStatusNotRetried(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 409, 422, 501, 505} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			mock := httpmock.NewMockTransport()
			mock.RegisterResponder(http.MethodGet, mockURL, sequenceResponder(status, 200))
			clk := newFakeClock()
			var log hookLog
			tr := newTransport(t, clk, &Transport{Base: mock, Hooks: log.hooks()})

			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, mockURL, ""))
			if err != nil {
				t.Fatalf("Do: got error %v, want nil", err)
			}
			if resp.StatusCode != status {
				t.Errorf("status: got %d, want %d", resp.StatusCode, status)
			}
			if got := mock.GetTotalCallCount(); got != 1 {
				t.Errorf("attempts sent: got %d, want 1", got)
			}
			if got := clk.Sleeps(); len(got) != 0 {
				t.Errorf("waits: got %v, want none", got)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.dones) != 1 || log.dones[0].Retryable || log.dones[0].Outcome != decide.OutcomeSuccess || log.dones[0].StatusCode != status {
				t.Errorf("AttemptDone events: got %+v, want one, status %d, not retryable, outcome success", log.dones, status)
			}
		})
	}
}

// A final retryable response goes back as a response, on a real
// connection, with its body readable after RoundTrip returned, with and
// without an attempt timeout.
func TestFinal503ReturnedAsResponse(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("AttemptTimeout=", timeout), func(t *testing.T) {
			srv := newTestServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "unavailable %d", n)
			})
			clk := newFakeClock()
			var log hookLog
			tr := newTransport(t, clk, &Transport{Retry: RetryPolicy{MaxAttempts: 3, AttemptTimeout: timeout}, Hooks: log.hooks()})

			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			if err != nil {
				t.Fatalf("Do: got error %v, want nil and the 503", err)
			}
			if resp.StatusCode != 503 || string(body) != "unavailable 3" {
				t.Errorf("got %d %q, want 503 %q", resp.StatusCode, body, "unavailable 3")
			}
			if got := srv.count(); got != 3 {
				t.Errorf("requests seen by the server: got %d, want 3", got)
			}
			if got := len(clk.Sleeps()); got != 2 {
				t.Errorf("waits: got %d, want 2", got)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.giveUps) != 1 || !errors.Is(log.giveUps[0].Reason, ErrAttemptsExhausted) || log.giveUps[0].StatusCode != 503 {
				t.Errorf("GiveUp events: got %+v, want one with ErrAttemptsExhausted and status 503", log.giveUps)
			}
		})
	}
}

// AttemptTimeout bounds an attempt until its headers arrive, not the
// reading of the body.
func TestAttemptTimeoutSparesTheBody(t *testing.T) {
	const timeout = 50 * time.Millisecond
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		time.Sleep(3 * timeout) // a bounded wait on a real socket
		fmt.Fprint(w, "late body")
	})
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{AttemptTimeout: timeout}})
	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil {
		t.Fatalf("Do: got error %v, want nil", err)
	}
	if resp.StatusCode != 200 || string(body) != "late body" {
		t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "late body")
	}
	if got := srv.count(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
}

func retryEverything(*http.Response, error) Class { return ClassRetryable }

func TestClassifierMakes404RetryableForGET(t *testing.T) {
	srv := statusServer(t, 404, "not yet")
	clk := newFakeClock()
	tr := newTransport(t, clk, &Transport{
		Retry: RetryPolicy{
			MaxAttempts: 3,
			Classifier: func(resp *http.Response, err error) Class {
				if resp != nil && resp.StatusCode == 404 {
					return ClassRetryable
				}
				return ClassDefault
			},
		},
	})
	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != 404 || string(body) != "not yet" {
		t.Fatalf("Do: got %v, %q, %v; want the final 404", resp, body, err)
	}
	if got := srv.count(); got != 3 {
		t.Errorf("requests seen by the server: got %d, want 3", got)
	}
}

func TestClassifierCanMake503Final(t *testing.T) {
	srv := statusServer(t, 503, "down")
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{Classifier: func(*http.Response, error) Class { return ClassFinal }}})
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("Do: got %v, %v; want the 503", resp, err)
	}
	if got := srv.count(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
}

func TestClassifierCannotMakePOSTWithoutKeyRepeatable(t *testing.T) {
	for _, status := range []int{404, 503} {
		srv := statusServer(t, status, "no")
		tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 3, Classifier: retryEverything}})
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, srv.URL, "payload"))
		if err != nil || resp.StatusCode != status {
			t.Fatalf("Do: got %v, %v; want the %d", resp, err, status)
		}
		if got := srv.count(); got != 1 {
			t.Errorf("status %d: requests seen by the server: got %d, want 1", status, got)
		}
	}
	url := refusedURL(t)
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 3, Classifier: retryEverything}})
	_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, url, "payload"))
	var re *RetryError
	if !errors.Is(err, ErrNotRepeatable) || !errors.As(err, &re) || re.Attempts != 1 {
		t.Errorf("refused POST: got %v, want ErrNotRepeatable after 1 attempt", err)
	}
}

func TestClassifierCannotReplayAnUncertainPOST(t *testing.T) {
	srv := stallingServer(t, 1)
	clk := newFakeClock()
	tr := newTransport(t, clk, &Transport{Retry: RetryPolicy{AttemptTimeout: shortTimeout, MaxAttempts: 3, Classifier: retryEverything}})
	req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "payload")
	req.Header.Set(headerIdempotencyKey, "pay-9")
	_, _, err := do(tr, req)
	wantReconcile(t, err, http.MethodPost, srv.URL, "pay-9")
	if got := srv.Requests(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
	if got := clk.Sleeps(); len(got) != 0 {
		t.Errorf("waits: got %v, want none", got)
	}
}

// A zero Transport creates its base once, not per call, so that calls
// share its connection pool; CloseIdleConnections reaches that base.
func TestZeroTransportKeepsOneBaseAndForwardsCloseIdleConnections(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	tr := &Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	get := func() {
		t.Helper()
		resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Fatalf("GET: got %v, %q, %v; want 200 \"ok\"", resp, body, err)
		}
	}
	for range 3 {
		get()
	}
	if got := srv.conns.Load(); got != 1 {
		t.Errorf("connections after three calls: got %d, want 1 (one pooled base per Transport)", got)
	}
	tr.CloseIdleConnections()
	get()
	if got := srv.conns.Load(); got != 2 {
		t.Errorf("connections after CloseIdleConnections and one more call: got %d, want 2 (the idle one was closed)", got)
	}
}
