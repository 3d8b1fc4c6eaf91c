package retryfuse

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// shortTimeout is the attempt timeout of tests where a server stalls: long
// enough for a loopback request to be written, short enough to keep the
// suite fast.
const shortTimeout = 100 * time.Millisecond

// wantReconcile checks that err is a *ReconcileRequiredError, reached
// through http.Client's *url.Error, and returns it.
func wantReconcile(t *testing.T, err error, method, url, key string) *ReconcileRequiredError {
	t.Helper()
	var rec *ReconcileRequiredError
	if !errors.As(err, &rec) {
		t.Fatalf("Do: got error %v (%T), want a *ReconcileRequiredError", err, err)
	}
	if !errors.Is(err, ErrReconcileRequired) {
		t.Errorf("errors.Is(err, ErrReconcileRequired): got false, want true")
	}
	if rec.Method != method || rec.URL != url || rec.IdempotencyKey != key || rec.Attempts != 1 || rec.Phase != decide.PhasePostWrite {
		t.Errorf("reconcile error: got Method %q URL %q Key %q Attempts %d Phase %v; want %q %q %q 1 post_write",
			rec.Method, rec.URL, rec.IdempotencyKey, rec.Attempts, rec.Phase, method, url, key)
	}
	return rec
}

// The transport's fault tests script their faults with the test kit
// (retryfusetest): on a loopback Server where the behaviour depends on the
// wire (a TCP reset, net/http's own re-send on a reused connection), on
// its in-memory Transport inside a testing/synctest bubble where the
// faults are stalls and the timeouts run on the bubble's clock.

func TestKeyedPOSTStallingPastAttemptTimeoutRequiresReconcile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := retryfusetest.NewTransport(nil, retryfusetest.StallBeforeApply())
		var log hookLog
		tr := newTransport(t, nil, &Transport{Base: api, Retry: RetryPolicy{AttemptTimeout: 10 * time.Second}, Hooks: log.hooks()})

		req := newRequest(t, testCtx(t), http.MethodPost, "http://payments.test/payments", `{"amount":10}`)
		req.Header.Set(headerIdempotencyKey, "pay-1")
		start := time.Now()
		resp, _, err := do(tr, req)
		if resp != nil {
			t.Errorf("Do: got a response %d, want none", resp.StatusCode)
		}
		rec := wantReconcile(t, err, http.MethodPost, "http://payments.test/payments", "pay-1")
		if !errors.Is(rec.Cause, ErrAttemptTimeout) {
			t.Errorf("Cause: got %v, want one matching ErrAttemptTimeout", rec.Cause)
		}
		var ne net.Error
		if !errors.As(rec.Cause, &ne) || !ne.Timeout() {
			t.Errorf("Cause: got %v, want a net.Error with Timeout() true", rec.Cause)
		}
		if got := api.Requests(); got != 1 {
			t.Errorf("requests seen by the server: got %d, want 1", got)
		}
		if got := time.Since(start); got != 10*time.Second {
			t.Errorf("call took %v of the bubble's time, want the attempt timeout's 10s and no wait", got)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.reconciles) != 1 || log.reconciles[0].Err != rec {
			t.Errorf("Reconcile hook: got %d events, want one carrying the returned error", len(log.reconciles))
		}
	})
}

func TestKeyedPOSTResetAfterWriteRequiresReconcile(t *testing.T) {
	srv := retryfusetest.NewServer(t, nil, retryfusetest.ResetBeforeRead())
	clk := newFakeClock()
	tr := newTransport(t, clk, &Transport{})

	req := newRequest(t, testCtx(t), http.MethodPost, srv.URL+"/payments", `{"amount":10}`)
	req.Header.Set(headerIdempotencyKey, "pay-2")
	_, _, err := do(tr, req)
	rec := wantReconcile(t, err, http.MethodPost, srv.URL+"/payments", "pay-2")
	if !errors.Is(rec.Cause, syscall.ECONNRESET) {
		t.Errorf("Cause: got %v, want one matching ECONNRESET", rec.Cause)
	}
	if got := srv.Requests(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
	if got := clk.Sleeps(); len(got) != 0 {
		t.Errorf("waits: got %v, want none", got)
	}
}

// runReusedThenClosed sends a GET that warms a connection, then a keyed
// POST that the server applies on that reused connection and answers by
// closing it. Later requests are answered: that is where a silent re-send
// would land. conns counts the connections the POST obtained.
func runReusedThenClosed(t *testing.T, rt http.RoundTripper) (srv *retryfusetest.Server, payments *retryfusetest.Recorder, conns []httptrace.GotConnInfo, err error) {
	t.Helper()
	payments = retryfusetest.NewRecorder()
	srv = retryfusetest.NewServer(t, payments.Wrap(nil), retryfusetest.Answer(), retryfusetest.ApplyThenClose())
	if _, _, err := do(rt, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/warm", "")); err != nil {
		t.Fatalf("warming GET: %v", err)
	}
	var mu sync.Mutex
	ctx := httptrace.WithClientTrace(testCtx(t), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, info)
	}})
	req := newRequest(t, ctx, http.MethodPost, srv.URL+"/payments", `{"amount":10}`)
	req.Header.Set(headerIdempotencyKey, "pay-3")
	_, _, err = do(rt, req)
	mu.Lock()
	defer mu.Unlock()
	return srv, payments, slices.Clone(conns), err
}

