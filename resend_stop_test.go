package retryfuse

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
)

// The tests of the base's own re-sends within one attempt: net/http
// re-sends a GET by itself, inside one RoundTrip, on each pooled connection
// the server has dropped, and on a new one after them. The Transport stops
// that once the attempt's share of MaxAttempts and of the budget is spent.

// warmPooledConns is how many pooled connections the server drops.
const warmPooledConns = 32

// newDroppingServer starts a server that answers the first request on each
// connection and, on the next request of that connection, reads it and
// closes the connection without answering. The first n requests are held
// until all n have arrived, so that a client sending them at once opens n
// connections.
func newDroppingServer(t *testing.T, n int) *rawServer {
	t.Helper()
	var (
		firsts atomic.Int32
		warm   = make(chan struct{})
	)
	return newRawServer(t, func(s *rawServer, _ int, c net.Conn, br *bufio.Reader) {
		if _, err := s.readRequest(br); err != nil {
			return
		}
		if firsts.Add(1) == int32(n) {
			close(warm)
		}
		select {
		case <-warm:
		case <-s.done:
			return
		}
		if writeResponse(c, http.StatusOK, "ok") != nil {
			return
		}
		_, _ = s.readRequest(br) // read, and dropped with the connection
	})
}

// warmPool sends n GETs at once through base, so that it pools n
// connections to srv.
func warmPool(t *testing.T, base *http.Transport, srv *rawServer, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodGet, srv.URL()+"/warm", nil)
			if err == nil {
				var resp *http.Response
				if resp, err = base.RoundTrip(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					err = resp.Body.Close()
				}
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("warming the pool: %v", err)
		}
	}
	if got := srv.connCount(); got != n {
		t.Fatalf("warming the pool: the server saw %d connections, want %d", got, n)
	}
}

// newPooledBase returns a net/http Transport that keeps up to n+1 idle
// connections per host, closed when the test ends.
func newPooledBase(t *testing.T, n int) *http.Transport {
	base := &http.Transport{MaxIdleConnsPerHost: n + 1}
	t.Cleanup(base.CloseIdleConnections)
	return base
}

// resendCase is one way of sending the attempt: with a context that
// cannot be cancelled (the default), or one that can (an AttemptTimeout,
// the first branch of a hedged group, on a goroutine of its own).
type resendCase struct {
	name string
	set  func(*Transport)
}

var resendCases = []resendCase{
	{"default", func(*Transport) {}},
	{"AttemptTimeout", func(tr *Transport) { tr.Retry.AttemptTimeout = time.Hour }},
	{"hedged", func(tr *Transport) { tr.Hedge.Max, tr.Hedge.Delay = 1, time.Hour }},
}

// clockFor returns the clock of a Transport for rc: the fake one, except
// for a hedged group, whose hedge delay runs on the real clock so that no
// second branch starts within the test.
func (rc resendCase) clockFor() *fakeClock {
	if rc.name == "hedged" {
		return nil
	}
	return newFakeClock()
}

// stoppedGET sends one GET through tr over a pool of dropped connections
// and returns the requests the server received for it, and its error.
func stoppedGET(t *testing.T, tr *Transport, srv *rawServer) (int, error) {
	t.Helper()
	before := len(srv.requests())
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL()+"/item", ""))
	if resp != nil {
		t.Errorf("got a response, status %d; want none", resp.StatusCode)
	}
	return len(srv.requests()) - before, err
}

