package idempotency

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
)

// Both halves of the key, end to end: retryfuse's Transport, the
// middleware, a handler, over loopback.

// clientPost sends body to url under key through rt.
func clientPost(t *testing.T, rt *retryfuse.Transport, url, key string, body []byte) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wireTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key) // the bare form, as retryfuse's client sends it
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(HeaderReplayed), string(b)
}

// clientPostErr sends body to url under key through rt and returns the
// error, closing any response.
func clientPostErr(t *testing.T, rt *retryfuse.Transport, url, key string, body []byte) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// TestClientRepeatGetsTheStoredReplay: a caller that sends a keyed POST
// again through retryfuse's Transport, with the same key and body, gets
// the stored response; the handler ran once. Another body under the key
// gets 422, which the Transport returns as ErrIdempotencyConflict.
func TestClientRepeatGetsTheStoredReplay(t *testing.T) {
	c := &counter{}
	h, _ := newHandler(t, c, Config{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	rt := &retryfuse.Transport{}
	defer rt.CloseIdleConnections()

	body := []byte(`{"amount":4200}`)
	status, replayed, got := clientPost(t, rt, srv.URL+"/charges", "order-42", body)
	if status != http.StatusCreated || replayed != "" || got != "created "+string(body) {
		t.Fatalf("first: %d, replayed %q, %q", status, replayed, got)
	}
	status, replayed, got = clientPost(t, rt, srv.URL+"/charges", "order-42", body)
	if status != http.StatusCreated || replayed != "true" || got != "created "+string(body) {
		t.Errorf("repeat: %d, replayed %q, %q; want the first response, replayed", status, replayed, got)
	}
	if err := clientPostErr(t, rt, srv.URL+"/charges", "order-42", []byte(`{"amount":1}`)); !errors.Is(err, retryfuse.ErrIdempotencyConflict) {
		t.Errorf("another body under the key: got %v, want the middleware's 422 as ErrIdempotencyConflict", err)
	}
	if c.runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", c.runs.Load())
	}
}

// TestFingerprintIsTheClients: for the same request, the middleware's
// fingerprint is the one retryfuse's Transport gives its own Ledger.
func TestFingerprintIsTheClients(t *testing.T) {
	server := &spyLedger{Ledger: newMemoryLedger(t)}
	client := &spyLedger{Ledger: newMemoryLedger(t)}
	h, _ := newHandler(t, &counter{}, Config{Ledger: server})
	srv := httptest.NewServer(h)
	defer srv.Close()
	rt := &retryfuse.Transport{Keys: retryfuse.KeyPolicy{Ledger: client}}
	defer rt.CloseIdleConnections()

	paths := []string{"/charges", "/v1/a%2Fb/charges?sig=1", "/caf%C3%A9/x%20y", "/"}
	for i, path := range paths {
		clientPost(t, rt, srv.URL+path, "fp-"+itoa(int64(i)), []byte(`{"amount":`+itoa(int64(i))+`}`))
	}
	if len(server.fps) != len(paths) || len(client.fps) != len(paths) {
		t.Fatalf("fingerprints: %d on the server, %d on the client; want %d each", len(server.fps), len(client.fps), len(paths))
	}
	for i, path := range paths {
		if server.fps[i] != client.fps[i] {
			t.Errorf("POST %s: the server's fingerprint %x, the client's %x", path, server.fps[i], client.fps[i])
		}
	}
}

// lostResponseHandler applies a charge and answers only once its caller
// has gone: the response of the first request under a key is lost. The
// middleware records it all the same.
type lostResponseHandler struct{ applied atomic.Int64 }

func (h *lostResponseHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.applied.Add(1)
	body, _ := io.ReadAll(r.Body)
	<-r.Context().Done()
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "charged "+string(body))
}

// TestLostResponseEndsExactlyOnce: a keyed POST whose response is lost
// (its attempt times out after the server applied it) is sent again by
// retryfuse's Transport with the same key and body, toward a server that
// honours keys — declared and confirmed by the marker of an earlier
// response, or learnt from it. The caller gets the charge, not a
// reconcile error; it was applied once.
func TestLostResponseEndsExactlyOnce(t *testing.T) {
	for _, declared := range []bool{true, false} {
		t.Run(map[bool]string{true: "declared", false: "learnt"}[declared], func(t *testing.T) {
			charges := &lostResponseHandler{}
			mux := http.NewServeMux()
			mux.Handle("/charges", charges)
			mux.Handle("/warm", &counter{})
			h, _ := newHandler(t, mux, Config{})
			srv := httptest.NewServer(h)
			defer srv.Close()
			rt := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{AttemptTimeout: 200 * time.Millisecond, InitialBackoff: 10 * time.Millisecond}, Keys: retryfuse.KeyPolicy{ServerHonours: declared}}
			defer rt.CloseIdleConnections()
			if status, _, _ := clientPost(t, rt, srv.URL+"/warm", "warm-1", []byte(`{}`)); status != http.StatusCreated {
				t.Fatalf("warm-up: %d", status)
			}
			status, replayed, got := clientPost(t, rt, srv.URL+"/charges", "pay-1", []byte(`{"amount":4200}`))
			if status != http.StatusCreated || replayed != "true" || got != `charged {"amount":4200}` {
				t.Errorf("got %d, replayed %q, %q; want the stored charge, replayed", status, replayed, got)
			}
			if n := charges.applied.Load(); n != 1 {
				t.Errorf("the charge was applied %d times, want 1", n)
			}
		})
	}
}
