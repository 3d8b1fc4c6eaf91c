package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Hedged requests. The hedge timers are the Transport's sleeps, held by a
// gatedSleep until the test fires them, and the servers answer when the
// test lets them: no test depends on how fast anything runs.

// gatedSleep is a Transport's sleep that waits until the test fires it
// (or its context ends). Each sleep asked for is announced on calls.
type gatedSleep struct {
	clk   *fakeClock
	calls chan *pendingSleep
}

// pendingSleep is one sleep asked for: fire ends it, and moves the fake
// clock on by d.
type pendingSleep struct {
	clk  *fakeClock
	d    time.Duration
	done chan struct{}
	once sync.Once
}

func (p *pendingSleep) fire() {
	p.once.Do(func() {
		p.clk.Advance(p.d)
		close(p.done)
	})
}

func newGatedSleep(clk *fakeClock) *gatedSleep {
	return &gatedSleep{clk: clk, calls: make(chan *pendingSleep, 64)}
}

func (g *gatedSleep) sleep(ctx context.Context, d time.Duration) error {
	p := &pendingSleep{clk: g.clk, d: d, done: make(chan struct{})}
	g.calls <- p
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// install makes g the sleep of tr, on g's fake clock.
func (g *gatedSleep) install(tr *Transport) { setClock(tr, g.clk.Now, g.sleep) }

// next returns the next sleep asked for.
func (g *gatedSleep) next(t *testing.T) *pendingSleep {
	t.Helper()
	select {
	case p := <-g.calls:
		return p
	case <-time.After(callWait):
		t.Fatal("no sleep was asked for")
		return nil
	}
}

// asked returns how many sleeps were asked for and not taken by next.
func (g *gatedSleep) asked() int { return len(g.calls) }

// branchServer is a loopback server that numbers its requests from 1 and
// answers request n with "reply n" and status 200, unless told otherwise:
// hold(n) makes it wait until let(n), and fail(n) makes it answer 503. A
// held request whose client goes away is reported on canceled.
type branchServer struct {
	*httptest.Server
	arrived  chan int
	canceled chan int
	gone     chan struct{}
	n        atomic.Int32

	mu      sync.Mutex
	release map[int]chan struct{}
	failing map[int]bool
	keys    []string // the Idempotency-Key of each request
}

func newBranchServer(t *testing.T) *branchServer {
	t.Helper()
	s := &branchServer{
		arrived:  make(chan int, 64),
		canceled: make(chan int, 64),
		gone:     make(chan struct{}),
		release:  map[int]chan struct{}{},
		failing:  map[int]bool{},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.gone) }) // runs first: held handlers return before Close waits for them
	return s
}

func (s *branchServer) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := int(s.n.Add(1))
	s.mu.Lock()
	ch, failing := s.release[n], s.failing[n]
	s.keys = append(s.keys, r.Header.Get(headerIdempotencyKey))
	s.mu.Unlock()
	s.arrived <- n
	if ch != nil {
		select {
		case <-ch:
		case <-r.Context().Done():
			s.canceled <- n
			return
		case <-s.gone:
			return
		}
	}
	if failing {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = fmt.Fprintf(w, "reply %d", n)
}

func (s *branchServer) hold(ns ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range ns {
		s.release[n] = make(chan struct{})
	}
}

func (s *branchServer) let(n int) {
	s.mu.Lock()
	ch := s.release[n]
	s.mu.Unlock()
	close(ch)
}

func (s *branchServer) fail(ns ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range ns {
		s.failing[n] = true
	}
}

func (s *branchServer) requestKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

// waitFor waits for n on ch.
func waitFor(t *testing.T, ch <-chan int, want int, what string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s: got request %d, want %d", what, got, want)
		}
	case <-time.After(callWait):
		t.Fatalf("%s: request %d did not come", what, want)
	}
}

// policyLog records Policy events, and announces each on events.
type policyLog struct {
	mu     sync.Mutex
	all    []PolicyInfo
	events chan PolicyInfo
}

func newPolicyLog() *policyLog { return &policyLog{events: make(chan PolicyInfo, 64)} }

func (l *policyLog) hook(i PolicyInfo) {
	l.mu.Lock()
	l.all = append(l.all, i)
	l.mu.Unlock()
	l.events <- i
}

