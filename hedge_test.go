package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// Hedged requests. The hedge timers are the Transport's sleeps, held by a
// gatedSleep until the test fires them, and the servers answer when the
// test lets them: no test depends on how fast anything runs.

// hedgedTransport returns a Transport hedging once after 10ms, with an
// unlimited budget, on a fake clock whose sleeps g holds.
func hedgedTransport(t *testing.T, g *gatedSleep, tr *Transport) *Transport {
	t.Helper()
	if tr.Hedge.Max == 0 {
		tr.Hedge.Max = 1
	}
	if tr.Hedge.Delay == 0 && tr.Hedge.Quantile == 0 {
		tr.Hedge.Delay = 10 * time.Millisecond
	}
	if tr.Retry.Budget == nil {
		tr.Retry.Budget = budget.Unlimited()
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
	tr := hedgedTransport(t, g, &Transport{Hedge: HedgePolicy{Max: 2}, Retry: RetryPolicy{MaxAttempts: 10}, Hooks: Hooks{Policy: pl.hook}})

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
	tr := hedgedTransport(t, g, &Transport{Hedge: HedgePolicy{Max: 3}, Retry: RetryPolicy{MaxAttempts: 2}, Hooks: Hooks{Policy: pl.hook}})

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
	empty := func(t *testing.T) budget.Budget {
		b, err := budget.NewTokenBucket(budget.TokenBucketConfig{Capacity: 1, Refill: 1, Interval: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := b.AllowRetry(context.Background()); !ok {
			t.Fatal("the bucket had no token to take")
		}
		return b
	}
	for name, budget := range map[string]func(*testing.T) budget.Budget{
		"empty token bucket": empty,
		"refusing budget":    func(*testing.T) budget.Budget { return &refusingBudget{} },
	} {
		t.Run(name, func(t *testing.T) {
			noGoroutineLeft(t)
			srv := newBranchServer(t)
			srv.hold(1)
			g := newGatedSleep(newFakeClock())
			pl := newPolicyLog()
			tr := hedgedTransport(t, g, &Transport{Retry: RetryPolicy{Budget: budget(t)}, Hooks: Hooks{Policy: pl.hook}})

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
			tr := hedgedTransport(t, g, &Transport{Hedge: HedgePolicy{Methods: tt.methods}})
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
