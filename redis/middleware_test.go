package retryfuseredis

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// The server half of Idempotency-Key (package idempotency) on the Redis
// ledger: servers that share one Redis answer for the same keys as one.

// middlewareLedger returns a Ledger on client under prefix, closed when
// the test ends.
func middlewareLedger(t *testing.T, client redis.UniversalClient, prefix string) *Ledger {
	t.Helper()
	l, err := NewLedger(client, LedgerConfig{Prefix: prefix, Timeout: testTimeout, AllowWithoutPersistence: true})
	if err != nil {
		t.Fatal(err)
	}
	closeLedger(t, l)
	return l
}

// middlewareServer starts a server of next behind the middleware on l.
func middlewareServer(t *testing.T, l *Ledger, next http.Handler) *httptest.Server {
	t.Helper()
	h, err := idempotency.New(next, idempotency.Config{Ledger: l, ErrorLog: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type middlewareResult struct {
	status            int
	replayed, retryAt string
	body              string
}

func middlewarePost(t *testing.T, srv *httptest.Server, key, body string) middlewareResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return middlewareResult{resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), resp.Header.Get("Retry-After"), string(b)}
}

// problemType returns the type of a problem details body, or "".
func problemType(body string) string {
	var p struct{ Type string }
	_ = json.Unmarshal([]byte(body), &p)
	return p.Type
}

// TestMiddlewareTwoServersShareOneRedis: 100 concurrent requests under one
// key, sent to two servers (each with a Ledger and a Redis client of its
// own) that share one Redis: the handler runs once across both; every
// other request gets 409 (in flight) or the stored replay.
func TestMiddlewareTwoServersShareOneRedis(t *testing.T) {
	prefix := uniq(t)
	var runs atomic.Int64
	half := make(chan struct{})
	var answered atomic.Int64
	const n = 100
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		select { // hold the key until half of the others are answered
		case <-half:
		case <-ctx.Done():
			t.Error("half of the others were not answered")
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})
	servers := []*httptest.Server{
		middlewareServer(t, middlewareLedger(t, newClient(t, sharedAddr(t)), prefix), next),
		middlewareServer(t, middlewareLedger(t, newClient(t, sharedAddr(t)), prefix), next),
	}
	results := make([]middlewareResult, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = middlewarePost(t, servers[i%2], "shared-key", `{"amount":100}`)
			if answered.Add(1) == n/2 {
				close(half)
			}
		}()
	}
	close(start)
	wg.Wait()

	first, conflicts, replays := 0, 0, 0
	for i, r := range results {
		switch {
		case r.status == http.StatusCreated && r.replayed == "" && r.body == "charged":
			first++
		case r.status == http.StatusCreated && r.replayed == "true" && r.body == "charged":
			replays++
		case r.status == http.StatusConflict && problemType(r.body) == idempotency.ProblemInFlight && r.retryAt != "":
			conflicts++
		default:
			t.Errorf("request %d: %+v", i, r)
		}
	}
	if runs.Load() != 1 || first != 1 || conflicts < n/2-1 || first+conflicts+replays != n {
		t.Errorf("the handler ran %d times; %d first, %d in flight, %d replays; want 1 run, 1 first, at least %d in flight, %d in all",
			runs.Load(), first, conflicts, replays, n/2-1, n)
	}
	for i, srv := range servers {
		if r := middlewarePost(t, srv, "shared-key", `{"amount":100}`); r.status != http.StatusCreated || r.replayed != "true" {
			t.Errorf("server %d, afterwards: %+v, want the replay", i, r)
		}
		if r := middlewarePost(t, srv, "shared-key", `{"amount":999}`); r.status != http.StatusUnprocessableEntity ||
			problemType(r.body) != idempotency.ProblemKeyReused {
			t.Errorf("server %d, another body: %+v, want 422", i, r)
		}
	}
}

// TestMiddlewareRedisPanicIsUncertainForEveryServer: a handler that panics
// on one server leaves the key uncertain; the other server refuses it too.
func TestMiddlewareRedisPanicIsUncertainForEveryServer(t *testing.T) {
	prefix := uniq(t)
	// The effect is applied, then the handler crashes as net/http's own
	// abort (http.ErrAbortHandler): the connection is cut, nothing logged.
	charges := retryfusetest.NewRecorder()
	next := retryfusetest.NewHandler(charges.Wrap(nil), retryfusetest.ApplyThenReset())
	a := middlewareServer(t, middlewareLedger(t, newClient(t, sharedAddr(t)), prefix), next)
	b := middlewareServer(t, middlewareLedger(t, newClient(t, sharedAddr(t)), prefix), next)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL+"/charges", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "panics")
	if resp, err := a.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the panicking handler's request got a response: %d", resp.StatusCode)
	}
	r := middlewarePost(t, b, "panics", "x")
	if r.status != http.StatusConflict || problemType(r.body) != idempotency.ProblemOutcomeUnknown {
		t.Errorf("the other server: %+v, want 409 %s", r, idempotency.ProblemOutcomeUnknown)
	}
	if n := charges.Applied("panics"); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// TestMiddlewareRedisDownFailsClosed: with its Redis gone, the middleware
// answers 503 with Retry-After and does not run the handler.
func TestMiddlewareRedisDownFailsClosed(t *testing.T) {
	s := startServer(t)
	l, err := NewLedger(newClient(t, s.Addr()), LedgerConfig{Prefix: uniq(t), Timeout: 500 * time.Millisecond, AllowWithoutPersistence: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = l.Close(ctx) // Redis is gone: what is queued cannot be flushed
	})
	var runs atomic.Int64
	srv := middlewareServer(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }))
	s.Stop()

	r := middlewarePost(t, srv, "k", "x")
	if r.status != http.StatusServiceUnavailable || problemType(r.body) != idempotency.ProblemLedgerUnavailable || r.retryAt != "1" {
		t.Errorf("with Redis down: %+v, want 503 %s with Retry-After 1", r, idempotency.ProblemLedgerUnavailable)
	}
	if runs.Load() != 0 {
		t.Errorf("the handler ran %d times with Redis down", runs.Load())
	}
}
