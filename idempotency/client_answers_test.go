package idempotency

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
)

// Each answer of the middleware, as retryfuse's client hands it to its
// caller: the error that means it, never a plain 409 to misread.

// newAnswering starts a loopback server of next behind the middleware with
// cfg, its panics kept out of the test's log.
func newAnswering(t *testing.T, next http.Handler, cfg Config) *httptest.Server {
	t.Helper()
	h, _ := newHandler(t, next, cfg)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// clientSend posts body under key to url through rt and returns the response's
// status (0 for none), its body, and the error.
func clientSend(t *testing.T, rt http.RoundTripper, url, key, body string) (int, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wireTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func newClient(t *testing.T, tr *retryfuse.Transport) *retryfuse.Transport {
	t.Helper()
	tr.Retry.NewBudget = func(string) (budget.Budget, error) { return budget.Unlimited(), nil }
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// A handler that panics may have applied its write: the repeat of the
// same call, toward a server known to honour keys, gets 409 outcome
// unknown, and the caller a *ReconcileRequiredError about its own attempt;
// a later call under the key, from a client that knew nothing of it, gets
// one about the earlier call (Earlier).
func TestOutcomeUnknownIsAReconcileError(t *testing.T) {
	var runs atomic.Int32
	srv := newAnswering(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ping" {
			w.WriteHeader(http.StatusCreated)
			return
		}
		runs.Add(1)
		panic("the write was applied, then the handler failed")
	}), Config{})
	tr := newClient(t, &retryfuse.Transport{Keys: retryfuse.KeyPolicy{ServerHonours: true}})
	if code, _, err := clientSend(t, tr, srv.URL+"/ping", "confirm", "{}"); err != nil || code != http.StatusCreated {
		t.Fatalf("confirming call: %d, %v", code, err)
	}
	_, _, err := clientSend(t, tr, srv.URL+"/charges", "pay-1", `{"amount":1}`)
	var rec *retryfuse.ReconcileRequiredError
	if !errors.As(err, &rec) || rec.Earlier || rec.Attempts != 2 {
		t.Fatalf("got %v (%+v), want a *ReconcileRequiredError about this call's 2 attempts", err, rec)
	}
	other := newClient(t, &retryfuse.Transport{})
	_, _, err = clientSend(t, other, srv.URL+"/charges", "pay-1", `{"amount":1}`)
	if !errors.As(err, &rec) || !rec.Earlier || !strings.Contains(err.Error(), "refused by the server") {
		t.Errorf("another client under the key: got %v, want a *ReconcileRequiredError with Earlier, refused by the server", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// A response too large to store was applied: a repeat under its key gets
// an error matching ErrAlreadyApplied, not the 409.
func TestNotStoredIsAlreadyApplied(t *testing.T) {
	var runs atomic.Int32
	srv := newAnswering(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, strings.Repeat("x", 2048))
	}), Config{MaxStoredBody: 1024})
	tr := newClient(t, &retryfuse.Transport{})
	if code, _, err := clientSend(t, tr, srv.URL+"/charges", "pay-2", "{}"); err != nil || code != http.StatusCreated {
		t.Fatalf("first: %d, %v", code, err)
	}
	_, _, err := clientSend(t, tr, srv.URL+"/charges", "pay-2", "{}")
	if !errors.Is(err, retryfuse.ErrAlreadyApplied) || errors.Is(err, retryfuse.ErrReconcileRequired) {
		t.Errorf("repeat: got %v, want an error matching ErrAlreadyApplied alone", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// A stored 503 replayed is the first request's result: handed back at
// once, never retried.
func TestReplayedResponseIsFinal(t *testing.T) {
	var runs atomic.Int32
	srv := newAnswering(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	}), Config{})
	var sent atomic.Int32
	tr := newClient(t, &retryfuse.Transport{Hooks: retryfuse.Hooks{AttemptStart: func(retryfuse.AttemptStartInfo) { sent.Add(1) }}})
	first := newClient(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{MaxAttempts: 1}})
	if code, _, _ := clientSend(t, first, srv.URL+"/charges", "pay-3", "{}"); code != http.StatusServiceUnavailable {
		t.Fatalf("first: %d, want the handler's 503", code)
	}
	code, _, err := clientSend(t, tr, srv.URL+"/charges", "pay-3", "{}")
	if err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("repeat: %d, %v; want the stored 503", code, err)
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("the replayed 503 was sent %d times, want once", n)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// stallFirst is a server without the middleware: it applies every write,
// and never answers the first.
type stallFirst struct {
	applied atomic.Int32
	marked  bool // answers carry the middleware's marker, falsely
}

func (s *stallFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) // read whole, the server notices the client go
	n := s.applied.Add(1)
	if s.marked {
		w.Header().Set(HeaderHonoured, "?1")
	}
	if n == 1 {
		<-r.Context().Done()
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// ServerHonoursKeys declared toward a server that never says so is not
// enough to repeat a write: until a marked response confirms it, an
// uncertain write is the caller's to reconcile, and it is applied once.
func TestDeclaredHonourNeedsAMarkedResponse(t *testing.T) {
	s := &stallFirst{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	tr := newClient(t, &retryfuse.Transport{Keys: retryfuse.KeyPolicy{ServerHonours: true}, Retry: retryfuse.RetryPolicy{AttemptTimeout: attemptTimeout}})
	_, _, err := clientSend(t, tr, srv.URL+"/charges", "pay-4", "{}")
	var rec *retryfuse.ReconcileRequiredError
	if !errors.As(err, &rec) {
		t.Errorf("got %v, want a *ReconcileRequiredError", err)
	}
	if n := s.applied.Load(); n != 1 {
		t.Errorf("applied %d times, want 1", n)
	}
}

// A keyed write answered without the marker revokes what a marked
// response confirmed, and says so (Hooks.Policy, "server_keys").
func TestUnmarkedAnswerRevokesHonour(t *testing.T) {
	var marked atomic.Bool
	marked.Store(true)
	var stall atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if marked.Load() {
			w.Header().Set(HeaderHonoured, "?1")
		}
		if stall.Load() {
			io.Copy(io.Discard, r.Body) // read whole, the server notices the client go
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	var actions []string
	tr := newClient(t, &retryfuse.Transport{
		Keys: retryfuse.KeyPolicy{
			ServerHonours: true,
		},
		Retry: retryfuse.RetryPolicy{
			AttemptTimeout: attemptTimeout,
		},
		Hooks: retryfuse.Hooks{Policy: func(i retryfuse.PolicyInfo) {
			if i.Policy == "server_keys" {
				actions = append(actions, i.Action)
			}
		}},
	})
	clientSend(t, tr, srv.URL+"/charges", "pay-5", "{}") // marked: confirmed
	marked.Store(false)
	clientSend(t, tr, srv.URL+"/charges", "pay-6", "{}") // a 201 without the marker: revoked
	stall.Store(true)
	_, _, err := clientSend(t, tr, srv.URL+"/charges", "pay-7", "{}")
	var rec *retryfuse.ReconcileRequiredError
	if !errors.As(err, &rec) || rec.Attempts != 1 {
		t.Errorf("after the revocation: got %v, want a *ReconcileRequiredError after 1 attempt", err)
	}
	if want := []string{"confirmed", "revoked"}; len(actions) != 2 || actions[0] != want[0] || actions[1] != want[1] {
		t.Errorf("server_keys events %v, want %v", actions, want)
	}
}

// attemptTimeout cuts the attempt whose response a server never sends.
const attemptTimeout = 200 * time.Millisecond

// recoverer answers 500 for a handler that panicked, outside the
// middleware: the key is left uncertain, and the 500 carries the marker.
type recoverer struct{ next http.Handler }

func (rc recoverer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if recover() != nil {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}()
	rc.next.ServeHTTP(w, r)
}

// A handler that panicked behind a recoverer answering 500: the call's own
// first attempt ran it, so the 409 outcome unknown its retry gets is about
// this call's write, not an earlier call's.
func TestOutcomeUnknownAfterOwnAnsweredAttemptIsThisCalls(t *testing.T) {
	var runs atomic.Int32
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		panic("applied, then failed")
	}), Config{})
	srv := httptest.NewUnstartedServer(recoverer{h})
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := newClient(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{InitialBackoff: time.Millisecond}})
	_, _, err := clientSend(t, tr, srv.URL+"/charges", "pay-8", "{}")
	var rec *retryfuse.ReconcileRequiredError
	if !errors.As(err, &rec) || rec.Earlier || rec.Attempts != 2 {
		t.Errorf("got %v (%+v), want a *ReconcileRequiredError about this call's 2 attempts", err, rec)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// ErrAlreadyApplied from the server holds the key as applied on the
// client too, in its Ledger or its memory: a later call is not sent.
func TestNotStoredHoldsTheKeyOnTheClient(t *testing.T) {
	for name, ledger := range map[string]ledger.Ledger{"ledger": &ledger.Memory{}, "memory": nil} {
		t.Run(name, func(t *testing.T) {
			var hits atomic.Int32
			h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, strings.Repeat("x", 2048))
			}), Config{MaxStoredBody: 1024})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			first := newClient(t, &retryfuse.Transport{})
			if code, _, err := clientSend(t, first, srv.URL+"/charges", "pay-9", "{}"); err != nil || code != http.StatusCreated {
				t.Fatalf("first: %d, %v", code, err)
			}
			tr := newClient(t, &retryfuse.Transport{Keys: retryfuse.KeyPolicy{Ledger: ledger}})
			for i := range 2 {
				if _, _, err := clientSend(t, tr, srv.URL+"/charges", "pay-9", "{}"); !errors.Is(err, retryfuse.ErrAlreadyApplied) {
					t.Errorf("call %d: got %v, want ErrAlreadyApplied", i, err)
				}
			}
			if n := hits.Load(); n != 2 {
				t.Errorf("the server got %d requests, want 2: the third call is not sent", n)
			}
		})
	}
}
