package retryfuse

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
)

// The transport's promises hold over HTTP/2 as over HTTP/1.1. Each test
// runs over both, on TLS loopback servers that differ only in the
// protocol they offer, and checks which protocol carried each request.

func TestHTTP2KeyedPOSTRetriedOn503WithSameBodyAndKey(t *testing.T) {
	for _, p := range httpProtos {
		for _, generated := range []bool{false, true} {
			name := p.name + "/caller's key"
			if generated {
				name = p.name + "/generated key"
			}
			t.Run(name, func(t *testing.T) {
				srv, base := startTLSServer(t, p, failThenOK(1))
				var log hookLog
				tr := newTransport(t, newFakeClock(), &Transport{Base: base, Keys: KeyPolicy{Generate: generated}, Hooks: log.hooks()})
				req := newRequest(t, testCtx(t), http.MethodPost, srv.URL+"/payments", `{"amount":10}`)
				if !generated {
					req.Header.Set(headerIdempotencyKey, "pay-h2-1")
				}
				resp, body, err := do(tr, req)
				if err != nil || resp.StatusCode != http.StatusOK || string(body) != "done" {
					t.Fatalf("Do: got %v, %q, %v; want 200 done", resp, body, err)
				}
				checkProto(t, p, srv, resp)
				reqs, _ := srv.requests()
				if len(reqs) != 2 {
					t.Fatalf("requests seen by the server: got %d, want 2", len(reqs))
				}
				key := reqs[0].Header.Get(headerIdempotencyKey)
				if key == "" || (!generated && key != "pay-h2-1") {
					t.Errorf("key seen by the server: got %q, want the request's", key)
				}
				for i, r := range reqs {
					if r.Body != `{"amount":10}` || r.Header.Get(headerIdempotencyKey) != key {
						t.Errorf("request %d: got body %q key %q, want the first's %q %q", i+1, r.Body, r.Header.Get(headerIdempotencyKey), `{"amount":10}`, key)
					}
				}
				log.mu.Lock()
				defer log.mu.Unlock()
				if len(log.retries) != 1 || log.retries[0].IdempotencyKey != key {
					t.Errorf("Retry hook: got %+v, want one retry under key %q", log.retries, key)
				}
			})
		}
	}
}

func TestHTTP2POSTWithoutKeyNotRetried(t *testing.T) {
	for _, p := range httpProtos {
		t.Run(p.name, func(t *testing.T) {
			srv, base := startTLSServer(t, p, failThenOK(1))
			clk := newFakeClock()
			tr := newTransport(t, clk, &Transport{Base: base})
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, srv.URL+"/orders", `{"n":1}`))
			if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("Do: got %v, %v; want the 503 back", resp, err)
			}
			checkProto(t, p, srv, resp)
			if reqs, _ := srv.requests(); len(reqs) != 1 {
				t.Errorf("requests seen by the server: got %d, want 1", len(reqs))
			}
			if got := clk.Sleeps(); len(got) != 0 {
				t.Errorf("waits: got %v, want none", got)
			}
		})
	}
}

func TestHTTP2KeyedPOSTStallingAfterEffectRequiresReconcile(t *testing.T) {
	for _, p := range httpProtos {
		t.Run(p.name, func(t *testing.T) {
			srv, base := startTLSServer(t, p, stallUntilGone)
			clk := newFakeClock()
			tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{AttemptTimeout: shortTimeout}})
			req := newRequest(t, testCtx(t), http.MethodPost, srv.URL+"/payments", `{"amount":10}`)
			req.Header.Set(headerIdempotencyKey, "pay-h2-2")
			resp, _, err := do(tr, req)
			if resp != nil {
				t.Errorf("Do: got a response %d, want none", resp.StatusCode)
			}
			rec := wantReconcile(t, err, http.MethodPost, srv.URL+"/payments", "pay-h2-2")
			if !errors.Is(rec.Cause, ErrAttemptTimeout) {
				t.Errorf("Cause: got %v, want one matching ErrAttemptTimeout", rec.Cause)
			}
			checkProto(t, p, srv, nil)
			if reqs, _ := srv.requests(); len(reqs) != 1 {
				t.Errorf("requests seen by the server: got %d, want 1", len(reqs))
			}
			if got := clk.Sleeps(); len(got) != 0 {
				t.Errorf("waits: got %v, want none", got)
			}
		})
	}
}

