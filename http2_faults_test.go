package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// The fault tests of transport_faults_test.go, over HTTP/2 as over
// HTTP/1.1. A handler that panics with http.ErrAbortHandler after reading
// the body has applied the effect and answers nothing: over HTTP/1.1 the
// server closes the connection, over HTTP/2 it resets the stream
// (RST_STREAM INTERNAL_ERROR) and keeps the connection.

// h2AbortFirst returns a handler that applies the first request and
// crashes before answering it (retryfusetest's ApplyThenReset inside a
// server: it panics with http.ErrAbortHandler), and answers every later
// one with 200 "fine".
func h2AbortFirst() func(int, http.ResponseWriter, *http.Request) {
	return serveWith(retryfusetest.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "fine")
	}), retryfusetest.ApplyThenReset()))
}

// serveWith adapts h to the handlers of the test servers.
func serveWith(h http.Handler) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }
}

// h2CodeInternal is HTTP/2's INTERNAL_ERROR (RFC 9113, section 7).
const h2CodeInternal = 0x2

// h2WantResetCause fails the test unless cause is the abort as p reports
// it: an HTTP/2 stream reset, or an HTTP/1.1 connection closed or reset.
func h2WantResetCause(t *testing.T, p httpProto, cause error) {
	t.Helper()
	if p.h2 {
		// A retryfusetest.StreamError has the shape of net/http's
		// unexported HTTP/2 stream error, whose As method fills any
		// struct of that shape, as the classifier (internal/evidence)
		// recognises a stream reset.
		var se retryfusetest.StreamError
		if !errors.As(cause, &se) || se.Code != h2CodeInternal {
			t.Errorf("cause: got %v, want an HTTP/2 stream reset with INTERNAL_ERROR", cause)
		}
		return
	}
	if !transientError(cause) {
		t.Errorf("cause: got %v, want a transient connection error (EOF or reset)", cause)
	}
}

func TestHTTP2KeyedPOSTAbortedAfterEffectRequiresReconcile(t *testing.T) {
	for _, p := range httpProtos {
		t.Run(p.name, func(t *testing.T) {
			srv, base := startTLSServer(t, p, h2AbortFirst())
			clk := newFakeClock()
			var log hookLog
			tr := newTransport(t, clk, &Transport{Base: base, Hooks: log.hooks()})
			req := newRequest(t, testCtx(t), http.MethodPost, srv.URL+"/payments", `{"amount":10}`)
			req.Header.Set(headerIdempotencyKey, "pay-h2-5")
			resp, _, err := do(tr, req)
			if resp != nil {
				t.Errorf("Do: got a response %d, want none", resp.StatusCode)
			}
			rec := wantReconcile(t, err, http.MethodPost, srv.URL+"/payments", "pay-h2-5")
			h2WantResetCause(t, p, rec.Cause)
			checkProto(t, p, srv, nil)
			reqs, _ := srv.requests()
			if len(reqs) != 1 || reqs[0].Body != `{"amount":10}` {
				t.Errorf("requests seen by the server: got %+v, want the POST once", reqs)
			}
			if got := clk.Sleeps(); len(got) != 0 {
				t.Errorf("waits: got %v, want none", got)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.dones) != 1 || log.dones[0].Phase != decide.PhasePostWrite || log.dones[0].Outcome != decide.OutcomeUnknown {
				t.Errorf("AttemptDone: got %+v, want one post_write attempt of unknown outcome", log.dones)
			}
			if len(log.hidden) != 0 {
				t.Errorf("HiddenResend: got %+v, want none", log.hidden)
			}
		})
	}
}

func TestHTTP2GETAbortedIsRetried(t *testing.T) {
	for _, p := range httpProtos {
		t.Run(p.name, func(t *testing.T) {
			srv, base := startTLSServer(t, p, h2AbortFirst())
			clk := newFakeClock()
			var log hookLog
			tr := newTransport(t, clk, &Transport{Base: base, Hooks: log.hooks()})
			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/items", ""))
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != "fine" {
				t.Fatalf("Do: got %v, %q, %v; want 200 fine", resp, body, err)
			}
			checkProto(t, p, srv, resp)
			if reqs, _ := srv.requests(); len(reqs) != 2 {
				t.Errorf("requests seen by the server: got %d, want 2", len(reqs))
			}
			if got := len(clk.Sleeps()); got != 1 {
				t.Errorf("waits: got %d, want 1", got)
			}
			if p.h2 {
				if got := srv.conns.Load(); got != 1 {
					t.Errorf("connections: got %d, want 1 (a stream reset keeps the connection)", got)
				}
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.dones) != 2 || log.dones[0].Phase != decide.PhasePostWrite || !log.dones[0].Retryable {
				t.Fatalf("AttemptDone: got %+v, want a retryable post_write failure, then the response", log.dones)
			}
			h2WantResetCause(t, p, log.dones[0].Err)
		})
	}
}

func TestHTTP2PUTAfterPostWriteTimeoutIsRetried(t *testing.T) {
	for _, p := range httpProtos {
		t.Run(p.name, func(t *testing.T) {
			srv, base := startTLSServer(t, p, serveWith(retryfusetest.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "stored")
			}), retryfusetest.StallBeforeApply())))
			clk := newFakeClock()
			var log hookLog
			tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{AttemptTimeout: shortTimeout}, Hooks: log.hooks()})
			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodPut, srv.URL+"/doc/1", "v2"))
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != "stored" {
				t.Fatalf("Do: got %v, %q, %v; want 200 stored", resp, body, err)
			}
			checkProto(t, p, srv, resp)
			reqs, _ := srv.requests()
			if len(reqs) != 2 || reqs[0].Body != "v2" || reqs[1].Body != "v2" {
				t.Errorf("requests seen by the server: got %+v, want 2 with body v2", reqs)
			}
			if got := len(clk.Sleeps()); got != 1 {
				t.Errorf("waits: got %d, want 1", got)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.dones) != 2 || log.dones[0].Outcome != decide.OutcomeTimeout || log.dones[0].Phase != decide.PhasePostWrite ||
				!errors.Is(log.dones[0].Err, ErrAttemptTimeout) {
				t.Errorf("AttemptDone: got %+v, want the first an attempt timeout in post_write", log.dones)
			}
		})
	}
}