// checkStopped checks the error of a GET whose base's re-sends were
// stopped for reason, and what the hooks were told.
func checkStopped(t *testing.T, err, reason error, log *hookLog, sent int) {
	t.Helper()
	var re *RetryError
	switch {
	case !errors.As(err, &re):
		t.Fatalf("error: got %v, want a *RetryError", err)
	case !errors.Is(err, reason):
		t.Errorf("error: got %v, want one that matches %v", err, reason)
	case !errors.Is(re.Last, errResendStopped):
		t.Errorf("RetryError.Last: got %v, want the error saying the base's re-send was stopped", re.Last)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.dones) != 1 || log.dones[0].Connections != sent || !errors.Is(log.dones[0].Err, errResendStopped) {
		t.Errorf("AttemptDone: got %+v, want one with Connections %d and the stop's error", log.dones, sent)
	}
	if len(log.hidden) != 1 || log.hidden[0].Connections != sent {
		t.Errorf("HiddenResend: got %+v, want one with Connections %d", log.hidden, sent)
	}
	if len(log.giveUps) != 1 || !errors.Is(log.giveUps[0].Reason, reason) {
		t.Errorf("GiveUp: got %+v, want one with Reason %v", log.giveUps, reason)
	}
}

// With MaxAttempts 3, a GET over a pool of connections the server has
// dropped reaches the server 3 times, not once per pooled connection and
// once more on a new one.
func TestBaseResendsStopWhenAttemptsAreSpent(t *testing.T) {
	for _, rc := range resendCases {
		t.Run(rc.name, func(t *testing.T) {
			srv := newDroppingServer(t, warmPooledConns)
			base := newPooledBase(t, warmPooledConns)
			warmPool(t, base, srv, warmPooledConns)
			var log hookLog
			tr := &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 3, Budget: budget.Unlimited()}, Hooks: log.hooks()}
			rc.set(tr)
			newTransport(t, rc.clockFor(), tr)
			got, err := stoppedGET(t, tr, srv)
			if got != 3 {
				t.Errorf("requests the server received: got %d, want 3 (MaxAttempts)", got)
			}
			checkStopped(t, err, ErrAttemptsExhausted, &log, 3)
			if rc.name != "default" && srv.connCount() != warmPooledConns {
				// The attempt's context is cancelled: net/http goes no
				// further, and dials no new connection.
				t.Errorf("connections the server accepted: got %d, want %d (no new one)", srv.connCount(), warmPooledConns)
			}
		})
	}
}

// With a budget that grants one retry, the same GET reaches the server
// twice: the re-send that the budget refuses is not sent.
func TestBaseResendsStopAtTheBudgetsRefusal(t *testing.T) {
	for _, rc := range resendCases {
		t.Run(rc.name, func(t *testing.T) {
			srv := newDroppingServer(t, warmPooledConns)
			base := newPooledBase(t, warmPooledConns)
			warmPool(t, base, srv, warmPooledConns)
			budget, err := budget.NewTokenBucket(budget.TokenBucketConfig{Capacity: 1, Refill: 1, Interval: 24 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			var log hookLog
			tr := &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 10, Budget: budget}, Hooks: log.hooks()}
			rc.set(tr)
			newTransport(t, rc.clockFor(), tr)
			got, err := stoppedGET(t, tr, srv)
			if got != 2 {
				t.Errorf("requests the server received: got %d, want 2 (the first, and the one retry the budget grants)", got)
			}
			checkStopped(t, err, ErrBudgetExhausted, &log, 2)
			if s := budget.Snapshot(); s.Retries != 1 || s.Refused != 1 {
				t.Errorf("budget: got %d retries granted and %d refused, want 1 and 1", s.Retries, s.Refused)
			}
		})
	}
}

