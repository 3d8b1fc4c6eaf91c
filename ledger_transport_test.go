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

// The key ledger seen through http.Client.Do against real loopback servers:
// concurrent duplicates, conflicting bodies, stored results, uncertain writes
// and an unavailable ledger.

// lgWait bounds every wait on a real socket or goroutine in these tests.
const lgWait = 10 * time.Second

// lgAttemptTimeout cuts an attempt whose response the server holds back.
// It leaves a loaded machine time to run the handler (to apply the order)
// before the client gives up; the tests that wait for it run in parallel.
const lgAttemptTimeout = 500 * time.Millisecond

// lgClock is a virtual clock: it stands still until sleep or advance moves it.
type lgClock struct {
	mu sync.Mutex
	t  time.Time
}

func newLgClock() *lgClock { return &lgClock{t: time.Now()} }

func (c *lgClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *lgClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *lgClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.advance(d)
	return nil
}

// lgLedger returns a MemoryLedger on a virtual clock of its own.
func lgLedger(t *testing.T, cfg MemoryLedgerConfig) (*MemoryLedger, *lgClock) {
	t.Helper()
	l, err := NewMemoryLedger(cfg)
	require.NoError(t, err)
	clk := newLgClock()
	l.now = clk.now
	return l, clk
}

// lgClient returns a client over a Transport with ledger l, no retry
// budget and a virtual clock; tune adjusts the Transport before first use.
func lgClient(t *testing.T, l Ledger, tune func(*Transport)) (*http.Client, *Transport) {
	t.Helper()
	clk := newLgClock()
	tr := &Transport{
		Ledger: l,
		Budget: UnlimitedBudget{},
		now:    clk.now,
		sleep:  clk.sleep,
		randN:  func(n int64) int64 { return n / 2 },
	}
	if tune != nil {
		tune(tr)
	}
	require.NoError(t, tr.Validate())
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, tr
}

// lgCtx is the caller's context of a test: generous, so that a hang fails
// the test instead of stalling the run.
func lgCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), lgWait)
	t.Cleanup(cancel)
	return ctx
}

// lgRequest builds a POST (with GetBody, so replayable) carrying key.
func lgRequest(t *testing.T, ctx context.Context, url, key, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	return req
}

// lgPost sends a keyed POST through c and returns its response, with the
// body read and closed, or its error.
func lgPost(t *testing.T, c *http.Client, url, key, body string) (*http.Response, string, error) {
	t.Helper()
	resp, err := c.Do(lgRequest(t, lgCtx(t), url, key, body))
	if err != nil {
		return nil, "", err
	}
	b, rerr := io.ReadAll(resp.Body)
	require.NoError(t, rerr)
	require.NoError(t, resp.Body.Close())
	return resp, string(b), nil
}

// lgStep is what the orders server does with one POST.
type lgStep int

const (
	lgApply          lgStep = iota // apply the order, answer 201 with it
	lgApplyThenStall               // apply it, then never answer: the response is lost
	lgStallNoApply                 // never answer and never apply
	lgUnavailable                  // answer 503 without applying
	lgReject                       // answer 422 without applying
	lgNoContent                    // apply, answer 204 with no body
	lgHold                         // wait for release, then apply and answer 201
)

// lgOrders is a loopback orders API. POST /orders applies an order under
// its Idempotency-Key; script says what to do with the n-th POST (from 1).
// GET /orders?key=K looks an order up: 200 with it, or 404.
type lgOrders struct {
	*httptest.Server
	script  func(n int) lgStep
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

func lgServe(t *testing.T, script func(n int) lgStep) *lgOrders {
	t.Helper()
	s := &lgOrders{
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

func lgAlways(step lgStep) func(int) lgStep { return func(int) lgStep { return step } }

// lgFirst does step with the first POST and applies every later one.
func lgFirst(step lgStep) func(int) lgStep {
	return func(n int) lgStep {
		if n == 1 {
			return step
		}
		return lgApply
	}
}

func (s *lgOrders) url() string { return s.URL + "/orders" }

func (s *lgOrders) effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[key]
}

func (s *lgOrders) apply(key, item string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied[key]++
	if _, ok := s.orders[key]; !ok {
		s.orders[key] = fmt.Sprintf(`{"id":"ord-%d","key":%q,"item":%q}`, len(s.orders)+1, key, item)
	}
	return s.orders[key]
}

func (s *lgOrders) stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.gone:
	}
}

