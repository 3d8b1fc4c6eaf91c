package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// Hedged attempt groups that fail in part or in whole: the retries that
// follow, the history the decision core reads, the caller's cancellation
// and a panicking base.

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
	tr := hedgedTransport(t, g, &Transport{Retry: RetryPolicy{MaxAttempts: 4}, Hooks: hooks.hooks()})

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

// The decision core sees each failed branch: with a MaxFailureStreak of 2,
// one group of two failed branches stops the call.
func TestHedgeFailedBranchesCountInHistory(t *testing.T) {
	noGoroutineLeft(t)
	srv := newBranchServer(t)
	srv.hold(1, 2)
	srv.fail(1, 2)
	g := newGatedSleep(newFakeClock())
	gu := &giveUpLog{}
	tr := hedgedTransport(t, g, &Transport{Retry: RetryPolicy{MaxAttempts: 10, MaxFailureStreak: 2}, Hooks: Hooks{GiveUp: gu.hook}})

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
	if n := gu.count(ErrFailureStreak); n != 1 {
		t.Errorf("GiveUp with ErrFailureStreak: got %d (reasons %v), want 1", n, gu.reasons)
	}
	if n := g.asked(); n != 0 {
		t.Errorf("sleeps after the group failed: got %d, want none", n)
	}
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