func (l *policyLog) take() []PolicyInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

// next returns the next event.
func (l *policyLog) next(t *testing.T) PolicyInfo {
	t.Helper()
	select {
	case i := <-l.events:
		return i
	case <-time.After(callWait):
		t.Fatal("no Policy event came")
		return PolicyInfo{}
	}
}

// noGoroutineLeft fails the test when, after its cleanups, a goroutine
// it started is still running. Call it first, so that its check runs last.
func noGoroutineLeft(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// asyncCall is a call made on another goroutine.
type asyncCall struct {
	done chan struct{}
	resp *http.Response
	body string
	err  error
}

func goDo(rt http.RoundTripper, req *http.Request) *asyncCall {
	c := &asyncCall{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		var b []byte
		c.resp, b, c.err = do(rt, req)
		c.body = string(b)
	}()
	return c
}

func (c *asyncCall) wait(t *testing.T) *asyncCall {
	t.Helper()
	select {
	case <-c.done:
		return c
	case <-time.After(callWait):
		t.Fatal("the call did not return")
		return nil
	}
}

// hedgedTransport returns a Transport hedging once after 10ms, with an
// unlimited budget, on a fake clock whose sleeps g holds.
func hedgedTransport(t *testing.T, g *gatedSleep, tr *Transport) *Transport {
	t.Helper()
	if tr.MaxHedges == 0 {
		tr.MaxHedges = 1
	}
	if tr.HedgeDelay == 0 && tr.HedgeQuantile == 0 {
		tr.HedgeDelay = 10 * time.Millisecond
	}
	if tr.Budget == nil {
		tr.Budget = UnlimitedBudget()
	}
	tr = newTransport(t, nil, tr)
	g.install(tr)
	return tr
}

func TestHedgeWinsAndSlowFirstIsCancelled(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1)
	g := newGatedSleep(newFakeClock())
	var hooks hookLog
	pl := newPolicyLog()
	tr := hedgedTransport(t, g, &Transport{Hooks: hooks.hooks()})
	tr.Hooks.Policy = pl.hook

	call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	waitFor(t, srv.arrived, 1, "first branch")
	p := g.next(t)
	if p.d != 10*time.Millisecond {
		t.Errorf("hedge delay: got %v, want 10ms", p.d)
	}
	p.fire()
	waitFor(t, srv.arrived, 2, "hedge")
	call.wait(t)

	if call.err != nil || call.resp.StatusCode != http.StatusOK || call.body != "reply 2" {
		t.Fatalf("got %v, %q; want 200 and the hedge's reply", call.err, call.body)
	}
	waitFor(t, srv.canceled, 1, "the first branch's cancellation at the server")
	if got := srv.n.Load(); got != 2 {
		t.Errorf("requests at the server: got %d, want 2", got)
	}

	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	if len(hooks.starts) != 2 {
		t.Fatalf("AttemptStart events: got %d, want 2", len(hooks.starts))
	}
	id := hooks.starts[0].CallID
	for i, s := range hooks.starts {
		if s.Branch != i || s.Attempt != i+1 || s.CallID != id {
			t.Errorf("AttemptStart %d: got branch %d, attempt %d, call %d; want %d, %d, %d", i, s.Branch, s.Attempt, s.CallID, i, i+1, id)
		}
	}
	if len(hooks.dones) != 2 {
		t.Fatalf("AttemptDone events: got %d, want 2", len(hooks.dones))
	}
	byBranch := map[int]AttemptDoneInfo{}
	for _, d := range hooks.dones {
		if d.CallID != id {
			t.Errorf("AttemptDone of branch %d: got call %d, want %d", d.Branch, d.CallID, id)
		}
		byBranch[d.Branch] = d
	}
	if w := byBranch[1]; w.Err != nil || w.StatusCode != http.StatusOK || w.Attempt != 2 {
		t.Errorf("the hedge's AttemptDone: got err %v, status %d, attempt %d; want nil, 200, 2", w.Err, w.StatusCode, w.Attempt)
	}
	if l := byBranch[0]; !errors.Is(l.Err, errHedgeLost) || l.Attempt != 1 {
		t.Errorf("the first branch's AttemptDone: got err %v, attempt %d; want errHedgeLost, 1", l.Err, l.Attempt)
	}
	if len(hooks.retries) != 0 || len(hooks.giveUps) != 0 {
		t.Errorf("Retry and GiveUp events: got %d and %d, want none", len(hooks.retries), len(hooks.giveUps))
	}

	events := pl.take()
	if len(events) != 1 {
		t.Fatalf("Policy events: got %+v, want one", events)
	}
	e := events[0]
	if e.Policy != "hedge" || e.Action != "sent" || e.Branch != 1 || e.CallID != id || e.Err != nil {
		t.Errorf("Policy event: got %s/%s branch %d call %d err %v; want hedge/sent branch 1 call %d", e.Policy, e.Action, e.Branch, e.CallID, e.Err, id)
	}
	if e.Attempt != 2 {
		t.Errorf("Policy event of the hedge: got Attempt %d, want 2 (the hedge's own)", e.Attempt)
	}
	if e.Wait != 10*time.Millisecond {
		t.Errorf("Policy event: got Wait %v, want 10ms (the group's wait before the hedge)", e.Wait)
	}
}