func (s *lgOrders) serve(w http.ResponseWriter, r *http.Request) {
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
	case lgApplyThenStall:
		s.apply(key, string(body))
		s.stall(r)
		return
	case lgStallNoApply:
		s.stall(r)
		return
	case lgUnavailable:
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	case lgReject:
		w.Header().Set("X-Reason", "item-unknown")
		http.Error(w, `{"error":"unknown item"}`, http.StatusUnprocessableEntity)
		return
	case lgNoContent:
		s.apply(key, string(body))
		w.WriteHeader(http.StatusNoContent)
		return
	case lgHold:
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
func (s *lgOrders) waitArrived(t *testing.T, n int) {
	t.Helper()
	for {
		select {
		case got := <-s.arrived:
			if got == n {
				return
			}
		case <-time.After(lgWait):
			t.Fatalf("POST number %d never reached the server", n)
		}
	}
}

// lgReply is the result of a call made on another goroutine.
type lgReply struct {
	resp *http.Response
	err  error
}

func lgGo(c *http.Client, req *http.Request) <-chan lgReply {
	ch := make(chan lgReply, 1)
	go func() {
		resp, err := c.Do(req)
		ch <- lgReply{resp, err}
	}()
	return ch
}

func lgReceive(t *testing.T, ch <-chan lgReply) lgReply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(lgWait):
		t.Fatal("a call did not return")
		return lgReply{}
	}
}

// lgReadAll reads and closes a response body.
func lgReadAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

// lgReconcileErr asserts that err is a *ReconcileRequiredError (through
// http.Client's wrapping) for a POST under key, and returns it.
func lgReconcileErr(t *testing.T, err error, key string) *ReconcileRequiredError {
	t.Helper()
	require.Error(t, err, "got no error, want a *ReconcileRequiredError")
	var rec *ReconcileRequiredError
	require.Truef(t, errors.As(err, &rec), "got %v (%T), want a *ReconcileRequiredError", err, err)
	assert.Truef(t, errors.Is(err, ErrReconcileRequired), "errors.Is(%v, ErrReconcileRequired) = false, want true", err)
	assert.Equalf(t, http.MethodPost, rec.Method, "got Method %q, want POST", rec.Method)
	assert.Equalf(t, key, rec.IdempotencyKey, "got IdempotencyKey %q, want %q", rec.IdempotencyKey, key)
	return rec
}

func TestLedgerConcurrentDuplicatesOneSent(t *testing.T) {
	const callers = 32
	ledger, _ := lgLedger(t, MemoryLedgerConfig{})
	srv := lgServe(t, lgAlways(lgHold))
	client, _ := lgClient(t, ledger, nil)

	reqs := make([]*http.Request, callers)
	for i := range reqs {
		reqs[i] = lgRequest(t, lgCtx(t), srv.url(), "order-1", `{"item":"book"}`)
	}
	start := make(chan struct{})
	replies := make(chan lgReply, callers)
	for _, req := range reqs {
		go func() {
			<-start
			resp, err := client.Do(req)
			replies <- lgReply{resp, err}
		}()
	}
	close(start)

	srv.waitArrived(t, 1)
	// Every duplicate is refused while the first call is held at the server.
	for i := range callers - 1 {
		r := lgReceive(t, replies)
		if r.resp != nil {
			lgReadAll(t, r.resp)
			t.Fatalf("duplicate %d: got a response %d, want ErrDuplicateInFlight", i, r.resp.StatusCode)
		}
		require.Truef(t, errors.Is(r.err, ErrDuplicateInFlight), "duplicate %d: got %v, want ErrDuplicateInFlight", i, r.err)
	}
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())

	close(srv.release)
	first := lgReceive(t, replies)
	require.NoError(t, first.err)
	firstBody := lgReadAll(t, first.resp)
	require.Equalf(t, http.StatusCreated, first.resp.StatusCode, "got status %d, want 201", first.resp.StatusCode)

	resp, body, err := lgPost(t, client, srv.url(), "order-1", `{"item":"book"}`)
	require.NoError(t, err)
	assert.Equalf(t, first.resp.StatusCode, resp.StatusCode, "replay: got status %d, want %d", resp.StatusCode, first.resp.StatusCode)
	assert.Equalf(t, first.resp.Header, resp.Header, "replay: got header %v, want %v", resp.Header, first.resp.Header)
	assert.Equalf(t, firstBody, body, "replay: got body %q, want %q", body, firstBody)
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1 (the replay must not send)", srv.posts.Load())
	assert.Equalf(t, 1, srv.effects("order-1"), "got %d effects, want 1", srv.effects("order-1"))
}

