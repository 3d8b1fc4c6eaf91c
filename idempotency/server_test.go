package idempotency

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
)

// Tests over real loopback sockets: HTTP/1 and HTTP/2.

// protocols are the servers the loopback tests run on.
var protocols = []struct {
	name  string
	start func(h http.Handler) *httptest.Server
}{
	{"HTTP/1.1", httptest.NewServer},
	{"HTTP/2", func(h http.Handler) *httptest.Server {
		s := httptest.NewUnstartedServer(h)
		s.EnableHTTP2 = true
		s.StartTLS()
		return s
	}},
}

// wireTimeout bounds each wait on a real socket.
const wireTimeout = 10 * time.Second

// send posts body under key to srv's path and returns the status, the
// replay mark and the body.
func send(t *testing.T, ctx context.Context, srv *httptest.Server, path, key, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the body: %v", path, err)
	}
	return resp.StatusCode, resp.Header.Get(HeaderReplayed), string(b)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wireTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestConcurrentRequestsUnderOneKeyRunOnce: of 100 concurrent requests
// under one key, one runs the handler; every other gets 409 (in flight)
// or the stored replay. The handler holds its key until half of the
// others have been answered, so that both answers are seen. Called
// directly, and over each protocol.
func TestConcurrentRequestsUnderOneKeyRunOnce(t *testing.T) {
	const n = 100
	type result struct {
		status         int
		replayed, body string
	}
	// setup returns the middleware wrapped in a handler that counts the
	// answered requests, its handler's count of runs, and the results.
	setup := func(t *testing.T) (http.Handler, *atomic.Int64) {
		ctx := testContext(t)
		var answered atomic.Int64
		half := make(chan struct{})
		var runs atomic.Int64
		h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Idempotency-Key") == "one-key" {
				runs.Add(1)
				select {
				case <-half:
				case <-ctx.Done():
					t.Error("half of the others were not answered")
				}
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "created")
		}), Config{})
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			if r.Header.Get("Idempotency-Key") == "one-key" && answered.Add(1) == n/2 {
				close(half)
			}
		}), &runs
	}
	check := func(t *testing.T, runs *atomic.Int64, results []result) {
		t.Helper()
		first, conflicts, replays := 0, 0, 0
		for i, r := range results {
			switch {
			case r.status == http.StatusCreated && r.replayed == "" && r.body == "created":
				first++
			case r.status == http.StatusCreated && r.replayed == "true" && r.body == "created":
				replays++
			case r.status == http.StatusConflict && strings.Contains(r.body, ProblemInFlight):
				conflicts++
			default:
				t.Errorf("request %d: %+v", i, r)
			}
		}
		if runs.Load() != 1 || first != 1 || conflicts < n/2 || first+conflicts+replays != n {
			t.Errorf("the handler ran %d times; %d first, %d in flight, %d replays; want 1 run, 1 first, at least %d in flight, and %d in all",
				runs.Load(), first, conflicts, replays, n/2, n)
		}
	}
	concurrently := func(do func(i int) result) []result {
		results := make([]result, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i] = do(i)
			}()
		}
		close(start)
		wg.Wait()
		return results
	}

	t.Run("direct", func(t *testing.T) {
		h, runs := setup(t)
		check(t, runs, concurrently(func(int) result {
			w := serve(h, post("/charges", "one-key", "payload"))
			return result{w.Code, w.Header().Get(HeaderReplayed), w.Body.String()}
		}))
	})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			h, runs := setup(t)
			srv := p.start(h)
			defer srv.Close()
			ctx := testContext(t)
			// One request first, so that the others share its connection
			// where the protocol can (HTTP/2's streams).
			send(t, ctx, srv, "/charges", "warm-up", "payload")
			check(t, runs, concurrently(func(int) result {
				status, replayed, body := send(t, ctx, srv, "/charges", "one-key", "payload")
				return result{status, replayed, body}
			}))
		})
	}
}

