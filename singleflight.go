package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// This file is single-flight (Transport.ShareReads): concurrent identical
// reads share one call, its retries and hedges included. It sits outside
// the retry and inside the Fallback: each caller gets its own copy of the
// shared result, and its own Fallback's answer to it.
//
// The shared call runs on a goroutine of its own, with a context detached
// from any one caller's (the first caller's values kept), so that the
// caller who started it may go without cancelling it for the others; it
// is cancelled when the last caller waiting for it has gone, and that
// caller returns only once it has ended. It plans against the latest
// deadline of the callers who joined it (none once one had none;
// call.deadline) as an unshared call plans against its caller's, and
// gives up at once on a Retry-After past it. That deadline is not its
// context's, as it moves when a caller joins: its attempts keep their
// whole AttemptTimeout (attemptTimeout), and nothing cancels the call at
// that deadline but the last caller going.

// defaultMaxSharedBody is MaxSharedBody's default.
const defaultMaxSharedBody = 1 << 20

// errNotShared: the request was not shared, and makes its own call.
var errNotShared = errors.New("retryfuse: not shared")

// flights are the shared calls in flight of a Transport, by key.
type flights struct {
	mu sync.Mutex
	m  map[string]*sharedFlight
}

// sharedFlight is one shared call and the callers waiting for it.
type sharedFlight struct {
	key    string
	id     uint64 // the shared call's CallID, while there are hooks
	req    *http.Request
	cancel context.CancelFunc
	done   chan struct{} // closed once res is set and the call has ended

	// Guarded by flights.mu.
	waiters    int  // callers waiting, the leader among them
	leaderGone bool // the caller who started it has gone
	finished   bool // res is set
	unbounded  bool // a caller without a deadline joined

	// The latest deadline of the callers who joined, nil when there is
	// none (unbounded); written under flights.mu, read by the shared call
	// as it plans (call.deadline).
	deadline atomic.Pointer[time.Time]

	res sharedResult // set before done is closed; read-only after
}

// shareable reports whether req may share a call: a GET or HEAD without a
// body or an upgrade, which no retryfuse Transport above owns.
func shareable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead:
	default:
		return false
	}
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	if req.Header.Get("Upgrade") != "" {
		return false
	}
	_, owned := req.Context().Value(ownerKey{}).(*Transport)
	return !owned
}

// shareRead makes req's call a shared one: it joins the call in flight
// under the request's key, or starts it. It returns errNotShared when req
// makes its own call (its key is empty, the key function panicked, or the
// shared response's body was too large to share), with the CallID its
// events were reported under, if any.
func (t *Transport) shareRead(req *http.Request) (uint64, *http.Response, error) {
	key, kerr := shareKeyOf(t.p.shareKey, req)
	c := t.sharingCall(req)
	if key == "" {
		if kerr != nil {
			c.shareEvent(actionUnshared, 0, kerr)
		}
		return c.id, nil, errNotShared
	}
	f, leader := t.flights.join(t, key, req)
	if leader {
		c.id = f.id
		c.shareEvent(actionLed, f.id, nil)
		go t.fly(f)
	} else {
		c.shareEvent(actionFollowed, f.id, nil)
	}
	select {
	case <-f.done:
	case <-req.Context().Done():
	}
	finished, stream := t.flights.leave(f, leader)
	if !finished {
		return c.id, nil, req.Context().Err()
	}
	r := &f.res
	if r.panicked != nil {
		panic(r.panicked)
	}
	var resp *http.Response
	switch {
	case r.err != nil:
	case r.tooLarge && stream == nil:
		c.shareEvent(actionUnshared, f.id, &sharedBodyError{limit: t.p.maxSharedBody})
		return c.id, nil, errNotShared
	case stream != nil:
		resp = stream
		resp.Request = req
	default:
		resp = r.copyFor(req)
	}
	if t.p.fallback == nil {
		return c.id, resp, r.err
	}
	c.gaveUp = r.gaveUp
	c.step()
	resp, err := c.fallback(resp, r.err)
	return c.id, resp, err
}

// sharingCall returns the call that stands for req while it shares
// another's: it makes no attempt, and only reports (its events, and the
// Fallback's).
func (t *Transport) sharingCall(req *http.Request) call {
	c := call{t: t, p: &t.p, req: req, method: req.Method}
	if c.method == "" {
		c.method = http.MethodGet
	}
	if t.Hooks.any() {
		c.start = t.p.clock.Now()
	}
	return c
}

