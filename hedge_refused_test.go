package retryfuse

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
)

// Hedges that are due but not sent: refused by the limits, the breaker,
// or a body that cannot be had again.

// A hedge the bulkhead or the rate limiter refuses is not sent, and takes
// no retry from the budget: the budget is kept for what is sent.
func TestHedgeRefusedByLimitsTakesNoRetry(t *testing.T) {
	tests := []struct {
		name    string
		limits  func(*Transport)
		blocker bool // a PUT (never hedged) holds a slot before the GET
		want    func(error) bool
	}{
		// Two slots (MaxHedges with one is refused): the PUT holds one, the
		// GET's first branch the other.
		{"bulkhead full", func(tr *Transport) { tr.Load.MaxInFlight = 2; tr.Load.MaxQueued = 4 }, true, errAs[*BulkheadFullError]},
		{"rate limited", func(tr *Transport) { tr.Load.RateLimit = 1; tr.Load.RateBurst = 1 }, false, errAs[*RateLimitError]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noGoroutineLeft(t)
			srv := newBranchServer(t)
			first := 1 // the number of the GET's request at the server
			if tt.blocker {
				first = 2
			}
			srv.hold(1, first)
			g := newGatedSleep(newFakeClock())
			pl := newPolicyLog()
			budget, err := budget.NewTokenBucket(budget.TokenBucketConfig{Capacity: 5})
			if err != nil {
				t.Fatal(err)
			}
			tr := &Transport{Retry: RetryPolicy{Budget: budget}, Hooks: Hooks{Policy: pl.hook}}
			tt.limits(tr)
			tr = hedgedTransport(t, g, tr)

			var blocker *asyncCall
			if tt.blocker {
				blocker = goDo(tr, newRequest(t, testCtx(t), http.MethodPut, srv.URL, ""))
				waitFor(t, srv.arrived, 1, "the PUT")
			}
			call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			waitFor(t, srv.arrived, first, "first branch")
			g.next(t).fire()
			e := pl.next(t)
			if e.Policy != policyHedge || e.Action != actionRefused || !tt.want(e.Err) {
				t.Errorf("Policy event: got %s/%s err %v, want hedge/refused by the %s", e.Policy, e.Action, e.Err, tt.name)
			}
			srv.let(first)
			if call.wait(t); call.err != nil || call.body != fmt.Sprintf("reply %d", first) {
				t.Fatalf("got %v, %q; want the first branch's reply", call.err, call.body)
			}
			if blocker != nil {
				srv.let(1)
				if blocker.wait(t); blocker.err != nil || blocker.body != "reply 1" {
					t.Fatalf("the PUT: got %v, %q; want reply 1", blocker.err, blocker.body)
				}
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
	brk, err := breaker.New(breaker.Settings{FailureThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	budget, err := budget.NewTokenBucket(budget.TokenBucketConfig{Capacity: 5})
	if err != nil {
		t.Fatal(err)
	}
	tr := hedgedTransport(t, g, &Transport{
		Retry: RetryPolicy{
			Budget: budget,
		},
		Brake: BrakePolicy{
			Breaker: brk,
		},
		Scope: ScopePolicy{
			Of: func(*http.Request) string { return "dep" },
		},
		Hooks: Hooks{Policy: pl.hook},
	})

	call := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	waitFor(t, srv.arrived, 1, "first branch")
	// Another caller's failure opens the scope while the first branch waits.
	ticket, _, err := brk.Allow("dep", clk.Now())
	if err != nil {
		t.Fatalf("allow: %v", err)
	}
	ticket.Done(breaker.Failure, errors.New("down"), clk.Now())
	g.next(t).fire()
	e := pl.next(t)
	var open *breaker.OpenError
	if e.Policy != policyHedge || e.Action != actionRefused || !errors.As(e.Err, &open) {
		t.Errorf("Policy event: got %s/%s err %v, want hedge/refused with a *breaker.OpenError", e.Policy, e.Action, e.Err)
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

// A hedge whose body cannot be had again (GetBody fails) is not sent: it is
// reported refused with GetBody's error, and the first branch's answer
// stands.
func TestHedgeRefusedWhenGetBodyFails(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1)
	g := newGatedSleep(newFakeClock())
	pl := newPolicyLog()
	tr := hedgedTransport(t, g, &Transport{Hedge: HedgePolicy{Methods: []string{http.MethodPut}}})
	tr.Hooks.Policy = pl.hook

	req := newRequest(t, testCtx(t), http.MethodPut, srv.URL, "v1")
	broken := errors.New("body source gone")
	req.GetBody = func() (io.ReadCloser, error) { return nil, broken }
	call := goDo(tr, req)
	waitFor(t, srv.arrived, 1, "first branch")
	g.next(t).fire()
	e := pl.next(t)
	if e.Policy != "hedge" || e.Action != "refused" || !errors.Is(e.Err, broken) {
		t.Errorf("Policy event: got %s/%s err %v; want hedge/refused with GetBody's error", e.Policy, e.Action, e.Err)
	}
	srv.let(1)
	call.wait(t)
	if call.err != nil || call.resp.StatusCode != http.StatusOK || call.body != "reply 1" {
		t.Fatalf("got %v, %q; want 200 and the first branch's reply", call.err, call.body)
	}
	if got := srv.n.Load(); got != 1 {
		t.Errorf("requests at the server: got %d, want 1 (no hedge without its body)", got)
	}
}