func TestKeyedPOSTDroppedOnReusedConnectionIsNotResent(t *testing.T) {
	t.Run("net/http alone re-sends it", func(t *testing.T) {
		// The hazard this package guards against: the bare base silently
		// re-sends a POST carrying the canonical Idempotency-Key. If this
		// stops holding, the subtest below no longer exercises it.
		base := cleanhttp.DefaultPooledTransport()
		t.Cleanup(base.CloseIdleConnections)
		_, payments, _, err := runReusedThenClosed(t, base)
		if err != nil {
			t.Fatalf("bare base: got error %v, want the re-sent request's 200", err)
		}
		if got := payments.Applied("pay-3"); got != 2 {
			t.Errorf("bare base: the POST applied %d times, want 2", got)
		}
	})
	t.Run("retryfuse does not", func(t *testing.T) {
		clk := newFakeClock()
		var log hookLog
		tr := newTransport(t, clk, &Transport{Hooks: log.hooks()})
		srv, payments, conns, err := runReusedThenClosed(t, tr)
		rec := wantReconcile(t, err, http.MethodPost, srv.URL+"/payments", "pay-3")
		if !errors.Is(rec.Cause, io.EOF) && !errors.Is(rec.Cause, syscall.ECONNRESET) {
			t.Errorf("Cause: got %v, want EOF or ECONNRESET", rec.Cause)
		}
		payments.ExactlyOnce(t, "pay-3")
		if len(conns) != 1 || !conns[0].Reused {
			t.Errorf("connections of the POST: got %+v, want 1, the reused one", conns)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.hidden) != 0 {
			t.Errorf("HiddenResend events: got %+v, want none", log.hidden)
		}
	})
}

func TestCallerDeadlineAfterWriteOfPOSTRequiresReconcile(t *testing.T) {
	for _, key := range []string{"", "pay-4"} {
		t.Run("key="+key, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := retryfusetest.NewTransport(nil, retryfusetest.StallBeforeApply())
				tr := newTransport(t, nil, &Transport{Base: api})

				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				req := newRequest(t, ctx, http.MethodPost, "http://payments.test/", `{"amount":10}`)
				if key != "" {
					req.Header.Set(headerIdempotencyKey, key)
				}
				_, _, err := do(tr, req)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("errors.Is(err, context.DeadlineExceeded): got false for %v, want true", err)
				}
				wantReconcile(t, err, http.MethodPost, "http://payments.test/", key)
				if got := api.Requests(); got != 1 {
					t.Errorf("requests seen by the server: got %d, want 1", got)
				}
			})
		})
	}
}

func TestPUTAfterPostWriteTimeoutIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		docs := retryfusetest.NewRecorder()
		api := retryfusetest.NewTransport(docs.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "stored")
		})), retryfusetest.StallBeforeApply())
		var log hookLog
		tr := newTransport(t, nil, &Transport{Base: api, Retry: RetryPolicy{AttemptTimeout: 10 * time.Second}, Hooks: log.hooks()})

		resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodPut, "http://docs.test/doc/1", "v2"))
		if err != nil {
			t.Fatalf("Do: got error %v, want nil", err)
		}
		if resp.StatusCode != 200 || string(body) != "stored" {
			t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "stored")
		}
		if got := api.Requests(); got != 2 {
			t.Errorf("requests seen by the server: got %d, want 2", got)
		}
		if got := docs.Bodies(""); len(got) != 1 || got[0] != "v2" {
			t.Errorf("bodies applied: got %q, want the retry's v2 alone", got)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.dones) != 2 || log.dones[0].Outcome != decide.OutcomeTimeout || log.dones[0].Phase != decide.PhasePostWrite {
			t.Errorf("AttemptDone events: got %+v, want the first a timeout in post_write", log.dones)
		}
	})
}