// closeTrackedBody is a response body that records its Close.
type closeTrackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *closeTrackedBody) Close() error { b.closed.Store(true); return nil }

// A loser whose response arrives as it is cancelled has that response's
// body closed, and is reported lost.
func TestHedgeLoserResponseBodyClosed(t *testing.T) {
	noGoroutineLeft(t)
	late := &closeTrackedBody{Reader: strings.NewReader("late")}
	entered := make(chan struct{})
	var n atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if n.Add(1) == 1 {
			close(entered)
			<-r.Context().Done() // cancelled by the winner; answers anyway
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: late, Request: r}, nil
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("fast")), Request: r}, nil
	})
	g := newGatedSleep(newFakeClock())
	var hooks hookLog
	tr := hedgedTransport(t, g, &Transport{Base: base, Hooks: hooks.hooks()})

	call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
	<-entered
	g.next(t).fire()
	call.wait(t)
	if call.err != nil || call.body != "fast" {
		t.Fatalf("got %v, %q; want the hedge's answer", call.err, call.body)
	}
	if !late.closed.Load() {
		t.Error("the losing branch's response body was left open")
	}
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	var lost int
	for _, d := range hooks.dones {
		if d.Branch == 0 {
			lost++
			if !errors.Is(d.Err, errHedgeLost) || d.StatusCode != http.StatusOK {
				t.Errorf("the loser's AttemptDone: got err %v, status %d; want errHedgeLost, 200", d.Err, d.StatusCode)
			}
		}
	}
	if lost != 1 {
		t.Errorf("AttemptDone events of the loser: got %d, want 1", lost)
	}
}

func TestHedgeAtMostMaxHedges(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1, 2, 3)
	g := newGatedSleep(newFakeClock())
	pl := newPolicyLog()
	tr := hedgedTransport(t, g, &Transport{MaxHedges: 2, MaxAttempts: 10, Hooks: Hooks{Policy: pl.hook}})

	call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	waitFor(t, srv.arrived, 1, "first branch")
	g.next(t).fire()
	waitFor(t, srv.arrived, 2, "first hedge")
	g.next(t).fire()
	waitFor(t, srv.arrived, 3, "second hedge")
	srv.let(3)
	call.wait(t)
	if call.err != nil || call.body != "reply 3" {
		t.Fatalf("got %v, %q; want the second hedge's reply", call.err, call.body)
	}
	if n := g.asked(); n != 0 {
		t.Errorf("hedge timers after MaxHedges hedges: got %d more, want none", n)
	}
	if got := srv.n.Load(); got != 3 {
		t.Errorf("requests at the server: got %d, want 3 (one and MaxHedges 2)", got)
	}
	for _, want := range []int{1, 2} {
		e := pl.next(t)
		if e.Policy != policyHedge || e.Action != actionSent || e.Branch != want {
			t.Errorf("Policy event: got %s/%s branch %d, want hedge/sent branch %d", e.Policy, e.Action, e.Branch, want)
		}
	}
}

