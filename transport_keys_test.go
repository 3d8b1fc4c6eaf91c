package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestPOSTWithoutKeyNotRetried(t *testing.T) {
	srv := newTestServer(t, failThenOK(1))
	clk := newFakeClock()
	var log hookLog
	tr := newTransport(t, clk, &Transport{Hooks: log.hooks()})

	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, srv.URL, `{"amount":10}`))
	if err != nil {
		t.Fatalf("Do: got error %v, want nil and the 503", err)
	}
	if resp.StatusCode != 503 || string(body) != "try later" {
		t.Errorf("got %d %q, want 503 %q", resp.StatusCode, body, "try later")
	}
	if got := srv.count(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
	if got := clk.Sleeps(); len(got) != 0 {
		t.Errorf("waits: got %v, want none", got)
	}
	if got := log.giveUpReasons(); len(got) != 1 || !errors.Is(got[0], ErrNotRepeatable) {
		t.Errorf("GiveUp reasons: got %v, want [ErrNotRepeatable]", got)
	}
}

func TestKeyedPOSTRetriedWithSameBodyAndKey(t *testing.T) {
	for _, name := range []string{headerIdempotencyKey, headerXIdempotencyKey} {
		t.Run(name, func(t *testing.T) {
			srv := newTestServer(t, failThenOK(2))
			clk := newFakeClock()
			tr := newTransport(t, clk, &Transport{Retry: RetryPolicy{MaxAttempts: 3}})

			const payload, key = `{"amount":10}`, "order-42"
			req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, payload)
			req.Header.Set(name, key)
			resp, body, err := do(tr, req)
			if err != nil {
				t.Fatalf("Do: got error %v, want nil", err)
			}
			if resp.StatusCode != 200 || string(body) != "done" {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "done")
			}
			reqs := srv.requests()
			if len(reqs) != 3 {
				t.Fatalf("requests seen by the server: got %d, want 3", len(reqs))
			}
			for i, r := range reqs {
				// The transport sends the key under a lower-case map key;
				// the server must still find it by its name.
				if got := r.Header.Get(name); got != key {
					t.Errorf("request %d: server's Header.Get(%q) = %q, want %q", i+1, name, got, key)
				}
				if got := r.Body; got != payload {
					t.Errorf("request %d: body %q, want %q", i+1, got, payload)
				}
			}
			if got := req.Header.Get(name); got != key {
				t.Errorf("caller's header %s after the call: got %q, want %q", name, got, key)
			}
			if got := len(clk.Sleeps()); got != 2 {
				t.Errorf("waits: got %d, want 2", got)
			}
		})
	}
}

func TestKeyedPOSTWithoutGetBodyNotRetried(t *testing.T) {
	srv := newTestServer(t, failThenOK(1))
	clk := newFakeClock()
	var log hookLog
	tr := newTransport(t, clk, &Transport{Hooks: log.hooks()})

	req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "")
	req.Body = io.NopCloser(strings.NewReader("payload")) // read once, cannot be rewound
	req.ContentLength = int64(len("payload"))
	req.Header.Set(headerIdempotencyKey, "order-43")
	resp, _, err := do(tr, req)
	if err != nil {
		t.Fatalf("Do: got error %v, want nil and the 503", err)
	}
	if resp.StatusCode != 503 {
		t.Errorf("status: got %d, want 503", resp.StatusCode)
	}
	if got := srv.count(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
	if got := log.giveUpReasons(); len(got) != 1 || !errors.Is(got[0], ErrNotRepeatable) {
		t.Errorf("GiveUp reasons: got %v, want [ErrNotRepeatable]", got)
	}
}

func TestInvalidIdempotencyKeyRefusedBeforeSending(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
	}{
		{"CRLF", http.Header{"Idempotency-Key": {"k\r\nX-Injected: 1"}}},
		{"LF", http.Header{"Idempotency-Key": {"k\nX"}}},
		{"longer than 255 bytes", http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}},
		{"non-ASCII", http.Header{"Idempotency-Key": {"commande-n°42"}}},
		{"two differing headers", http.Header{"Idempotency-Key": {"k1"}, "X-Idempotency-Key": {"k2"}}},
		{"two values", http.Header{"Idempotency-Key": {"k1", "k2"}}},
	}
	for _, method := range []string{http.MethodPost, http.MethodPut} {
		for _, tt := range tests {
			t.Run(method+" "+tt.name, func(t *testing.T) {
				srv := statusServer(t, 200, "ok")
				tr := newTransport(t, newFakeClock(), &Transport{})
				req := newRequest(t, testCtx(t), method, srv.URL, "")
				bs := &bodies{content: "payload"}
				bs.attach(req, true)
				req.Header = tt.header
				_, _, err := do(tr, req)
				if !errors.Is(err, ErrInvalidIdempotencyKey) {
					t.Errorf("Do: got error %v, want one wrapping ErrInvalidIdempotencyKey", err)
				}
				if got := srv.count(); got != 0 {
					t.Errorf("requests seen by the server: got %d, want 0", got)
				}
				if n, total := bs.unclosed(); n != 0 || total != 1 {
					t.Errorf("request bodies: %d of %d unclosed, want 0 of 1", n, total)
				}
			})
		}
	}
}

func TestGeneratedIdempotencyKeyOnePerPOSTSentOnEveryAttempt(t *testing.T) {
	srv := newTestServer(t, failThenOK(2))
	clk := newFakeClock()
	var log hookLog
	tr := newTransport(t, clk, &Transport{Keys: KeyPolicy{Generate: true}, Hooks: log.hooks()})

	req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "payload")
	resp, _, err := do(tr, req)
	if err != nil {
		t.Fatalf("Do: got error %v, want nil", err)
	}
	if resp.StatusCode != 200 {
		t.Errorf("status: got %d, want 200", resp.StatusCode)
	}
	log.mu.Lock()
	starts := log.starts
	log.mu.Unlock()
	if len(starts) != 3 {
		t.Fatalf("AttemptStart events: got %d, want 3", len(starts))
	}
	key := starts[0].IdempotencyKey
	if !isHex32(key) {
		t.Fatalf("generated key in hooks: got %q, want 32 hex digits", key)
	}
	for i, s := range starts {
		if s.IdempotencyKey != key || !s.KeyGenerated {
			t.Errorf("attempt %d hook: key %q generated=%v, want %q generated=true", i+1, s.IdempotencyKey, s.KeyGenerated, key)
		}
	}
	reqs := srv.requests()
	if len(reqs) != 3 {
		t.Fatalf("requests seen by the server: got %d, want 3", len(reqs))
	}
	for i, r := range reqs {
		if got := r.Header.Get(headerIdempotencyKey); got != key {
			t.Errorf("request %d: server saw key %q, want %q", i+1, got, key)
		}
	}
	if _, ok := IdempotencyKeyOf(req.Header); ok {
		t.Errorf("caller's header after the call: got a key %v, want none (the request is never modified)", req.Header)
	}

	// Another call gets another key; a GET gets none.
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, srv.URL, "payload")); err != nil {
		t.Fatalf("second POST: %v", err)
	}
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
		t.Fatalf("GET: %v", err)
	}
	reqs = srv.requests()
	if got := reqs[3].Header.Get(headerIdempotencyKey); !isHex32(got) || got == key {
		t.Errorf("second POST: server saw key %q, want a new 32-hex key (first was %q)", got, key)
	}
	if got, ok := reqs[4].Header[headerIdempotencyKey]; ok {
		t.Errorf("GET: server saw key %q, want none", got)
	}
}