// shareEvent reports a single-flight event of the call, shared naming the
// shared call. The call is numbered when it was not.
func (c *call) shareEvent(action string, shared uint64, err error) {
	if h := c.t.Hooks.Policy; h != nil {
		c.step() // the time of this event, not of an earlier one
		emit(h, PolicyInfo{CallInfo: c.info(), Policy: policySingleFlight, Action: action, Err: err, SharedCallID: shared})
	}
}

// join adds a caller to the flight under key, starting it when there is
// none: the caller is then its leader.
func (fs *flights) join(t *Transport, key string, req *http.Request) (*sharedFlight, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[key]; f != nil {
		f.waiters++
		f.joinedLocked(req.Context())
		return f, false
	}
	f := &sharedFlight{key: key, done: make(chan struct{}), waiters: 1}
	f.joinedLocked(req.Context())
	ctx, cancel := context.WithCancel(context.WithoutCancel(req.Context()))
	f.req, f.cancel = req.Clone(ctx), cancel
	if t.Hooks.any() {
		f.id = t.calls.Add(1)
	}
	if fs.m == nil {
		fs.m = make(map[string]*sharedFlight)
	}
	fs.m[key] = f
	return f, true
}

// joinedLocked takes the deadline of a caller's context into the one the
// shared call plans against: the latest, or none once a caller has none.
// A caller who goes does not shorten it: the call may outlast the
// deadlines of those left, who then go, and the last cancels it.
// flights.mu is held.
func (f *sharedFlight) joinedLocked(ctx context.Context) {
	if f.unbounded {
		return
	}
	dl, ok := ctx.Deadline()
	if !ok {
		f.unbounded = true
		f.deadline.Store(nil)
		return
	}
	if cur := f.deadline.Load(); cur == nil || dl.After(*cur) {
		f.deadline.Store(&dl)
	}
}

// latest returns the deadline the shared call plans against: the latest
// of its callers', or none. It is not its context's: a context's deadline
// never moves (context.Context), and this one does as callers join.
func (f *sharedFlight) latest() (time.Time, bool) {
	if dl := f.deadline.Load(); dl != nil {
		return *dl, true
	}
	return time.Time{}, false
}

// leave ends a caller's wait. It reports whether the result is in, and,
// to the leader, hands the response too large to share. The last caller
// to go before the result cancels the call and waits until it has ended,
// so that no goroutine outlives every caller.
func (fs *flights) leave(f *sharedFlight, leader bool) (finished bool, stream *http.Response) {
	fs.mu.Lock()
	f.waiters--
	if f.finished {
		if leader {
			stream, f.res.stream = f.res.stream, nil
		}
		fs.mu.Unlock()
		return true, stream
	}
	if leader {
		f.leaderGone = true
	}
	last := f.waiters == 0
	if last && fs.m[f.key] == f {
		delete(fs.m, f.key) // no one joins a call being cancelled
	}
	fs.mu.Unlock()
	if last {
		f.cancel()
		<-f.done
	}
	return false, nil
}

// fly makes the shared call, on its own goroutine, and publishes its
// result.
func (t *Transport) fly(f *sharedFlight) {
	var res sharedResult
	func() {
		defer func() {
			if v := recover(); v != nil {
				res = sharedResult{panicked: v}
			}
		}()
		c := call{t: t, p: &t.p, req: f.req, w: new(wire), id: f.id, flight: f}
		if c.id != 0 {
			c.start = t.p.clock.Now()
		}
		resp, err := c.run()
		res = t.share(resp, err, f.cancel)
		res.gaveUp = c.gaveUp
	}()
	if res.stream == nil {
		f.cancel() // the call is over, and nothing reads on
	}

	fs := &t.flights
	fs.mu.Lock()
	f.res, f.finished = res, true
	if fs.m[f.key] == f {
		delete(fs.m, f.key)
	}
	orphan := f.leaderGone && res.stream != nil
	if orphan {
		f.res.stream = nil
	}
	fs.mu.Unlock()
	if orphan {
		drain(res.stream, 0) // no one to hand it to
	}
	close(f.done)
}