// Hedges count against MaxAttempts: with two attempts, one hedge goes
// and the next is refused.
func TestHedgeCountsAgainstMaxAttempts(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1, 2)
	g := newGatedSleep(newFakeClock())
	pl := newPolicyLog()
	tr := hedgedTransport(t, g, &Transport{MaxHedges: 3, MaxAttempts: 2, Hooks: Hooks{Policy: pl.hook}})

	call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	waitFor(t, srv.arrived, 1, "first branch")
	g.next(t).fire()
	waitFor(t, srv.arrived, 2, "hedge")
	if e := pl.next(t); e.Action != actionSent {
		t.Fatalf("Policy event: got %s/%s, want hedge/sent", e.Policy, e.Action)
	}
	g.next(t).fire()
	e := pl.next(t)
	if e.Policy != policyHedge || e.Action != actionRefused || !errors.Is(e.Err, ErrAttemptsExhausted) || e.Branch != 2 {
		t.Errorf("Policy event: got %s/%s branch %d err %v, want hedge/refused branch 2 with ErrAttemptsExhausted", e.Policy, e.Action, e.Branch, e.Err)
	}
	srv.let(1)
	call.wait(t)
	if call.err != nil || call.body != "reply 1" {
		t.Fatalf("got %v, %q; want the first branch's reply", call.err, call.body)
	}
	if got := srv.n.Load(); got != 2 {
		t.Errorf("requests at the server: got %d, want 2 (MaxAttempts)", got)
	}
}

