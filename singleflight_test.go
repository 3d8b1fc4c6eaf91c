package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Single-flight (ShareReads): concurrent identical reads share one call,
// each caller with a copy of its own; a caller that goes leaves the others
// be; the call is cancelled once every caller has gone; a body over the
// bound is not shared; writes and different credentials never share.

// heldServer is a loopback server whose handler waits for release (or its
// client to go) before it answers with answer.
type heldServer struct {
	*testServer
	release   chan struct{}
	once      sync.Once
	cancelled atomic.Int32 // requests whose client went before release
}

func newHeldServer(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *heldServer {
	t.Helper()
	s := &heldServer{release: make(chan struct{})}
	s.testServer = newTestServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.release:
			answer(n, w, r)
		case <-r.Context().Done():
			s.cancelled.Add(1)
		}
	})
	t.Cleanup(s.open) // before the server closes, so that no handler holds it open
	return s
}

func (s *heldServer) open() { s.once.Do(func() { close(s.release) }) }

// shareLog records the single-flight events.
type shareLog struct {
	mu      sync.Mutex
	all     []PolicyInfo
	changed chan struct{} // closed at the next event
}

func newShareLog() *shareLog { return &shareLog{changed: make(chan struct{})} }

func (l *shareLog) hook(i PolicyInfo) {
	if i.Policy != policySingleFlight {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, i)
	close(l.changed)
	l.changed = make(chan struct{})
}

// await waits until n events of action have come, in all.
func (l *shareLog) await(t *testing.T, action string, n int) {
	t.Helper()
	for {
		l.mu.Lock()
		got, changed := l.countLocked(action), l.changed
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-time.After(callWait):
			t.Fatalf("%d %q events of %d came", got, action, n)
		}
	}
}

func (l *shareLog) count(action string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.countLocked(action)
}

func (l *shareLog) countLocked(action string) int {
	n := 0
	for _, i := range l.all {
		if i.Action == action {
			n++
		}
	}
	return n
}

func (l *shareLog) events() []PolicyInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

// shareTransport is a Transport that shares reads, on a fake clock that
// never waits, its events recorded by log.
func shareTransport(t *testing.T, log *shareLog, tr *Transport) *Transport {
	t.Helper()
	tr.Reads.Share = true
	tr.Hooks.Policy = log.hook
	if tr.Retry.Budget == nil {
		tr.Retry.Budget = budget.Unlimited()
	}
	return newTransport(t, newFakeClock(), tr)
}

func getReq(t *testing.T, ctx context.Context, url string, header ...string) *http.Request {
	t.Helper()
	req := newRequest(t, ctx, http.MethodGet, url, "")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

func TestShareReads100IdenticalGETsMakeOneRequest(t *testing.T) {
	noGoroutineLeft(t)
	const callers = 100
	srv := newHeldServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		time.Sleep(50 * time.Millisecond) // the dependency's latency, on a real socket
		w.Header().Set("X-Answer", fmt.Sprint(n))
		_, _ = io.WriteString(w, "the answer")
	})
	log := newShareLog()
	tr := shareTransport(t, log, &Transport{})
	calls := make([]*asyncCall, callers)
	for i := range calls {
		calls[i] = goDo(tr, getReq(t, testCtx(t), srv.URL+"/items?page=1", "Authorization", "Bearer same", "Accept", "application/json"))
	}
	log.await(t, actionFollowed, callers-1)
	srv.open()
	var leader uint64
	for i, c := range calls {
		c.wait(t)
		require.NoError(t, c.err, "caller %d", i)
		assert.Equal(t, "the answer", c.body, "caller %d", i)
		assert.Equal(t, "1", c.resp.Header.Get("X-Answer"), "caller %d", i)
		c.resp.Header.Set("X-Answer", fmt.Sprint("mine ", i)) // a copy of its own
	}
	assert.Equal(t, 1, srv.count(), "requests at the dependency")
	for i, c := range calls {
		assert.Equal(t, fmt.Sprint("mine ", i), c.resp.Header.Get("X-Answer"))
	}
	assert.Equal(t, 1, log.count(actionLed))
	assert.Equal(t, callers-1, log.count(actionFollowed))
	ids := map[uint64]bool{}
	for _, e := range log.events() {
		if e.Action == actionLed {
			leader = e.CallID
		}
		ids[e.CallID] = true
	}
	for _, e := range log.events() {
		assert.Equal(t, leader, e.SharedCallID, "%s of call %d names the shared call", e.Action, e.CallID)
	}
	assert.Len(t, ids, callers, "each caller under a call ID of its own")
}