func TestLedgerConflictingBodyRefused(t *testing.T) {
	t.Parallel()
	const key = "order-2"
	conflict := func(t *testing.T, client *http.Client, srv *lgOrders) {
		t.Helper()
		before := srv.posts.Load()
		resp, _, err := lgPost(t, client, srv.url(), key, `{"item":"other"}`)
		require.Nilf(t, resp, "got a response, want ErrIdempotencyConflict")
		assert.Truef(t, errors.Is(err, ErrIdempotencyConflict), "got %v, want ErrIdempotencyConflict", err)
		assert.Equalf(t, before, srv.posts.Load(), "got %d POSTs at the server, want %d: a conflict must not be sent", srv.posts.Load(), before)
	}

	t.Run("in_flight", func(t *testing.T) {
		ledger, _ := lgLedger(t, MemoryLedgerConfig{})
		srv := lgServe(t, lgAlways(lgHold))
		client, _ := lgClient(t, ledger, nil)
		held := lgGo(client, lgRequest(t, lgCtx(t), srv.url(), key, `{"item":"book"}`))
		srv.waitArrived(t, 1)
		conflict(t, client, srv)
		close(srv.release)
		r := lgReceive(t, held)
		require.NoError(t, r.err)
		lgReadAll(t, r.resp)
	})
	t.Run("completed", func(t *testing.T) {
		ledger, _ := lgLedger(t, MemoryLedgerConfig{})
		srv := lgServe(t, lgAlways(lgApply))
		client, _ := lgClient(t, ledger, nil)
		_, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
		require.NoError(t, err)
		conflict(t, client, srv)
	})
	t.Run("uncertain", func(t *testing.T) {
		ledger, _ := lgLedger(t, MemoryLedgerConfig{})
		srv := lgServe(t, lgAlways(lgApplyThenStall))
		client, _ := lgClient(t, ledger, func(tr *Transport) { tr.AttemptTimeout = lgAttemptTimeout })
		_, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
		lgReconcileErr(t, err, key)
		conflict(t, client, srv)
	})
}

func TestLedgerStoredResultReplayed(t *testing.T) {
	cases := []struct {
		name    string
		step    lgStep
		status  int
		read    bool          // read the body before closing it
		timeout time.Duration // AttemptTimeout
	}{
		{"created", lgApply, http.StatusCreated, true, time.Second},
		{"client_error", lgReject, http.StatusUnprocessableEntity, true, 0},
		// A response without content is whole as it comes: closing it
		// unread, as callers do, must not lose the result.
		{"no_content_closed_unread", lgNoContent, http.StatusNoContent, false, 0},
		{"no_content_closed_unread_attempt_timeout", lgNoContent, http.StatusNoContent, false, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ledger, _ := lgLedger(t, MemoryLedgerConfig{})
			srv := lgServe(t, lgAlways(tc.step))
			client, _ := lgClient(t, ledger, func(tr *Transport) { tr.AttemptTimeout = tc.timeout })
			first, err := client.Do(lgRequest(t, lgCtx(t), srv.url(), "k-"+tc.name, `{"item":"book"}`))
			require.NoError(t, err)
			require.Equalf(t, tc.status, first.StatusCode, "got status %d, want %d", first.StatusCode, tc.status)
			firstBody := ""
			if tc.read {
				firstBody = lgReadAll(t, first)
			} else {
				require.NoError(t, first.Body.Close())
			}

			resp, body, err := lgPost(t, client, srv.url(), "k-"+tc.name, `{"item":"book"}`)
			require.NoErrorf(t, err, "replay: got %v, want the stored result", err)
			assert.Equalf(t, tc.status, resp.StatusCode, "replay: got status %d, want %d", resp.StatusCode, tc.status)
			assert.Equalf(t, first.Header, resp.Header, "replay: got header %v, want %v", resp.Header, first.Header)
			assert.Equalf(t, firstBody, body, "replay: got body %q, want %q", body, firstBody)
			assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
		})
	}
}