// A hedge takes a retry from the budget: an empty budget sends none, and
// the refusal is reported.
func TestHedgeRefusedByBudget(t *testing.T) {
	empty := func(t *testing.T) Budget {
		b, err := NewTokenBucket(TokenBucketConfig{Capacity: 1, Refill: 1, Interval: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := b.AllowRetry(context.Background()); !ok {
			t.Fatal("the bucket had no token to take")
		}
		return b
	}
	for name, budget := range map[string]func(*testing.T) Budget{
		"empty token bucket": empty,
		"refusing budget":    func(*testing.T) Budget { return &refusingBudget{} },
	} {
		t.Run(name, func(t *testing.T) {
			noGoroutineLeft(t)
			srv := newBranchServer(t)
			srv.hold(1)
			g := newGatedSleep(newFakeClock())
			pl := newPolicyLog()
			tr := hedgedTransport(t, g, &Transport{Budget: budget(t), Hooks: Hooks{Policy: pl.hook}})

			call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			waitFor(t, srv.arrived, 1, "first branch")
			g.next(t).fire()
			e := pl.next(t)
			if e.Policy != policyHedge || e.Action != actionRefused || !errors.Is(e.Err, ErrBudgetExhausted) {
				t.Errorf("Policy event: got %s/%s err %v, want hedge/refused with ErrBudgetExhausted", e.Policy, e.Action, e.Err)
			}
			srv.let(1)
			call.wait(t)
			if call.err != nil || call.body != "reply 1" {
				t.Fatalf("got %v, %q; want the first branch's reply", call.err, call.body)
			}
			if got := srv.n.Load(); got != 1 {
				t.Errorf("requests at the server: got %d, want 1 (no hedge without a retry from the budget)", got)
			}
			if n := g.asked(); n != 0 {
				t.Errorf("hedge timers after the refusal: got %d, want none", n)
			}
		})
	}
}

// Only requests of HedgeMethods that may be repeated at all are hedged.
func TestHedgeEligibility(t *testing.T) {
	tests := []struct {
		name    string
		methods []string
		method  string
		key     string
		getBody bool
		hedged  bool
	}{
		{"GET by default", nil, http.MethodGet, "", false, true},
		{"HEAD by default", nil, http.MethodHead, "", false, true},
		{"PUT not listed", nil, http.MethodPut, "", true, false},
		{"POST not listed, even keyed", nil, http.MethodPost, "k1", true, false},
		{"POST listed without a key", []string{http.MethodPost}, http.MethodPost, "", true, false},
		{"POST listed with a key but no GetBody", []string{http.MethodPost}, http.MethodPost, "k2", false, false},
		{"POST listed with a key and GetBody", []string{http.MethodPost}, http.MethodPost, "k3", true, true},
		{"PUT listed", []string{http.MethodPut}, http.MethodPut, "", true, true},
		{"GET not listed", []string{http.MethodPut}, http.MethodGet, "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noGoroutineLeft(t)
			srv := newBranchServer(t)
			g := newGatedSleep(newFakeClock())
			tr := hedgedTransport(t, g, &Transport{HedgeMethods: tt.methods})
			body := ""
			if tt.method != http.MethodGet && tt.method != http.MethodHead {
				body = "payload"
			}
			req := newRequest(t, testCtx(t), tt.method, srv.URL, body)
			if !tt.getBody {
				req.GetBody = nil
			}
			if tt.key != "" {
				req.Header.Set(headerIdempotencyKey, tt.key)
			}
			if !tt.hedged {
				// Answered at once: a hedged call would have started its
				// timer all the same.
				call := goDo(tr, req).wait(t)
				if call.err != nil {
					t.Fatalf("got %v, want a response", call.err)
				}
				if n := g.asked(); n != 0 {
					t.Errorf("hedge timers: got %d, want none (not hedged)", n)
				}
				if got := srv.n.Load(); got != 1 {
					t.Errorf("requests at the server: got %d, want 1", got)
				}
				return
			}
			srv.hold(1)
			call := goDo(tr, req)
			waitFor(t, srv.arrived, 1, "first branch")
			g.next(t).fire()
			waitFor(t, srv.arrived, 2, "hedge")
			call.wait(t)
			if call.err != nil || call.resp.StatusCode != http.StatusOK {
				t.Fatalf("got %v, want the hedge's 200", call.err)
			}
			if tt.key != "" {
				keys := srv.requestKeys()
				if len(keys) != 2 || keys[0] != tt.key || keys[1] != tt.key {
					t.Errorf("idempotency keys at the server: got %q, want %q twice", keys, tt.key)
				}
			}
		})
	}
}

// The first branch failing retryably while a hedge is in flight does not
// end the group: the hedge's success wins, and no retry follows.
func TestHedgeSucceedsAfterFirstBranchFails(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1, 2)
	srv.fail(1)
	g := newGatedSleep(newFakeClock())
	done := make(chan AttemptDoneInfo, 8)
	var hooks hookLog
	tr := hedgedTransport(t, g, &Transport{Hooks: hooks.hooks()})
	tr.Hooks.AttemptDone = func(i AttemptDoneInfo) { done <- i }

	call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	waitFor(t, srv.arrived, 1, "first branch")
	g.next(t).fire()
	waitFor(t, srv.arrived, 2, "hedge")
	srv.let(1)
	select {
	case d := <-done:
		if d.Branch != 0 || d.StatusCode != http.StatusServiceUnavailable || !d.Retryable {
			t.Errorf("first AttemptDone: got branch %d, status %d, retryable %v; want 0, 503, true", d.Branch, d.StatusCode, d.Retryable)
		}
	case <-time.After(callWait):
		t.Fatal("the first branch's 503 was not reported")
	}
	srv.let(2)
	call.wait(t)
	if call.err != nil || call.resp.StatusCode != http.StatusOK || call.body != "reply 2" {
		t.Fatalf("got %v, %q; want the hedge's 200", call.err, call.body)
	}
	if got := srv.n.Load(); got != 2 {
		t.Errorf("requests at the server: got %d, want 2", got)
	}
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	if len(hooks.retries) != 0 || len(hooks.giveUps) != 0 {
		t.Errorf("Retry and GiveUp events: got %d and %d, want none", len(hooks.retries), len(hooks.giveUps))
	}
}

