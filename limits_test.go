package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// The per-scope limits an attempt passes after the breaker: the bulkhead
// (at most MaxInFlight attempts in flight, a bounded FIFO queue). The
// limits kept per scope are tested in limits_scope_test.go, the rate
// limiter in limits_rate_test.go.

// maxTracker counts what is in flight and remembers the most at once.
type maxTracker struct{ cur, max atomic.Int64 }

func (m *maxTracker) enter() {
	n := m.cur.Add(1)
	for {
		old := m.max.Load()
		if n <= old || m.max.CompareAndSwap(old, n) {
			return
		}
	}
}

func (m *maxTracker) leave() { m.cur.Add(-1) }

func TestBulkheadBoundsInFlightUnderLoad(t *testing.T) {
	noGoroutineLeft(t)
	const (
		callers     = 256
		maxInFlight = 8
	)
	var server, client maxTracker
	arrived := make(chan struct{}, callers)
	proceed := make(chan struct{}, callers)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		server.enter()
		arrived <- struct{}{}
		<-proceed
		server.leave() // before the answer: the client frees the slot once it has it
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	inner := &http.Transport{MaxIdleConnsPerHost: callers}
	t.Cleanup(inner.CloseIdleConnections)
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		client.enter()
		defer client.leave()
		return inner.RoundTrip(r)
	})
	tr := newTransport(t, nil, &Transport{
		Base: base,
		Retry: RetryPolicy{
			MaxAttempts: 1,
			Budget:      budget.Unlimited(),
		},
		Load: LoadPolicy{
			MaxInFlight: maxInFlight,
			MaxQueued:   callers,
			MaxWait:     time.Hour,
		},
	})

	var wg sync.WaitGroup
	var failed atomic.Int32
	for range callers {
		wg.Go(func() {
			resp, body, err := do(tr, newRequest(t, context.Background(), http.MethodGet, srv.URL, ""))
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
				failed.Add(1)
			}
		})
	}
	// Let one request answer at a time, once the bulkhead is full: each
	// answer frees the slot of the next in the queue.
	for i := range callers {
		select {
		case <-arrived:
		case <-time.After(callWait):
			t.Fatalf("request %d did not arrive", i+1)
		}
		if i >= maxInFlight-1 {
			proceed <- struct{}{}
		}
	}
	for range maxInFlight - 1 {
		proceed <- struct{}{}
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("calls that failed: got %d, want 0", n)
	}
	if got := server.max.Load(); got > maxInFlight {
		t.Errorf("requests in flight at the server: got at most %d, want at most %d", got, maxInFlight)
	}
	if got := client.max.Load(); got > maxInFlight {
		t.Errorf("attempts in flight in the base: got at most %d, want at most %d", got, maxInFlight)
	}
	if got := server.max.Load(); got != maxInFlight {
		t.Errorf("requests in flight at the server: got at most %d, want the bulkhead full (%d) at some point", got, maxInFlight)
	}
}

// bulkheadTransport returns a Transport with a bulkhead of one slot to
// the scope "dep", on a fake clock whose sleeps g holds.
func bulkheadTransport(t *testing.T, g *gatedSleep, tr *Transport) *Transport {
	t.Helper()
	if tr.Load.MaxInFlight == 0 {
		tr.Load.MaxInFlight = 1
	}
	if tr.Retry.MaxAttempts == 0 {
		tr.Retry.MaxAttempts = 1
	}
	tr.Retry.Budget = budget.Unlimited()
	tr.Scope.Of = func(*http.Request) string { return "dep" }
	tr = newTransport(t, nil, tr)
	g.install(tr)
	return tr
}

func TestBulkheadFullWithoutQueueRejectsAtOnce(t *testing.T) {
	noGoroutineLeft(t)
	srv := newPathServer(t, "/a")
	g := newGatedSleep(newFakeClock())
	pl := newPolicyLog()
	tr := bulkheadTransport(t, g, &Transport{Hooks: Hooks{Policy: pl.hook}})

	a := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/a", ""))
	if p := srv.next(t); p != "/a" {
		t.Fatalf("got %s, want /a", p)
	}
	_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/b", ""))
	var full *BulkheadFullError
	if !errors.As(err, &full) {
		t.Fatalf("got %v, want a *BulkheadFullError", err)
	}
	if full.Scope != "dep" || full.MaxInFlight != 1 || full.QueueWait != 0 {
		t.Errorf("got %+v, want scope dep, MaxInFlight 1, Queued 0", *full)
	}
	if !errors.Is(err, ErrDeclined) {
		t.Errorf("errors.Is(%v, ErrDeclined) = false, want true", err)
	}
	if n := g.asked(); n != 0 {
		t.Errorf("waits: got %d, want none (no queue)", n)
	}
	e := pl.next(t)
	if e.Policy != policyBulkhead || e.Action != actionRejected || !errors.As(e.Err, &full) {
		t.Errorf("Policy event: got %s/%s err %v, want bulkhead/rejected with a *BulkheadFullError", e.Policy, e.Action, e.Err)
	}
	if e.CallID != 2 {
		t.Errorf("Policy event: got call %d, want the second call's", e.CallID)
	}
	srv.let("/a")
	if c := a.wait(t); c.err != nil || c.body != "/a" {
		t.Fatalf("the held call: got %v, %q", c.err, c.body)
	}
	select {
	case p := <-srv.arrived:
		t.Errorf("the rejected request reached the server: %s", p)
	default:
	}
	// The slot came back: the next call passes.
	if _, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/c", "")); err != nil || string(body) != "/c" {
		t.Errorf("a call after the slot freed: got %v, %q; want /c", err, body)
	}
}

