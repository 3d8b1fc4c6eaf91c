package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// The rate limiter of each scope (Transport.RateLimit): x/time/rate on
// the Transport's clock, so that its waits are the fake clock's sleeps.

// rateTransport returns a Transport with a rate limiter to the scope
// "dep" on clk, whose sleeps move clk on and are recorded.
func rateTransport(t *testing.T, clk *fakeClock, tr *Transport) *Transport {
	t.Helper()
	if tr.Retry.Budget == nil {
		tr.Retry.Budget = budget.Unlimited()
	}
	tr.Scope.Of = func(*http.Request) string { return "dep" }
	return newTransport(t, clk, tr)
}

func TestRateLimiterBurstThenWaits(t *testing.T) {
	srv := statusServer(t, http.StatusOK, "ok")
	clk := newFakeClock()
	pl := newPolicyLog()
	tr := rateTransport(t, clk, &Transport{Load: LoadPolicy{RateLimit: 4, RateBurst: 2}, Hooks: Hooks{Policy: pl.hook}})

	for i := range 2 {
		if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
			t.Fatalf("call %d of the burst: %v", i+1, err)
		}
	}
	if s := clk.Sleeps(); len(s) != 0 {
		t.Fatalf("waits within the burst: got %v, want none", s)
	}
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
		t.Fatalf("the call after the burst: %v", err)
	}
	if s := clk.Sleeps(); !slices.Equal(s, []time.Duration{250 * time.Millisecond}) {
		t.Errorf("waits: got %v, want [250ms] (one token at 4/s)", s)
	}
	e := pl.next(t)
	if e.Policy != policyRateLimit || e.Action != actionWaited || e.Wait != 250*time.Millisecond || e.Err != nil {
		t.Errorf("Policy event: got %s/%s wait %v err %v, want rate_limit/waited 250ms", e.Policy, e.Action, e.Wait, e.Err)
	}
	if e.CallID != 3 || e.Method != http.MethodGet || e.URL != srv.URL {
		t.Errorf("Policy event: got call %d, %s %s; want the third call's, GET %s", e.CallID, e.Method, e.URL, srv.URL)
	}
	if got := srv.count(); got != 3 {
		t.Errorf("requests at the server: got %d, want 3", got)
	}
}

// A wait longer than MaxLimitWait, or than the deadline leaves, is
// refused with a *RateLimitError: nothing is sent and no token is taken,
// so that an attempt at the right time passes.
func TestRateLimiterRejectsLongWaitWithoutTakingToken(t *testing.T) {
	tests := []struct {
		name         string
		maxLimitWait time.Duration
		ctx          func(t *testing.T, clk *fakeClock) context.Context
	}{
		{"MaxLimitWait", 100 * time.Millisecond,
			func(t *testing.T, _ *fakeClock) context.Context { return testCtx(t) }},
		{"no waiting", -1,
			func(t *testing.T, _ *fakeClock) context.Context { return testCtx(t) }},
		{"deadline", time.Hour,
			func(t *testing.T, clk *fakeClock) context.Context {
				ctx, cancel := context.WithDeadline(testCtx(t), clk.Now().Add(500*time.Millisecond))
				t.Cleanup(cancel)
				return ctx
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := statusServer(t, http.StatusOK, "ok")
			// An hour ahead: the deadline the test sets on this clock
			// never strikes in real time.
			clk := newFakeClockAt(time.Now().Add(time.Hour))
			pl := newPolicyLog()
			rt := rateTransport(t, clk, &Transport{Load: LoadPolicy{RateLimit: 1, RateBurst: 1, MaxWait: tt.maxLimitWait}, Hooks: Hooks{Policy: pl.hook}})
			if _, _, err := do(rt, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
				t.Fatalf("the first call: %v", err)
			}
			_, _, err := do(rt, newRequest(t, tt.ctx(t, clk), http.MethodGet, srv.URL, ""))
			var rl *RateLimitError
			if !errors.As(err, &rl) {
				t.Fatalf("got %v, want a *RateLimitError", err)
			}
			if rl.Scope != "dep" || rl.RetryAfter != time.Second {
				t.Errorf("got %+v, want scope dep, RetryAfter 1s", *rl)
			}
			if !errors.Is(err, ErrDeclined) {
				t.Errorf("errors.Is(%v, ErrDeclined) = false, want true", err)
			}
			if got := srv.count(); got != 1 {
				t.Errorf("requests at the server: got %d, want 1 (the refused one not sent)", got)
			}
			if s := clk.Sleeps(); len(s) != 0 {
				t.Errorf("waits: got %v, want none", s)
			}
			e := pl.next(t)
			if e.Policy != policyRateLimit || e.Action != actionRejected || !errors.As(e.Err, &rl) {
				t.Errorf("Policy event: got %s/%s err %v, want rate_limit/rejected with a *RateLimitError", e.Policy, e.Action, e.Err)
			}

			clk.Advance(rl.RetryAfter)
			if _, _, err := do(rt, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
				t.Fatalf("a call after RetryAfter: got %v, want it sent (the refusal took no token)", err)
			}
			if s := clk.Sleeps(); len(s) != 0 {
				t.Errorf("waits after RetryAfter: got %v, want none", s)
			}
			if got := srv.count(); got != 2 {
				t.Errorf("requests at the server: got %d, want 2", got)
			}
		})
	}
}