func TestLedgerResultNotStoredAsksToReconcile(t *testing.T) {
	cases := []struct {
		name   string
		ledger MemoryLedgerConfig
		tune   func(*Transport)
		read   func(io.Reader) error
	}{
		{
			name: "over_transport_max_stored_body",
			tune: func(tr *Transport) { tr.MaxStoredBody = 8 },
			read: func(r io.Reader) error { _, err := io.ReadAll(r); return err },
		},
		{
			name:   "over_ledger_max_stored_body",
			ledger: MemoryLedgerConfig{MaxStoredBody: 8},
			read:   func(r io.Reader) error { _, err := io.ReadAll(r); return err },
		},
		{
			name: "closed_before_eof",
			read: func(r io.Reader) error { _, err := io.ReadFull(r, make([]byte, 3)); return err },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const key = "order-3"
			ledger, _ := lgLedger(t, tc.ledger)
			srv := lgServe(t, lgAlways(lgApply))
			client, _ := lgClient(t, ledger, tc.tune)
			first, err := client.Do(lgRequest(t, lgCtx(t), srv.url(), key, `{"item":"a book with a long title"}`))
			require.NoError(t, err)
			require.NoError(t, tc.read(first.Body))
			require.NoError(t, first.Body.Close())

			resp, _, err := lgPost(t, client, srv.url(), key, `{"item":"a book with a long title"}`)
			require.Nilf(t, resp, "got a response, want a *ReconcileRequiredError")
			rec := lgReconcileErr(t, err, key)
			assert.Truef(t, errors.Is(rec.Cause, ErrResultNotStored), "got Cause %v, want ErrResultNotStored", rec.Cause)
			assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
		})
	}
}

func TestLedgerUncertainWriteHoldsKeyUntilTTL(t *testing.T) {
	t.Parallel()
	const (
		key = "order-4"
		ttl = 10 * time.Minute
	)
	ledger, ledgerClock := lgLedger(t, MemoryLedgerConfig{TTL: ttl})
	srv := lgServe(t, lgFirst(lgApplyThenStall))
	client, _ := lgClient(t, ledger, func(tr *Transport) { tr.AttemptTimeout = lgAttemptTimeout })

	resp, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.Nil(t, resp)
	rec := lgReconcileErr(t, err, key)
	assert.Truef(t, errors.Is(rec.Cause, ErrAttemptTimeout), "got Cause %v, want ErrAttemptTimeout", rec.Cause)
	assert.Equalf(t, PhasePostWrite, rec.Phase, "got Phase %v, want post_write", rec.Phase)
	assert.Equalf(t, 1, rec.Attempts, "got Attempts %d, want 1: an uncertain write is never replayed", rec.Attempts)
	assert.Equalf(t, 1, srv.effects(key), "got %d effects, want 1", srv.effects(key))

	for _, advance := range []time.Duration{0, ttl - time.Second} {
		ledgerClock.advance(advance)
		resp, _, err = lgPost(t, client, srv.url(), key, `{"item":"book"}`)
		require.Nil(t, resp)
		rec = lgReconcileErr(t, err, key)
		assert.Truef(t, errors.Is(rec.Cause, ErrEarlierUncertain), "got Cause %v, want ErrEarlierUncertain", rec.Cause)
		assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1: a held key must not be sent", srv.posts.Load())
	}

	ledgerClock.advance(time.Second) // the TTL has passed: the key is free
	// Sent through a second Transport sharing the ledger: the POST is
	// answered at once, and a starved handler must not look like a timeout.
	untimed, _ := lgClient(t, ledger, nil)
	resp, _, err = lgPost(t, untimed, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "after the TTL: got %v, want the request sent", err)
	assert.Equalf(t, http.StatusCreated, resp.StatusCode, "got status %d, want 201", resp.StatusCode)
	assert.Equalf(t, int32(2), srv.posts.Load(), "got %d POSTs at the server, want 2", srv.posts.Load())
}

func TestLedgerDefiniteFailureFreesKey(t *testing.T) {
	const key = "order-5"
	ledger, _ := lgLedger(t, MemoryLedgerConfig{})
	srv := lgServe(t, func(n int) lgStep {
		if n <= 2 {
			return lgUnavailable
		}
		return lgApply
	})
	client, _ := lgClient(t, ledger, func(tr *Transport) { tr.MaxAttempts = 2 })

	resp, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "got %v, want the final 503 as a response", err)
	assert.Equalf(t, http.StatusServiceUnavailable, resp.StatusCode, "got status %d, want 503", resp.StatusCode)
	assert.Equalf(t, int32(2), srv.posts.Load(), "got %d POSTs at the server, want 2", srv.posts.Load())

	resp, _, err = lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "got %v, want the key free and the request sent", err)
	assert.Equalf(t, http.StatusCreated, resp.StatusCode, "got status %d, want 201", resp.StatusCode)
	assert.Equalf(t, int32(3), srv.posts.Load(), "got %d POSTs at the server, want 3", srv.posts.Load())
}

// lgBrokenLedger cannot be reached.
type lgBrokenLedger struct{ err error }

func (l lgBrokenLedger) Begin(context.Context, string, Fingerprint) (LedgerClaim, error) {
	return LedgerClaim{}, l.err
}
func (l lgBrokenLedger) Complete(context.Context, string, string, *StoredResponse) error {
	return l.err
}
func (l lgBrokenLedger) Release(context.Context, string, string) error   { return l.err }
func (l lgBrokenLedger) Uncertain(context.Context, string, string) error { return l.err }