func TestHTTP2GETRetriedAfter503(t *testing.T) {
	for _, p := range httpProtos {
		t.Run(p.name, func(t *testing.T) {
			srv, base := startTLSServer(t, p, failThenOK(1))
			tr := newTransport(t, newFakeClock(), &Transport{Base: base})
			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/items", ""))
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != "done" {
				t.Fatalf("Do: got %v, %q, %v; want 200 done", resp, body, err)
			}
			checkProto(t, p, srv, resp)
			if reqs, _ := srv.requests(); len(reqs) != 2 {
				t.Errorf("requests seen by the server: got %d, want 2", len(reqs))
			}
			if got := srv.conns.Load(); got != 1 {
				t.Errorf("connections: got %d, want 1 (the 503's was reused)", got)
			}
		})
	}
}

// A refused dial writes nothing: the keyed POST is retried, and the
// server applies it once.
func TestHTTP2RefusedConnectionRetriesKeyedPOST(t *testing.T) {
	refused := refusedURL(t)[len("http://"):]
	refused = refused[:len(refused)-1]
	for _, p := range httpProtos {
		t.Run(p.name, func(t *testing.T) {
			srv, base := startTLSServer(t, p, failThenOK(0))
			var dials atomic.Int32
			base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if dials.Add(1) == 1 {
					addr = refused
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}
			var log hookLog
			tr := newTransport(t, newFakeClock(), &Transport{Base: base, Hooks: log.hooks()})
			req := newRequest(t, testCtx(t), http.MethodPost, srv.URL+"/payments", `{"amount":10}`)
			req.Header.Set(headerIdempotencyKey, "pay-h2-3")
			resp, _, err := do(tr, req)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("Do: got %v, %v; want 200", resp, err)
			}
			checkProto(t, p, srv, resp)
			reqs, _ := srv.requests()
			if len(reqs) != 1 || reqs[0].Header.Get(headerIdempotencyKey) != "pay-h2-3" {
				t.Errorf("requests seen by the server: got %+v, want one carrying key pay-h2-3", reqs)
			}
			if got := dials.Load(); got != 2 {
				t.Errorf("dials: got %d, want 2", got)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.dones) != 2 || log.dones[0].Phase != decide.PhasePreWrite || !errors.Is(log.dones[0].Err, syscall.ECONNREFUSED) {
				t.Errorf("AttemptDone: got %+v, want a pre_write ECONNREFUSED, then the response", log.dones)
			}
		})
	}
}