// Every branch failing fails the attempt group: the call retries, and the
// retry hedges again.
func TestHedgeAllBranchesFailThenRetryHedgesAgain(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1, 2, 3)
	srv.fail(1, 2)
	g := newGatedSleep(newFakeClock())
	var hooks hookLog
	tr := hedgedTransport(t, g, &Transport{MaxAttempts: 4, Hooks: hooks.hooks()})

	call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	waitFor(t, srv.arrived, 1, "first branch")
	g.next(t).fire()
	waitFor(t, srv.arrived, 2, "hedge")
	srv.let(1)
	srv.let(2)
	backoff := g.next(t) // the wait before the retry
	hooks.mu.Lock()
	retries := len(hooks.retries)
	hooks.mu.Unlock()
	if retries != 1 {
		t.Fatalf("Retry events before the backoff: got %d, want 1", retries)
	}
	backoff.fire()
	waitFor(t, srv.arrived, 3, "the retry's first branch")
	p := g.next(t)
	if p.d != 10*time.Millisecond {
		t.Errorf("the retry's hedge delay: got %v, want 10ms", p.d)
	}
	p.fire()
	waitFor(t, srv.arrived, 4, "the retry's hedge")
	call.wait(t)
	if call.err != nil || call.body != "reply 4" {
		t.Fatalf("got %v, %q; want the retry's hedge's reply", call.err, call.body)
	}
	waitFor(t, srv.canceled, 3, "the retry's first branch's cancellation")

	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	var got [][2]int
	for _, s := range hooks.starts {
		got = append(got, [2]int{s.Attempt, s.Branch})
	}
	if want := [][2]int{{1, 0}, {2, 1}, {3, 0}, {4, 1}}; !slices.Equal(got, want) {
		t.Errorf("AttemptStart (attempt, branch): got %v, want %v", got, want)
	}
	if r := hooks.retries[0]; r.Attempt != 2 {
		t.Errorf("Retry event: got Attempt %d, want 2 (both branches counted)", r.Attempt)
	}
}

// The decision core sees each failed branch: with a FailureThreshold of 2,
// one group of two failed branches stops the call.
func TestHedgeFailedBranchesCountInHistory(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1, 2)
	srv.fail(1, 2)
	g := newGatedSleep(newFakeClock())
	gu := &giveUpLog{}
	tr := hedgedTransport(t, g, &Transport{MaxAttempts: 10, FailureThreshold: 2, Hooks: Hooks{GiveUp: gu.hook}})

	call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	waitFor(t, srv.arrived, 1, "first branch")
	g.next(t).fire()
	waitFor(t, srv.arrived, 2, "hedge")
	srv.let(1)
	srv.let(2)
	call.wait(t)
	if call.err != nil || call.resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got %v, want the last 503 back", call.err)
	}
	if got := srv.n.Load(); got != 2 {
		t.Errorf("requests at the server: got %d, want 2 (no retry past the failure threshold)", got)
	}
	if n := gu.count(ErrFailureThreshold); n != 1 {
		t.Errorf("GiveUp with ErrFailureThreshold: got %d (reasons %v), want 1", n, gu.reasons)
	}
	if n := g.asked(); n != 0 {
		t.Errorf("sleeps after the group failed: got %d, want none", n)
	}
}

func TestHedgeDelayFromObservedLatency(t *testing.T) {
	const took = 3 * time.Millisecond
	clk := newFakeClock()
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		clk.Advance(took)
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	// delays records each hedge delay asked for (the timer never fires);
	// run makes calls and returns the delays they asked for.
	type delays struct {
		mu  sync.Mutex
		all []time.Duration
	}
	install := func(tr *Transport) *delays {
		ds := &delays{}
		setClock(tr, clk.Now, func(ctx context.Context, d time.Duration) error {
			ds.mu.Lock()
			ds.all = append(ds.all, d)
			ds.mu.Unlock()
			<-ctx.Done()
			return ctx.Err()
		})
		return ds
	}
	run := func(t *testing.T, tr *Transport, ds *delays, calls int) []time.Duration {
		t.Helper()
		ds.mu.Lock()
		ds.all = nil
		ds.mu.Unlock()
		for i := range calls {
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("call %d: got %v", i, err)
			}
		}
		ds.mu.Lock()
		defer ds.mu.Unlock()
		return slices.Clone(ds.all)
	}

	t.Run("no HedgeDelay: no hedge until the estimate", func(t *testing.T) {
		noGoroutineLeft(t)
		tr := newTransport(t, nil, &Transport{Base: base, MaxHedges: 1, HedgeQuantile: 0.95, Budget: UnlimitedBudget()})
		ds := install(tr)
		delays := run(t, tr, ds, latencyMinimum)
		if len(delays) != 0 {
			t.Fatalf("hedge timers in the first %d calls: got %v, want none", latencyMinimum, delays)
		}
		delays = run(t, tr, ds, 1)
		want := upperBound(bucketOf(took))
		if len(delays) != 1 || delays[0] != want {
			t.Fatalf("hedge delay after %d observations of %v: got %v, want [%v]", latencyMinimum, took, delays, want)
		}
		if delays[0] < took || delays[0] > took*119/100 {
			t.Errorf("hedge delay %v: want within a quarter octave above %v", delays[0], took)
		}
	})
	t.Run("HedgeDelay until the estimate", func(t *testing.T) {
		noGoroutineLeft(t)
		tr := newTransport(t, nil, &Transport{Base: base, MaxHedges: 1, HedgeQuantile: 0.95, HedgeDelay: 50 * time.Millisecond, Budget: UnlimitedBudget()})
		delays := run(t, tr, install(tr), latencyMinimum+1)
		if len(delays) != latencyMinimum+1 {
			t.Fatalf("hedge timers: got %d, want %d", len(delays), latencyMinimum+1)
		}
		for i, d := range delays[:latencyMinimum] {
			if d != 50*time.Millisecond {
				t.Errorf("call %d: hedge delay %v, want HedgeDelay 50ms", i, d)
			}
		}
		if got, want := delays[latencyMinimum], upperBound(bucketOf(took)); got != want {
			t.Errorf("call %d: hedge delay %v, want the estimate %v", latencyMinimum, got, want)
		}
	})
}