// TestFlushPassesThrough: a streaming handler's first part reaches the
// client before the handler goes on, by http.Flusher and by
// http.ResponseController; the replay is the whole response.
func TestFlushPassesThrough(t *testing.T) {
	flushers := []struct {
		name  string
		flush func(w http.ResponseWriter) error
	}{
		{"http.Flusher", func(w http.ResponseWriter) error { w.(http.Flusher).Flush(); return nil }},
		{"http.ResponseController", func(w http.ResponseWriter) error { return http.NewResponseController(w).Flush() }},
	}
	for _, p := range protocols {
		for _, f := range flushers {
			t.Run(p.name+"/"+f.name, func(t *testing.T) {
				proceed := make(chan struct{})
				runs := 0
				var deadlineErr, flushErr error
				h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs++
					// Unwrap reaches the server's ResponseWriter: its deadlines are there.
					deadlineErr = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wireTimeout))
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, "part1;")
					flushErr = f.flush(w)
					select {
					case <-proceed:
					case <-r.Context().Done():
						return
					}
					io.WriteString(w, "part2")
				}), Config{})
				srv := p.start(h)
				defer srv.Close()
				ctx := testContext(t)

				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/stream", strings.NewReader("x"))
				req.Header.Set("Idempotency-Key", "stream-key")
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				br := bufio.NewReader(resp.Body)
				part1, err := br.ReadString(';') // bounded by ctx: blocks until the deadline if the flush was held back
				if err != nil || part1 != "part1;" {
					t.Fatalf("before the handler went on, read %q, %v; want part1;", part1, err)
				}
				close(proceed)
				rest, _ := io.ReadAll(br)
				if string(rest) != "part2" || resp.StatusCode != http.StatusCreated {
					t.Errorf("then %d %q, want 201 part2", resp.StatusCode, rest)
				}
				if deadlineErr != nil || flushErr != nil {
					t.Errorf("SetWriteDeadline: %v; flush: %v; want both to pass through", deadlineErr, flushErr)
				}
				resp.Body.Close()

				status, replayed, body := send(t, ctx, srv, "/stream", "stream-key", "x")
				if status != http.StatusCreated || replayed != "true" || body != "part1;part2" || runs != 1 {
					t.Errorf("repeat: %d, replayed %q, %q after %d runs; want 201, true, part1;part2 after 1", status, replayed, body, runs)
				}
			})
		}
	}
}

// TestClientGoneStillRecordsTheOutcome: the client goes away while the
// handler runs; the handler's outcome, written to no one, is still what a
// repeat gets.
func TestClientGoneStillRecordsTheOutcome(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			entered := make(chan struct{})
			runs := 0
			settled := &settleSignal{Ledger: newMemoryLedger(t), done: make(chan struct{}, 1)}
			h, q := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				close(entered)
				<-r.Context().Done() // the client is gone
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "applied")
			}), Config{Ledger: settled})
			srv := p.start(h)
			defer srv.Close()
			ctx := testContext(t)

			gone, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(gone, http.MethodPost, srv.URL+"/charges", strings.NewReader("x"))
				req.Header.Set("Idempotency-Key", "gone-key")
				resp, err := srv.Client().Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			select {
			case <-entered:
			case <-ctx.Done():
				t.Fatal("the handler did not start")
			}
			cancel()
			if err := <-errc; err == nil {
				t.Fatal("the cancelled request got a response")
			}
			// The outcome is recorded after the handler returns: the repeat
			// goes once the key is settled, not once the handler is done.
			select {
			case <-settled.done:
			case <-ctx.Done():
				t.Fatal("the handler did not see the client go, or its outcome was never recorded")
			}
			status, replayed, body := send(t, ctx, srv, "/charges", "gone-key", "x")
			if status != http.StatusCreated || replayed != "true" || body != "applied" || runs != 1 {
				t.Errorf("repeat: %d, replayed %q, %q after %d runs; want 201, true, applied after 1 (log: %s)", status, replayed, body, runs, q)
			}
		})
	}
}

// TestHijackedResponseIsNotStored: what a handler writes to a connection
// it took over is not seen, so it is not replayed; it is not run again
// either.
func TestHijackedResponseIsNotStored(t *testing.T) {
	runs := 0
	settled := &settleSignal{Ledger: newMemoryLedger(t), done: make(chan struct{}, 1)}
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer conn.Close()
		bw.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 3\r\nConnection: close\r\n\r\nraw")
		bw.Flush()
	}), Config{Ledger: settled})
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := testContext(t)
	if status, _, body := send(t, ctx, srv, "/x", "hijack", ""); status != http.StatusCreated || body != "raw" {
		t.Fatalf("first: %d %q, want 201 raw", status, body)
	}
	// The client reads the raw response before the handler has returned:
	// the key is settled once it has.
	select {
	case <-settled.done:
	case <-ctx.Done():
		t.Fatal("the first request's key was never settled")
	}
	status, _, body := send(t, ctx, srv, "/x", "hijack", "")
	if status != http.StatusConflict || !strings.Contains(body, ProblemNotStored) || runs != 1 {
		t.Errorf("repeat: %d %s after %d runs; want 409 %s after 1", status, body, runs, ProblemNotStored)
	}
}

// settleSignal is a Ledger that signals each Complete, Release or
// Uncertain once it has been recorded.
type settleSignal struct {
	ledger.Ledger
	done chan struct{}
}

func (l *settleSignal) signal() {
	select {
	case l.done <- struct{}{}:
	default:
	}
}

func (l *settleSignal) Complete(ctx context.Context, key, token string, res *ledger.StoredResponse) error {
	defer l.signal()
	return l.Ledger.Complete(ctx, key, token, res)
}

func (l *settleSignal) Release(ctx context.Context, key, token string) error {
	defer l.signal()
	return l.Ledger.Release(ctx, key, token)
}

func (l *settleSignal) Uncertain(ctx context.Context, key, token string) error {
	defer l.signal()
	return l.Ledger.Uncertain(ctx, key, token)
}
