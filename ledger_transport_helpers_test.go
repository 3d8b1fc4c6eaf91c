package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Helpers of the key ledger's transport tests (ledger_transport_test.go):
// a virtual clock, an orders server scripted per arrival, and calls.

// callWait bounds every wait on a real socket or goroutine in these tests.
const callWait = 10 * time.Second

// heldAttemptTimeout cuts an attempt whose response the server holds back.
// It leaves a loaded machine time to run the handler (to apply the order)
// before the client gives up; the tests that wait for it run in parallel.
const heldAttemptTimeout = 500 * time.Millisecond

// newLedgerOnFakeClock returns a MemoryLedger on a virtual clock of its own.
func newLedgerOnFakeClock(t *testing.T, cfg MemoryLedgerConfig) (*MemoryLedger, *fakeClock) {
	t.Helper()
	l, err := NewMemoryLedger(cfg)
	require.NoError(t, err)
	clk := newFakeClock()
	l.now = clk.Now
	return l, clk
}

// newLedgerClient returns a client over a Transport with ledger l, no retry
// budget and a virtual clock; tune adjusts the Transport before first use.
func newLedgerClient(t *testing.T, l Ledger, tune func(*Transport)) (*http.Client, *Transport) {
	t.Helper()
	clk := newFakeClock()
	tr := &Transport{
		Ledger: l,
		Budget: UnlimitedBudget{},
		now:    clk.Now,
		sleep:  clk.Sleep,
		randN:  func(n int64) int64 { return n / 2 },
	}
	if tune != nil {
		tune(tr)
	}
	require.NoError(t, tr.Validate())
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, tr
}

// callCtx is the caller's context of a test: generous, so that a hang fails
// the test instead of stalling the run.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callWait)
	t.Cleanup(cancel)
	return ctx
}

// newKeyedPOST builds a POST (with GetBody, so replayable) carrying key.
func newKeyedPOST(t *testing.T, ctx context.Context, url, key, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	return req
}

// postKeyed sends a keyed POST through c and returns its response, with the
// body read and closed, or its error.
func postKeyed(t *testing.T, c *http.Client, url, key, body string) (*http.Response, string, error) {
	t.Helper()
	resp, err := c.Do(newKeyedPOST(t, callCtx(t), url, key, body))
	if err != nil {
		return nil, "", err
	}
	b, rerr := io.ReadAll(resp.Body)
	require.NoError(t, rerr)
	require.NoError(t, resp.Body.Close())
	return resp, string(b), nil
}

// orderStep is what the orders server does with one POST.
type orderStep int

const (
	orderApply          orderStep = iota // apply the order, answer 201 with it
	orderApplyThenStall                  // apply it, then never answer: the response is lost
	orderStallNoApply                    // never answer and never apply
	orderUnavailable                     // answer 503 without applying
	orderReject                          // answer 422 without applying
	orderNoContent                       // apply, answer 204 with no body
	orderHold                            // wait for release, then apply and answer 201
)

// ordersServer is a loopback orders API. POST /orders applies an order under
// its Idempotency-Key; script says what to do with the n-th POST (from 1).
// GET /orders?key=K looks an order up: 200 with it, or 404.
type ordersServer struct {
	*httptest.Server
	script  func(n int) orderStep
	posts   atomic.Int32  // POSTs that reached the handler
	gets    atomic.Int32  // lookups that reached the handler
	arrived chan int      // the number of each POST, as it arrives
	release chan struct{} // closed to let held POSTs go on
	gone    chan struct{} // closed at cleanup: stalled handlers return
	getHook func(n int, w http.ResponseWriter) bool

	mu      sync.Mutex
	applied map[string]int    // effects applied, per key
	orders  map[string]string // the order, per key
}

func newOrdersServer(t *testing.T, script func(n int) orderStep) *ordersServer {
	t.Helper()
	s := &ordersServer{
		script:  script,
		arrived: make(chan int, 64),
		release: make(chan struct{}),
		gone:    make(chan struct{}),
		applied: map[string]int{},
		orders:  map[string]string{},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.gone) }) // runs first: stalled handlers return before Close waits for them
	return s
}