// A base that panics in a branch: the panic reaches the caller's
// goroutine, once every branch has ended, and no goroutine is left.
func TestHedgeBranchPanicReachesCaller(t *testing.T) {
	noGoroutineLeft(t)
	entered := make(chan struct{})
	firstEnded := make(chan struct{})
	var n atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if n.Add(1) == 1 {
			close(entered)
			<-r.Context().Done()
			close(firstEnded)
			return nil, r.Context().Err()
		}
		panic("base panics in the hedge")
	})
	g := newGatedSleep(newFakeClock())
	tr := hedgedTransport(t, g, &Transport{Base: base})

	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		resp, err := tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-entered
	g.next(t).fire()
	select {
	case v := <-recovered:
		if v != "base panics in the hedge" {
			t.Errorf("recovered %v, want the base's panic", v)
		}
	case <-time.After(callWait):
		t.Fatal("RoundTrip neither returned nor panicked")
	}
	select {
	case <-firstEnded:
	default:
		t.Error("the panic reached the caller before the other branch ended")
	}
}

// A hedge the bulkhead or the rate limiter refuses is not sent, and takes
// no retry from the budget: the budget is kept for what is sent.
func TestHedgeRefusedByLimitsTakesNoRetry(t *testing.T) {
	tests := []struct {
		name   string
		limits func(*Transport)
		want   func(error) bool
	}{
		{"bulkhead full", func(tr *Transport) { tr.MaxInFlight = 1; tr.MaxQueued = 4 }, errAs[*BulkheadFullError]},
		{"rate limited", func(tr *Transport) { tr.RateLimit = 1; tr.RateBurst = 1 }, errAs[*RateLimitError]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noGoroutineLeft(t)
			srv := newBranchServer(t)
			srv.hold(1)
			g := newGatedSleep(newFakeClock())
			pl := newPolicyLog()
			budget, err := NewTokenBucket(TokenBucketConfig{Capacity: 5})
			if err != nil {
				t.Fatal(err)
			}
			tr := &Transport{Budget: budget, Hooks: Hooks{Policy: pl.hook}}
			tt.limits(tr)
			tr = hedgedTransport(t, g, tr)

			call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			waitFor(t, srv.arrived, 1, "first branch")
			g.next(t).fire()
			e := pl.next(t)
			if e.Policy != policyHedge || e.Action != actionRefused || !tt.want(e.Err) {
				t.Errorf("Policy event: got %s/%s err %v, want hedge/refused by the %s", e.Policy, e.Action, e.Err, tt.name)
			}
			srv.let(1)
			if call.wait(t); call.err != nil || call.body != "reply 1" {
				t.Fatalf("got %v, %q; want the first branch's reply", call.err, call.body)
			}
			if got := budget.Snapshot().Retries; got != 0 {
				t.Errorf("retries taken from the budget: got %d, want 0 (the hedge was not sent)", got)
			}
		})
	}
}