func TestShareReadsNeverAcrossCredentials(t *testing.T) {
	const callers = 100
	srv := newHeldServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "for "+r.Header.Get("Authorization"))
	})
	log := newShareLog()
	tr := shareTransport(t, log, &Transport{})
	calls := make([]*asyncCall, callers)
	for i := range calls {
		calls[i] = goDo(tr, getReq(t, testCtx(t), srv.URL+"/me", "Authorization", fmt.Sprint("Bearer user-", i)))
	}
	log.await(t, actionLed, callers)
	srv.open()
	for i, c := range calls {
		c.wait(t)
		require.NoError(t, c.err)
		assert.Equal(t, fmt.Sprint("for Bearer user-", i), c.body)
	}
	assert.Equal(t, callers, srv.count(), "requests at the dependency")
	assert.Zero(t, log.count(actionFollowed))
}

func TestShareReadsFollowerCancelledLeavesTheOthersBe(t *testing.T) {
	noGoroutineLeft(t)
	srv := newHeldServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	log := newShareLog()
	tr := shareTransport(t, log, &Transport{})
	leader := goDo(tr, getReq(t, testCtx(t), srv.URL))
	log.await(t, actionLed, 1)
	ctxs := make([]context.CancelFunc, 3)
	followers := make([]*asyncCall, 3)
	for i := range followers {
		ctx, cancel := context.WithCancel(testCtx(t))
		ctxs[i] = cancel
		followers[i] = goDo(tr, getReq(t, ctx, srv.URL))
	}
	log.await(t, actionFollowed, 3)

	ctxs[1]()
	gone := followers[1].wait(t)
	assert.ErrorIs(t, gone.err, context.Canceled, "the follower that went")
	select {
	case <-leader.done:
		t.Fatal("the leader returned when a follower went")
	default:
	}

	srv.open()
	for i, c := range []*asyncCall{leader, followers[0], followers[2]} {
		c.wait(t)
		require.NoError(t, c.err, "caller %d", i)
		assert.Equal(t, "ok", c.body)
	}
	assert.Equal(t, 1, srv.count())
	assert.Zero(t, srv.cancelled.Load(), "the shared request cancelled")
	ctxs[0]()
	ctxs[2]()
}

func TestShareReadsLeaderCancelledLeavesTheFollowersBe(t *testing.T) {
	noGoroutineLeft(t)
	srv := newHeldServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	log := newShareLog()
	tr := shareTransport(t, log, &Transport{})
	ctx, cancel := context.WithCancel(testCtx(t))
	leader := goDo(tr, getReq(t, ctx, srv.URL))
	log.await(t, actionLed, 1)
	follower := goDo(tr, getReq(t, testCtx(t), srv.URL))
	log.await(t, actionFollowed, 1)
	cancel()
	assert.ErrorIs(t, leader.wait(t).err, context.Canceled)
	srv.open()
	follower.wait(t)
	require.NoError(t, follower.err)
	assert.Equal(t, "ok", follower.body)
	assert.Equal(t, 1, srv.count())
}

func TestShareReadsCallCancelledWhenEveryCallerHasGone(t *testing.T) {
	noGoroutineLeft(t)
	srv := newHeldServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	log := newShareLog()
	tr := shareTransport(t, log, &Transport{})
	ctx, cancel := context.WithCancel(testCtx(t))
	first := goDo(tr, getReq(t, ctx, srv.URL))
	log.await(t, actionLed, 1)
	second := goDo(tr, getReq(t, ctx, srv.URL))
	log.await(t, actionFollowed, 1)
	require.True(t, poll(settleBound, func() bool { return srv.count() == 1 }), "the shared request at the server")
	cancel()
	assert.ErrorIs(t, first.wait(t).err, context.Canceled)
	assert.ErrorIs(t, second.wait(t).err, context.Canceled)
	require.True(t, poll(settleBound, func() bool { return srv.cancelled.Load() == 1 }), "the shared request was not cancelled")

	// The flight is gone: the next read makes a call of its own.
	srv.open()
	c := goDo(tr, getReq(t, testCtx(t), srv.URL)).wait(t)
	require.NoError(t, c.err)
	assert.Equal(t, "ok", c.body)
	assert.Equal(t, 2, srv.count())
	assert.Equal(t, 2, log.count(actionLed))
}