// Within MaxAttempts, the base's re-sends go ahead as before, and are
// counted: the GET succeeds on a new connection after every pooled one.
func TestBaseResendsWithinTheShareStillHappen(t *testing.T) {
	for _, rc := range resendCases {
		t.Run(rc.name, func(t *testing.T) {
			srv := newDroppingServer(t, warmPooledConns)
			base := newPooledBase(t, warmPooledConns)
			warmPool(t, base, srv, warmPooledConns)
			var log hookLog
			tr := &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: warmPooledConns + 1, Budget: budget.Unlimited()}, Hooks: log.hooks()}
			rc.set(tr)
			newTransport(t, rc.clockFor(), tr)
			before := len(srv.requests())
			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL()+"/item", ""))
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Fatalf("GET: got %v, %q, %v; want 200 ok", resp, body, err)
			}
			want := warmPooledConns + 1
			if got := len(srv.requests()) - before; got != want {
				t.Errorf("requests the server received: got %d, want %d (one per pooled connection, one on a new one)", got, want)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.hidden) != 1 || log.hidden[0].Connections != want {
				t.Errorf("HiddenResend: got %+v, want one with Connections %d", log.hidden, want)
			}
			if len(log.dones) != 1 || log.dones[0].Connections != want {
				t.Errorf("AttemptDone: got %+v, want one with Connections %d", log.dones, want)
			}
		})
	}
}

// The branches of a hedged group, sent at once, share the attempts left:
// with MaxAttempts 3, the two branches and their re-sends reach the server
// 3 times in all, whichever re-sends first.
func TestHedgedBranchesShareTheAttemptsOfTheirResends(t *testing.T) {
	srv := newDroppingServer(t, warmPooledConns)
	base := newPooledBase(t, warmPooledConns)
	warmPool(t, base, srv, warmPooledConns)
	var log hookLog
	// On the fake clock the hedge delay passes at once.
	tr := newTransport(t, newFakeClock(), &Transport{
		Base: base,
		Retry: RetryPolicy{
			MaxAttempts: 3,
			Budget:      budget.Unlimited(),
		},
		Hedge: HedgePolicy{
			Max:   1,
			Delay: time.Millisecond,
		},
		Hooks: log.hooks(),
	})
	got, err := stoppedGET(t, tr, srv)
	if got != 3 {
		t.Errorf("requests the server received: got %d, want 3 (MaxAttempts)", got)
	}
	if !errors.Is(err, ErrAttemptsExhausted) {
		t.Errorf("error: got %v, want one that matches ErrAttemptsExhausted", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	conns := 0
	for _, d := range log.dones {
		conns += d.Connections
	}
	if conns != 3 {
		t.Errorf("AttemptDone: got %+v, want Connections adding up to 3", log.dones)
	}
}

// writeFailingConn is a connection whose writes fail, writing nothing,
// once broken is set: the peer reset it while it was pooled.
type writeFailingConn struct {
	net.Conn
	broken *atomic.Bool
}

func (c writeFailingConn) Write(p []byte) (int, error) {
	if c.broken.Load() {
		return 0, syscall.EPIPE
	}
	return c.Conn.Write(p)
}

// A POST without an idempotency key is re-sent by net/http only when
// nothing of it was written. Stopped when the attempts are spent, it ends
// as a definite failure that attempts ran out on, not as a write that may
// have taken effect.
func TestStoppedResendOfAWriteIsNoUncertainWrite(t *testing.T) {
	srv := newDroppingServer(t, warmPooledConns)
	var broken atomic.Bool
	var d net.Dialer
	base := newPooledBase(t, warmPooledConns)
	base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeFailingConn{Conn: c, broken: &broken}, nil
	}
	warmPool(t, base, srv, warmPooledConns)
	broken.Store(true)
	var log hookLog
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 2, Budget: budget.Unlimited()}, Hooks: log.hooks()})
	before := len(srv.requests())
	_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, srv.URL()+"/orders", "order"))
	if got := len(srv.requests()) - before; got != 0 {
		t.Errorf("requests the server received: got %d, want 0 (nothing was written)", got)
	}
	if errors.Is(err, ErrReconcileRequired) || !errors.Is(err, ErrAttemptsExhausted) {
		t.Errorf("error: got %v, want one that matches ErrAttemptsExhausted and not ErrReconcileRequired", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.dones) != 1 || log.dones[0].Connections != 2 || log.dones[0].Phase != decide.PhasePreWrite {
		t.Errorf("AttemptDone: got %+v, want one with Connections 2 before the write", log.dones)
	}
}