// A hedge is not sent into an open circuit, and takes no retry for it.
func TestHedgeRefusedByOpenCircuit(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1)
	clk := newFakeClock()
	g := newGatedSleep(clk)
	pl := newPolicyLog()
	breaker, err := NewBreaker(BreakerSettings{FailureThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	budget, err := NewTokenBucket(TokenBucketConfig{Capacity: 5})
	if err != nil {
		t.Fatal(err)
	}
	tr := hedgedTransport(t, g, &Transport{Budget: budget, Breaker: breaker, Scope: func(*http.Request) string { return "dep" },
		Hooks: Hooks{Policy: pl.hook}})

	call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	waitFor(t, srv.arrived, 1, "first branch")
	// Another caller's failure opens the scope while the first branch waits.
	ticket, _, err := breaker.allow("dep", clk.Now())
	if err != nil {
		t.Fatalf("allow: %v", err)
	}
	ticket.done(observeFailure, errors.New("down"), clk.Now())
	g.next(t).fire()
	e := pl.next(t)
	var open *CircuitOpenError
	if e.Policy != policyHedge || e.Action != actionRefused || !errors.As(e.Err, &open) {
		t.Errorf("Policy event: got %s/%s err %v, want hedge/refused with a *CircuitOpenError", e.Policy, e.Action, e.Err)
	}
	srv.let(1)
	if call.wait(t); call.err != nil || call.body != "reply 1" {
		t.Fatalf("got %v, %q; want the first branch's reply", call.err, call.body)
	}
	if got := srv.n.Load(); got != 1 {
		t.Errorf("requests at the server: got %d, want 1", got)
	}
	if got := budget.Snapshot().Retries; got != 0 {
		t.Errorf("retries taken from the budget: got %d, want 0", got)
	}
}

// The caller's cancellation ends every branch of the group; the call
// returns the cancellation and leaves nothing running.
func TestHedgeCallerCancelEndsAllBranches(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1, 2)
	g := newGatedSleep(newFakeClock())
	tr := hedgedTransport(t, g, &Transport{})
	ctx, cancel := context.WithCancel(testCtx(t))
	call := goDo(tr, newRequest(t, ctx, http.MethodGet, srv.URL, ""))
	waitFor(t, srv.arrived, 1, "first branch")
	g.next(t).fire()
	waitFor(t, srv.arrived, 2, "hedge")
	cancel()
	call.wait(t)
	if !errors.Is(call.err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", call.err)
	}
	got := []int{0, 0}
	for i := range got {
		select {
		case got[i] = <-srv.canceled:
		case <-time.After(callWait):
			t.Fatalf("branch %d was not cancelled at the server", i)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 2}) {
		t.Errorf("requests cancelled at the server: got %v, want [1 2]", got)
	}
}

// A uniformly slow dependency: every call's hedge timer fires before its
// answer. The extra requests are exactly the retries the budget granted,
// and within its ratio.
func TestHedgeExtraRequestsBoundedByBudget(t *testing.T) {
	noGoroutineLeft(t)
	const calls = 200
	budget, err := NewRatioBudget(RatioBudgetConfig{Ratio: 0.1, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	// Each request answers once its call's hedge was sent or refused.
	var decided atomic.Pointer[chan struct{}]
	var sent atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		select {
		case <-*decided.Load():
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	var hedges, refusals int
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, MaxHedges: 1, HedgeDelay: 10 * time.Millisecond, Budget: budget,
		Hooks: Hooks{Policy: func(i PolicyInfo) {
			switch i.Action {
			case actionSent:
				hedges++
			case actionRefused:
				refusals++
			}
			close(*decided.Load())
		}}})
	for i := range calls {
		ch := make(chan struct{})
		decided.Store(&ch)
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: got %v", i, err)
		}
	}
	extra := int(sent.Load()) - calls
	if hedges+refusals != calls {
		t.Fatalf("hedges due: got %d sent and %d refused, want %d in all", hedges, refusals, calls)
	}
	if extra != hedges {
		t.Errorf("extra requests: got %d, want the %d hedges sent", extra, hedges)
	}
	if got := budget.Snapshot().Retries; got != uint64(hedges) {
		t.Errorf("retries the budget granted: got %d, want %d (one per hedge)", got, hedges)
	}
	if extra == 0 || extra > calls/10 {
		t.Errorf("extra requests: got %d, want some, and at most %d (10%% of %d calls)", extra, calls/10, calls)
	}
	t.Logf("%d calls to a uniformly slow dependency: %d hedges sent, %d refused by the budget", calls, hedges, refusals)
}