func TestShareReadsBodyOverTheBoundIsNotShared(t *testing.T) {
	noGoroutineLeft(t)
	big := strings.Repeat("x", 64<<10)
	for name, length := range map[string]bool{"with a Content-Length": true, "chunked": false} {
		t.Run(name, func(t *testing.T) {
			srv := newHeldServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				if length {
					w.Header().Set("Content-Length", fmt.Sprint(len(big)))
				}
				_, _ = io.WriteString(w, big)
			})
			log := newShareLog()
			tr := shareTransport(t, log, &Transport{Reads: ReadPolicy{MaxSharedBody: 1 << 10}})
			leader := goDo(tr, getReq(t, testCtx(t), srv.URL))
			log.await(t, actionLed, 1)
			followers := make([]*asyncCall, 3)
			for i := range followers {
				followers[i] = goDo(tr, getReq(t, testCtx(t), srv.URL))
			}
			log.await(t, actionFollowed, 3)
			srv.open()
			for i, c := range append([]*asyncCall{leader}, followers...) {
				c.wait(t)
				require.NoError(t, c.err, "caller %d", i)
				assert.Equal(t, len(big), len(c.body), "caller %d: its body whole", i)
			}
			assert.Equal(t, 4, srv.count(), "the shared call, and one of each follower's own")
			assert.Equal(t, 3, log.count(actionUnshared))
			for _, e := range log.events() {
				if e.Action == actionUnshared {
					assert.ErrorContains(t, e.Err, "over MaxSharedBody (1024 bytes)")
				}
			}
		})
	}
}

func TestShareReadsShareRetries(t *testing.T) {
	srv := newHeldServer(t, failThenOK(1))
	log := newShareLog()
	tr := shareTransport(t, log, &Transport{Retry: RetryPolicy{MaxAttempts: 3}})
	leader := goDo(tr, getReq(t, testCtx(t), srv.URL))
	log.await(t, actionLed, 1)
	follower := goDo(tr, getReq(t, testCtx(t), srv.URL))
	log.await(t, actionFollowed, 1)
	srv.open()
	for _, c := range []*asyncCall{leader, follower} {
		c.wait(t)
		require.NoError(t, c.err)
		assert.Equal(t, http.StatusOK, c.resp.StatusCode)
		assert.Equal(t, "done", c.body)
	}
	assert.Equal(t, 2, srv.count(), "the first attempt and its retry, for both callers")
}

func TestShareReadsEachCallerHasItsOwnFallback(t *testing.T) {
	srv := newHeldServer(t, failThenOK(100))
	log := newShareLog()
	fb := &fallbackLog{answer: cached}
	tr := shareTransport(t, log, &Transport{Retry: RetryPolicy{MaxAttempts: 1}, Fallback: fb.fallback})
	leader := goDo(tr, getReq(t, testCtx(t), srv.URL))
	log.await(t, actionLed, 1)
	current := goDo(tr, getReq(t, testCtx(t), srv.URL, "Cache-Control", "no-cache"))
	stale := goDo(tr, getReq(t, testCtx(t), srv.URL))
	log.await(t, actionFollowed, 1)
	log.await(t, actionLed, 2) // a no-cache read has another key
	srv.open()
	for _, c := range []*asyncCall{leader, stale} {
		c.wait(t)
		require.NoError(t, c.err)
		assert.Equal(t, "cached", c.body)
		assert.Equal(t, "attempts_exhausted", c.resp.Header.Get("Retryfuse-Fallback"))
	}
	current.wait(t)
	require.NoError(t, current.err)
	assert.Equal(t, http.StatusServiceUnavailable, current.resp.StatusCode, "the dependency's failure, not the Fallback's")
	assert.Equal(t, 2, fb.count())
}

func TestShareReadsPanicOfTheBaseReachesTheCaller(t *testing.T) {
	tr := shareTransport(t, newShareLog(), &Transport{Base: &panicBase{}})
	if !roundTripPanics(tr, getReq(t, testCtx(t), "http://127.0.0.1:1/")) {
		t.Error("the base's panic did not reach the caller")
	}
}

func TestNegativeMaxSharedBodyIsRefused(t *testing.T) {
	for _, tr := range []*Transport{
		{Reads: ReadPolicy{Share: true, MaxSharedBody: -1}},
		{Reads: ReadPolicy{MaxSharedBody: -1}},
	} {
		if err := tr.Validate(); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("Validate() = %v, want ErrInvalidPolicy", err)
		}
	}
}

func TestShareReadsUnderTheLargestMaxSharedBodyKeepTheBody(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "done")
	})
	tr := shareTransport(t, newShareLog(), &Transport{Reads: ReadPolicy{MaxSharedBody: math.MaxInt64}})
	resp, err := tr.RoundTrip(getReq(t, testCtx(t), srv.URL))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, "done", string(body), "a bound of math.MaxInt64 means no bound, not an empty body")
}