func TestLedgerUnavailableSendsNothing(t *testing.T) {
	down := errors.New("ledger store: connection refused")
	srv := lgServe(t, lgAlways(lgApply))
	var (
		mu     sync.Mutex
		events []EvidenceUnavailableInfo
	)
	client, _ := lgClient(t, lgBrokenLedger{down}, func(tr *Transport) {
		tr.Hooks.EvidenceUnavailable = func(i EvidenceUnavailableInfo) {
			mu.Lock()
			events = append(events, i)
			mu.Unlock()
		}
	})

	resp, _, err := lgPost(t, client, srv.url(), "order-6", `{"item":"book"}`)
	require.Nil(t, resp)
	assert.Truef(t, errors.Is(err, ErrLedgerUnavailable), "got %v, want ErrLedgerUnavailable", err)
	assert.Truef(t, errors.Is(err, down), "got %v, want it to wrap the ledger's error", err)
	assert.Equalf(t, int32(0), srv.posts.Load(), "got %d POSTs at the server, want 0", srv.posts.Load())

	mu.Lock()
	defer mu.Unlock()
	require.Lenf(t, events, 1, "got %d EvidenceUnavailable events, want 1", len(events))
	assert.Equalf(t, "ledger", events[0].Source, "got Source %q, want ledger", events[0].Source)
	assert.Truef(t, errors.Is(events[0].Err, down), "got Err %v, want the ledger's error", events[0].Err)
	assert.Equalf(t, "order-6", events[0].IdempotencyKey, "got key %q, want order-6", events[0].IdempotencyKey)
}

// lgDecisions records the decision core's verdicts as the hook sees them.
type lgDecisions struct {
	mu   sync.Mutex
	seen []DecisionInfo
}

func (d *lgDecisions) hook(i DecisionInfo) {
	d.mu.Lock()
	d.seen = append(d.seen, i)
	d.mu.Unlock()
}

// take returns the verdicts recorded since the last take.
func (d *lgDecisions) take() []DecisionInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.seen
	d.seen = nil
	return s
}

func TestLedgerDecisionHookShowsKeyState(t *testing.T) {
	const key = "order-7"
	ledger, _ := lgLedger(t, MemoryLedgerConfig{})
	srv := lgServe(t, lgAlways(lgHold))
	var d lgDecisions
	client, _ := lgClient(t, ledger, func(tr *Transport) { tr.Hooks.Decision = d.hook })

	type want struct {
		ks       KeyState
		decision Decision
		evidence Evidence
		rule     int
	}
	check := func(step string, got []DecisionInfo, w want) {
		t.Helper()
		require.Lenf(t, got, 1, "%s: got %d verdicts, want 1", step, len(got))
		g := want{got[0].KeyState, got[0].Verdict.Decision, got[0].Verdict.Evidence, got[0].Verdict.Rule}
		assert.Equalf(t, w, g, "%s: got %v/%v/%v rule %d, want %v/%v/%v rule %d",
			step, g.ks, g.decision, g.evidence, g.rule, w.ks, w.decision, w.evidence, w.rule)
		assert.Equalf(t, key, got[0].IdempotencyKey, "%s: got key %q, want %q", step, got[0].IdempotencyKey, key)
	}

	held := lgGo(client, lgRequest(t, lgCtx(t), srv.url(), key, `{"item":"book"}`))
	srv.waitArrived(t, 1)
	check("first call", d.take(), want{KeyNone, ReplaySafe, EvidencePass, 8})

	_, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.Truef(t, errors.Is(err, ErrDuplicateInFlight), "got %v, want ErrDuplicateInFlight", err)
	check("duplicate", d.take(), want{KeyInFlight, Brake, EvidencePass, 4})

	_, _, err = lgPost(t, client, srv.url(), key, `{"item":"other"}`)
	require.Truef(t, errors.Is(err, ErrIdempotencyConflict), "got %v, want ErrIdempotencyConflict", err)
	check("other body", d.take(), want{KeyConflict, RejectConflict, EvidenceFail, 1})

	close(srv.release)
	r := lgReceive(t, held)
	require.NoError(t, r.err)
	lgReadAll(t, r.resp)
	check("first call's response", d.take(), want{KeyNone, ReplayStored, EvidencePass, 2})

	_, _, err = lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoError(t, err)
	check("replay", d.take(), want{KeyCompleted, ReplayStored, EvidencePass, 2})
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
}