func TestGETAfterResetIsRetried(t *testing.T) {
	srv := retryfusetest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "fine")
	}), retryfusetest.ResetBeforeRead())
	clk := newFakeClock()
	tr := newTransport(t, clk, &Transport{})
	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil {
		t.Fatalf("Do: got error %v, want nil", err)
	}
	if resp.StatusCode != 200 || string(body) != "fine" {
		t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "fine")
	}
	if got := srv.Requests(); got != 2 {
		t.Errorf("requests seen by the server: got %d, want 2", got)
	}
	if got := len(clk.Sleeps()); got != 1 {
		t.Errorf("waits: got %d, want 1", got)
	}
}

func TestRefusedConnectionRetriedUnlessNotRepeatable(t *testing.T) {
	t.Run("GET retried", func(t *testing.T) {
		url := refusedURL(t)
		clk := newFakeClock()
		var log hookLog
		tr := newTransport(t, clk, &Transport{Retry: RetryPolicy{MaxAttempts: 3}, Hooks: log.hooks()})
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, url, ""))
		if resp != nil {
			t.Errorf("Do: got a response %d, want none", resp.StatusCode)
		}
		if !errors.Is(err, ErrAttemptsExhausted) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Do: got error %v, want one matching ErrAttemptsExhausted and ECONNREFUSED", err)
		}
		var re *RetryError
		if !errors.As(err, &re) || re.Attempts != 3 {
			t.Errorf("Do: got %v, want a *RetryError with 3 attempts", err)
		}
		if got := len(clk.Sleeps()); got != 2 {
			t.Errorf("waits: got %d, want 2", got)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.dones) != 3 {
			t.Fatalf("AttemptDone events: got %d, want 3", len(log.dones))
		}
		for i, d := range log.dones {
			if d.Phase != decide.PhasePreWrite || d.Outcome != decide.OutcomeFailure || !d.Retryable || d.Attempt != i+1 {
				t.Errorf("AttemptDone %d: got attempt %d phase %v outcome %v retryable %v; want attempt %d pre_write failure true",
					i, d.Attempt, d.Phase, d.Outcome, d.Retryable, i+1)
			}
		}
	})
	t.Run("POST without key not retried", func(t *testing.T) {
		url := refusedURL(t)
		clk := newFakeClock()
		tr := newTransport(t, clk, &Transport{Retry: RetryPolicy{MaxAttempts: 3}})
		_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, url, "payload"))
		if !errors.Is(err, ErrNotRepeatable) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Do: got error %v, want one matching ErrNotRepeatable and ECONNREFUSED", err)
		}
		var re *RetryError
		if !errors.As(err, &re) || re.Attempts != 1 {
			t.Errorf("Do: got %v, want a *RetryError with 1 attempt", err)
		}
		if got := clk.Sleeps(); len(got) != 0 {
			t.Errorf("waits: got %v, want none", got)
		}
	})
}

// A PUT sent on a keep-alive connection that the server closed while it
// lay idle gets net/http's "server closed idle connection": the server
// answered with EOF before any response. PUT is repeatable, so the call is
// repeated on a new connection. (net/http re-sends only GET, HEAD, OPTIONS
// and TRACE by itself in this case.)
func TestPUTOnConnectionClosedWhileIdleIsRetried(t *testing.T) {
	closeNow := make(chan struct{})
	closed := make(chan struct{})
	srv := newRawServer(t, func(s *rawServer, connNo int, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := s.readRequest(br); err != nil {
				return
			}
			if err := writeResponse(c, http.StatusOK, "ok"); err != nil {
				return
			}
			if connNo == 0 {
				select {
				case <-closeNow:
				case <-s.done:
				}
				_ = c.Close() // a FIN on an idle connection
				close(closed)
				return
			}
		}
	})
	tr := newTransport(t, nil, &Transport{Retry: RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	if resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPut, srv.URL()+"/a", "first")); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first PUT: got %v, %v; want 200", resp, err)
	}
	// The second PUT takes the idle connection; the server closes it just
	// then, and the client sees the close before it writes.
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			return
		}
		select {
		case <-closed:
			return
		default:
		}
		close(closeNow)
		<-closed
		time.Sleep(50 * time.Millisecond) // a bounded wait for the client's read of the FIN
	}}
	ctx := httptrace.WithClientTrace(testCtx(t), trace)
	resp, body, err := do(tr, newRequest(t, ctx, http.MethodPut, srv.URL()+"/b", "second"))
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("second PUT: got %v, %q, %v; want 200 ok on a new connection", resp, body, err)
	}
	if got := srv.connCount(); got != 2 {
		t.Errorf("connections: got %d, want 2", got)
	}
}