// Waiting attempts get the slot in the order they came.
func TestBulkheadQueueIsFIFO(t *testing.T) {
	noGoroutineLeft(t)
	srv := newPathServer(t, "/a", "/b")
	clk := newFakeClock()
	g := newGatedSleep(clk)
	pl := newPolicyLog()
	tr := bulkheadTransport(t, g, &Transport{Load: LoadPolicy{MaxQueued: 2, MaxWait: time.Minute}, Hooks: Hooks{Policy: pl.hook}})

	a := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/a", ""))
	if p := srv.next(t); p != "/a" {
		t.Fatalf("got %s, want /a", p)
	}
	b := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/b", ""))
	if w := g.next(t); w.d != time.Minute {
		t.Errorf("queue wait bound: got %v, want MaxLimitWait 1m", w.d)
	}
	clk.Advance(time.Second)
	c := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/c", ""))
	g.next(t)
	clk.Advance(time.Second)
	// The queue is full: a fourth is rejected at once.
	_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/d", ""))
	var full *BulkheadFullError
	if !errors.As(err, &full) {
		t.Fatalf("with the queue full: got %v, want a *BulkheadFullError", err)
	}
	if e := pl.next(t); e.Action != actionRejected {
		t.Errorf("Policy event: got %s/%s, want bulkhead/rejected", e.Policy, e.Action)
	}

	srv.let("/a")
	if p := srv.next(t); p != "/b" {
		t.Fatalf("after /a: got %s, want /b (first in the queue)", p)
	}
	e := pl.next(t)
	if e.Policy != policyBulkhead || e.Action != actionQueued || e.Wait != 2*time.Second {
		t.Errorf("Policy event: got %s/%s wait %v, want bulkhead/queued wait 2s", e.Policy, e.Action, e.Wait)
	}
	srv.let("/b")
	if p := srv.next(t); p != "/c" {
		t.Fatalf("after /b: got %s, want /c", p)
	}
	if e := pl.next(t); e.Action != actionQueued || e.Wait != time.Second {
		t.Errorf("Policy event: got %s/%s wait %v, want bulkhead/queued wait 1s", e.Policy, e.Action, e.Wait)
	}
	for name, call := range map[string]*asyncCall{"/a": a, "/b": b, "/c": c} {
		if call.wait(t); call.err != nil || call.body != name {
			t.Errorf("call %s: got %v, %q", name, call.err, call.body)
		}
	}
}

// The queue wait ends at MaxLimitWait: the attempt is not sent, and its
// place is given up.
func TestBulkheadQueueWaitEndsAtMaxLimitWait(t *testing.T) {
	noGoroutineLeft(t)
	srv := newPathServer(t, "/a")
	g := newGatedSleep(newFakeClock())
	pl := newPolicyLog()
	tr := bulkheadTransport(t, g, &Transport{Load: LoadPolicy{MaxQueued: 1, MaxWait: 50 * time.Millisecond}, Hooks: Hooks{Policy: pl.hook}})

	a := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/a", ""))
	srv.next(t)
	b := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/b", ""))
	w := g.next(t)
	if w.d != 50*time.Millisecond {
		t.Errorf("queue wait bound: got %v, want 50ms", w.d)
	}
	w.fire()
	b.wait(t)
	var full *BulkheadFullError
	if !errors.As(b.err, &full) || full.QueueWait != 50*time.Millisecond {
		t.Fatalf("got %v, want a *BulkheadFullError after queueing 50ms", b.err)
	}
	e := pl.next(t)
	if e.Policy != policyBulkhead || e.Action != actionRejected || e.Wait != 50*time.Millisecond {
		t.Errorf("Policy event: got %s/%s wait %v, want bulkhead/rejected wait 50ms", e.Policy, e.Action, e.Wait)
	}
	srv.let("/a")
	a.wait(t)
	// The place was given up and the slot is free: the next call passes
	// without waiting.
	if _, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/c", "")); err != nil || string(body) != "/c" {
		t.Errorf("a call after: got %v, %q; want /c", err, body)
	}
	if p := srv.next(t); p != "/c" {
		t.Errorf("got %s at the server, want /c (the timed-out /b never sent)", p)
	}
	if n := g.asked(); n != 0 {
		t.Errorf("waits after: got %d, want none", n)
	}
}