// Retries draw from the limiter: a retry waits for its token, or, when
// the wait is too long, the call ends with its last response.
func TestRateLimiterRetriesDrawFromIt(t *testing.T) {
	t.Run("waits", func(t *testing.T) {
		srv := newTestServer(t, failThenOK(1))
		clk := newFakeClock()
		tr := rateTransport(t, clk, &Transport{Load: LoadPolicy{RateLimit: 1, RateBurst: 1}, Retry: RetryPolicy{InitialBackoff: 100 * time.Millisecond}})
		resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != "done" {
			t.Fatalf("got %v, want the retry's 200", err)
		}
		// The backoff (half its 100ms ceiling), then the rest of the second.
		if s := clk.Sleeps(); !slices.Equal(s, []time.Duration{50 * time.Millisecond, 950 * time.Millisecond}) {
			t.Errorf("waits: got %v, want [50ms 950ms]", s)
		}
		if got := srv.count(); got != 2 {
			t.Errorf("requests at the server: got %d, want 2", got)
		}
	})
	t.Run("refused", func(t *testing.T) {
		srv := newTestServer(t, failThenOK(1))
		clk := newFakeClock()
		gu := &giveUpLog{}
		tr := rateTransport(t, clk, &Transport{
			Load: LoadPolicy{
				RateLimit: 1,
				RateBurst: 1,
				MaxWait:   500 * time.Millisecond,
			},
			Retry: RetryPolicy{
				InitialBackoff: 100 * time.Millisecond,
			},
			Hooks: Hooks{GiveUp: gu.hook},
		})
		resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || string(body) != "try later" {
			t.Fatalf("got %v, want the first attempt's 503 back", err)
		}
		if got := srv.count(); got != 1 {
			t.Errorf("requests at the server: got %d, want 1 (the retry refused)", got)
		}
		gu.mu.Lock()
		defer gu.mu.Unlock()
		if len(gu.reasons) != 1 || ReasonName(gu.reasons[0]) != "rate_limited" {
			t.Errorf("GiveUp reasons: got %v, want one rate_limited", gu.reasons)
		}
	})
}

// A hedge never waits for the limiter: without a token it is not sent.
func TestRateLimiterRefusesHedgeWithoutWaiting(t *testing.T) {
	noGoroutineLeft(t)
	srv := newPathServer(t, "/a")
	g := newGatedSleep(newFakeClock())
	pl := newPolicyLog()
	tr := rateTransport(t, g.clk, &Transport{
		Load: LoadPolicy{
			RateLimit: 1,
			RateBurst: 1,
		},
		Hedge: HedgePolicy{
			Max:   1,
			Delay: 10 * time.Millisecond,
		},
		Hooks: Hooks{Policy: pl.hook},
	})
	g.install(tr)

	a := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/a", ""))
	srv.next(t)
	g.next(t).fire()
	e := pl.next(t)
	var rl *RateLimitError
	if e.Policy != policyHedge || e.Action != actionRefused || !errors.As(e.Err, &rl) {
		t.Errorf("Policy event: got %s/%s err %v, want hedge/refused with a *RateLimitError", e.Policy, e.Action, e.Err)
	}
	srv.let("/a")
	if a.wait(t); a.err != nil || a.body != "/a" {
		t.Fatalf("got %v, %q; want /a", a.err, a.body)
	}
	if events := pl.take(); len(events) != 1 {
		t.Errorf("Policy events: got %+v, want the hedge's refusal only", events)
	}
	if n := g.asked(); n != 0 {
		t.Errorf("waits: got %d, want none (a hedge does not wait)", n)
	}
}

// A limiter wait that would end at the caller's deadline leaves no time
// for the attempt: it is refused at once, as a retry's wait is.
func TestRateLimiterRefusesWaitEndingAtDeadline(t *testing.T) {
	srv := statusServer(t, http.StatusOK, "ok")
	clk := newFakeClockAt(time.Now().Add(time.Hour)) // the deadline never strikes in real time
	tr := rateTransport(t, clk, &Transport{Load: LoadPolicy{RateLimit: 1, RateBurst: 1, MaxWait: time.Hour}})
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
		t.Fatalf("the first call: %v", err)
	}
	ctx, cancel := context.WithDeadline(testCtx(t), clk.Now().Add(time.Second))
	defer cancel()
	_, _, err := do(tr, newRequest(t, ctx, http.MethodGet, srv.URL, ""))
	var rl *RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter != time.Second {
		t.Fatalf("got %v, want a *RateLimitError with RetryAfter 1s", err)
	}
	if s := clk.Sleeps(); len(s) != 0 {
		t.Errorf("waits: got %v, want none", s)
	}
	if got := srv.count(); got != 1 {
		t.Errorf("requests at the server: got %d, want 1", got)
	}
}