func always(step orderStep) func(int) orderStep { return func(int) orderStep { return step } }

// firstThenApply does step with the first POST and applies every later one.
func firstThenApply(step orderStep) func(int) orderStep {
	return func(n int) orderStep {
		if n == 1 {
			return step
		}
		return orderApply
	}
}

func (s *ordersServer) url() string { return s.URL + "/orders" }

func (s *ordersServer) effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[key]
}

func (s *ordersServer) apply(key, item string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied[key]++
	if _, ok := s.orders[key]; !ok {
		s.orders[key] = fmt.Sprintf(`{"id":"ord-%d","key":%q,"item":%q}`, len(s.orders)+1, key, item)
	}
	return s.orders[key]
}

func (s *ordersServer) stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.gone:
	}
}

func (s *ordersServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body) // read whole, so that a client's hang-up cancels r.Context()
	if r.Method == http.MethodGet {
		n := int(s.gets.Add(1))
		if s.getHook != nil && s.getHook(n, w) {
			return
		}
		s.mu.Lock()
		order, ok := s.orders[r.URL.Query().Get("key")]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, order)
		return
	}
	n := int(s.posts.Add(1))
	s.arrived <- n
	key := r.Header.Get(HeaderIdempotencyKey)
	switch s.script(n) {
	case orderApplyThenStall:
		s.apply(key, string(body))
		s.stall(r)
		return
	case orderStallNoApply:
		s.stall(r)
		return
	case orderUnavailable:
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	case orderReject:
		w.Header().Set("X-Reason", "item-unknown")
		http.Error(w, `{"error":"unknown item"}`, http.StatusUnprocessableEntity)
		return
	case orderNoContent:
		s.apply(key, string(body))
		w.WriteHeader(http.StatusNoContent)
		return
	case orderHold:
		select {
		case <-s.release:
		case <-s.gone:
			return
		}
	}
	order := s.apply(key, string(body))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Order-Key", key)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, order)
}

// waitArrived waits for the n-th POST to reach the server.
func (s *ordersServer) waitArrived(t *testing.T, n int) {
	t.Helper()
	for {
		select {
		case got := <-s.arrived:
			if got == n {
				return
			}
		case <-time.After(callWait):
			t.Fatalf("POST number %d never reached the server", n)
		}
	}
}

// callReply is the result of a call made on another goroutine.
type callReply struct {
	resp *http.Response
	err  error
}

func doAsync(c *http.Client, req *http.Request) <-chan callReply {
	ch := make(chan callReply, 1)
	go func() {
		resp, err := c.Do(req)
		ch <- callReply{resp, err}
	}()
	return ch
}

func receiveReply(t *testing.T, ch <-chan callReply) callReply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(callWait):
		t.Fatal("a call did not return")
		return callReply{}
	}
}

// readAndClose reads and closes a response body.
func readAndClose(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

// reconcileErrOf asserts that err is a *ReconcileRequiredError (through
// http.Client's wrapping) for a POST under key, and returns it.
func reconcileErrOf(t *testing.T, err error, key string) *ReconcileRequiredError {
	t.Helper()
	require.Error(t, err, "got no error, want a *ReconcileRequiredError")
	var rec *ReconcileRequiredError
	require.Truef(t, errors.As(err, &rec), "got %v (%T), want a *ReconcileRequiredError", err, err)
	assert.Truef(t, errors.Is(err, ErrReconcileRequired), "errors.Is(%v, ErrReconcileRequired) = false, want true", err)
	assert.Equalf(t, http.MethodPost, rec.Method, "got Method %q, want POST", rec.Method)
	assert.Equalf(t, key, rec.IdempotencyKey, "got IdempotencyKey %q, want %q", rec.IdempotencyKey, key)
	return rec
}