// The queue wait never outlives the caller: it ends at the deadline (or
// cancellation), and nothing is sent.
func TestBulkheadQueueWaitEndsAtCallerDeadline(t *testing.T) {
	noGoroutineLeft(t)
	srv := newPathServer(t, "/a")
	g := newGatedSleep(newFakeClock())
	tr := bulkheadTransport(t, g, &Transport{Load: LoadPolicy{MaxQueued: 1, MaxWait: time.Hour}})

	a := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/a", ""))
	srv.next(t)
	ctx := newHeldDeadline(time.Now().Add(time.Hour))
	b := goDo(tr, newRequest(t, ctx, http.MethodGet, srv.URL+"/b", ""))
	g.next(t) // queued; the hour never passes
	ctx.expire()
	b.wait(t)
	if !errors.Is(b.err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the caller's context.DeadlineExceeded", b.err)
	}
	srv.let("/a")
	a.wait(t)
	if _, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/c", "")); err != nil || string(body) != "/c" {
		t.Errorf("a call after: got %v, %q; want /c", err, body)
	}
	if p := srv.next(t); p != "/c" {
		t.Errorf("got %s at the server, want /c (/b never sent)", p)
	}
}

// A hedge never waits for the bulkhead: with no slot free it is not sent.
func TestBulkheadRefusesHedgeWithoutWaiting(t *testing.T) {
	noGoroutineLeft(t)
	srv := newPathServer(t, "/a", "/b")
	g := newGatedSleep(newFakeClock())
	pl := newPolicyLog()
	tr := bulkheadTransport(t, g, &Transport{
		Load: LoadPolicy{
			MaxInFlight: 2,
			MaxQueued:   4,
		},
		Retry: RetryPolicy{
			MaxAttempts: 3,
		},
		Hedge: HedgePolicy{
			Max:   1,
			Delay: 10 * time.Millisecond,
		},
		Hooks: Hooks{Policy: pl.hook},
	})

	// A PUT, not hedged, holds one slot; the GET's attempt takes the other.
	b := goDo(tr, newRequest(t, testCtx(t), http.MethodPut, srv.URL+"/b", ""))
	srv.next(t)
	a := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/a", ""))
	srv.next(t)
	g.next(t).fire() // the hedge timer
	e := pl.next(t)
	var full *BulkheadFullError
	if e.Policy != policyHedge || e.Action != actionRefused || !errors.As(e.Err, &full) {
		t.Errorf("Policy event: got %s/%s err %v, want hedge/refused with a *BulkheadFullError", e.Policy, e.Action, e.Err)
	}
	srv.let("/a")
	if a.wait(t); a.err != nil || a.body != "/a" {
		t.Fatalf("got %v, %q; want /a", a.err, a.body)
	}
	srv.let("/b")
	if b.wait(t); b.err != nil || b.body != "/b" {
		t.Fatalf("the PUT: got %v, %q; want /b", b.err, b.body)
	}
	if events := pl.take(); len(events) != 1 {
		t.Errorf("Policy events: got %+v, want the hedge's refusal only", events)
	}
	if n := g.asked(); n != 0 {
		t.Errorf("waits: got %d, want none (a hedge does not queue)", n)
	}
}

// A base that panics gives the bulkhead slot back on the way up, hedged
// or not: a lost slot would refuse the scope's attempts for good.
func TestBulkheadSlotReturnedWhenBasePanics(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		t.Run(fmt.Sprintf("hedged=%v", hedged), func(t *testing.T) {
			noGoroutineLeft(t)
			base := &panicBase{}
			// As many panics as slots: each slot lost would be gone for
			// good, and the call after them refused. A hedge needs a
			// second slot (MaxHedges with one is refused).
			slots := 1
			tr := &Transport{Base: base, Retry: RetryPolicy{Budget: budget.Unlimited()}}
			if hedged {
				slots = 2
				tr.Hedge.Max, tr.Hedge.Delay = 1, time.Hour
			}
			tr.Load.MaxInFlight = slots
			tr = newTransport(t, newFakeClock(), tr)
			setSleep(tr, func(ctx context.Context, _ time.Duration) error { <-ctx.Done(); return ctx.Err() })
			for range slots {
				if !roundTripPanics(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")) {
					t.Fatal("the base's panic did not reach the caller")
				}
			}
			base.status.Store(http.StatusOK)
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("the call after the panic: got %v, want a 200 (the slot given back)", err)
			}
		})
	}
}