// A connection the server gives up between two requests: by a GOAWAY
// (HTTP/2; "Connection: close" on HTTP/1.1), or by closing it outright.
// Whether the client has noticed when the second GET is sent is a race
// the test cannot steer, so it pins what holds either way: the GET
// succeeds, the server handles it once, and within each attempt
// HiddenResend fires exactly when net/http obtained more than one
// connection (as the caller's own trace, composed with the transport's,
// counts them), with that number.
//
// Seen on loopback (go1.26), and not asserted since it is timing: after a
// GOAWAY or "Connection: close" the client has dropped the connection and
// dials anew. After an outright close, the second GET sometimes goes out
// on the dead connection first: over HTTP/1.1 net/http then re-sends it on
// a new one itself (HiddenResend, Connections 2); over HTTP/2 the attempt
// fails with "unexpected EOF" and this transport makes a second attempt.
func TestHTTP2ConnectionGoneBetweenRequests(t *testing.T) {
	for _, p := range httpProtos {
		for _, how := range []string{"graceful", "closed"} {
			t.Run(p.name+"/"+how, func(t *testing.T) {
				srv, base := startTLSServer(t, p, func(n int, w http.ResponseWriter, _ *http.Request) {
					if n == 1 && how == "graceful" {
						// On HTTP/2 the server sends GOAWAY and closes the
						// connection once idle.
						w.Header().Set("Connection", "close")
					}
					_, _ = io.WriteString(w, "ok")
				})
				var (
					mu       sync.Mutex
					perTry   []int // connections obtained in each attempt
					firstUse []bool
				)
				var log hookLog
				hooks := JoinHooks(Hooks{AttemptStart: func(AttemptStartInfo) {
					mu.Lock()
					perTry = append(perTry, 0)
					mu.Unlock()
				}}, log.hooks())
				tr := newTransport(t, newFakeClock(), &Transport{Base: base, Hooks: hooks})
				if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/first", "")); err != nil {
					t.Fatalf("first GET: %v", err)
				}
				if how == "closed" {
					srv.CloseClientConnections()
				}
				mu.Lock()
				perTry = nil
				mu.Unlock()
				log.mu.Lock()
				log.hidden, log.dones = nil, nil
				log.mu.Unlock()
				ctx := httptrace.WithClientTrace(testCtx(t), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
					mu.Lock()
					perTry[len(perTry)-1]++
					firstUse = append(firstUse, i.Reused)
					mu.Unlock()
				}})
				resp, body, err := do(tr, newRequest(t, ctx, http.MethodGet, srv.URL+"/second", ""))
				if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
					t.Fatalf("second GET: got %v, %q, %v; want 200 ok", resp, body, err)
				}
				checkProto(t, p, srv, resp)
				reqs, _ := srv.requests()
				seconds := 0
				for _, r := range reqs {
					if r.URL == "/second" {
						seconds++
					}
				}
				if seconds != 1 {
					t.Errorf("server handled the second GET %d times, want 1", seconds)
				}
				mu.Lock()
				defer mu.Unlock()
				log.mu.Lock()
				defer log.mu.Unlock()
				hidden := map[int]int{} // attempt → Connections
				for _, h := range log.hidden {
					hidden[h.Attempt] = h.Connections
				}
				if len(hidden) != len(log.hidden) {
					t.Errorf("HiddenResend: got %+v, want at most one event per attempt", log.hidden)
				}
				for i, n := range perTry {
					got, fired := hidden[i+1]
					switch {
					case n > 1 && (!fired || got != n):
						t.Errorf("attempt %d: HiddenResend got %+v, want Connections %d", i+1, log.hidden, n)
					case n <= 1 && fired:
						t.Errorf("attempt %d: HiddenResend got %+v, want none for %d connection(s)", i+1, log.hidden, n)
					}
				}
				var errs []error
				for _, d := range log.dones {
					errs = append(errs, d.Err)
				}
				t.Logf("second GET: connections per attempt %v (reused: %v), attempt errors %v, HiddenResend %+v, server connections %d",
					perTry, firstUse, errs, hidden, srv.conns.Load())
			})
		}
	}
}

// The key a POST carries reaches an HTTP/2 server (where header names are
// lower-case on the wire) under the caller's form and under the X- form.
func TestHTTP2IdempotencyKeyReachesServer(t *testing.T) {
	for _, p := range httpProtos {
		for _, name := range []string{headerIdempotencyKey, headerXIdempotencyKey, "idempotency-key"} {
			t.Run(p.name+"/"+name, func(t *testing.T) {
				srv, base := startTLSServer(t, p, failThenOK(0))
				tr := newTransport(t, newFakeClock(), &Transport{Base: base})
				req := newRequest(t, testCtx(t), http.MethodPost, srv.URL+"/payments", `{"amount":10}`)
				req.Header[name] = []string{"pay-h2-4"}
				resp, _, err := do(tr, req)
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("Do: got %v, %v; want 200", resp, err)
				}
				checkProto(t, p, srv, resp)
				reqs, _ := srv.requests()
				want := http.CanonicalHeaderKey(name)
				if len(reqs) != 1 || reqs[0].Header.Get(want) != "pay-h2-4" {
					t.Errorf("server saw %+v, want one request with %s: pay-h2-4", reqs, want)
				}
			})
		}
	}
}
