package retryfuse

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The waits and recorders of the hedge, bulkhead, rate limiter and
// Fallback tests: sleeps and deadlines the test releases, calls made on
// another goroutine, the Policy events, and the check that no goroutine
// is left behind.

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

// heldDeadline is a caller's context with a deadline that strikes when
// the test says, not when the real clock reaches it.
type heldDeadline struct {
	context.Context
	deadline time.Time
	done     chan struct{}
	once     sync.Once
}

func newHeldDeadline(deadline time.Time) *heldDeadline {
	return &heldDeadline{Context: context.Background(), deadline: deadline, done: make(chan struct{})}
}

func (c *heldDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *heldDeadline) Done() <-chan struct{} { return c.done }

func (c *heldDeadline) expire() { c.once.Do(func() { close(c.done) }) }

func (c *heldDeadline) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
