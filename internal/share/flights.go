// Package share is the machinery of shared reads (retryfuse's
// ReadPolicy): concurrent identical reads share one call. It holds what
// makes two reads identical (KeyOf), the flights in flight by key and the
// callers waiting for each (Flights), the latest deadline of those callers
// (Flight.Latest), and the shared result, read once and copied for each
// caller (Result). The shared call itself is the caller's to make, on a
// goroutine of its own, between Flights.Join and Flights.Land.
//
// The shared call runs under a context detached from any one caller's
// cancellation (the first caller's values kept), so that the caller who
// started it may go without cancelling it for the others. It is cancelled
// when the last caller waiting for it has gone, and that caller returns
// only once it has ended: no goroutine outlives every caller.
package share

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Flights are the shared calls in flight, by key. The zero value is ready
// to use. This type is concurrency safe.
type Flights struct {
	mu sync.Mutex
	m  map[string]*Flight
}

// Flight is one shared call and the callers waiting for it.
type Flight struct {
	key    string
	id     uint64 // the shared call's number, if it has one
	req    *http.Request
	cancel context.CancelFunc
	done   chan struct{} // closed once res is set and the call has ended

	// Guarded by Flights.mu.
	waiters    int  // callers waiting, the leader among them
	leaderGone bool // the caller who started it has gone
	finished   bool // res is set
	unbounded  bool // a caller without a deadline joined

	// The latest deadline of the callers who joined, nil when there is
	// none (unbounded); written under Flights.mu, read by the shared call
	// as it plans (Latest).
	deadline atomic.Pointer[time.Time]

	res Result // set before done is closed; read-only after, but for res.stream
}

// ID returns the number the shared call was given at Join; zero if none.
func (f *Flight) ID() uint64 { return f.id }

// Request returns the request the shared call makes: the leader's, under
// a context detached from its cancellation, which ends when the last
// caller goes or the call is over.
func (f *Flight) Request() *http.Request { return f.req }

// Join adds a caller of req to the flight under key, starting it when
// there is none: the caller is then its leader, and must make the call
// (Request) and publish its result (Land). A new flight is numbered from
// ids, when ids is not nil. The caller's deadline is taken into the one
// the call plans against (Latest).
func (fs *Flights) Join(key string, req *http.Request, ids *atomic.Uint64) (f *Flight, leader bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[key]; f != nil {
		f.waiters++
		f.joinedLocked(req.Context())
		return f, false
	}
	f = &Flight{key: key, done: make(chan struct{}), waiters: 1}
	f.joinedLocked(req.Context())
	ctx, cancel := context.WithCancel(context.WithoutCancel(req.Context()))
	f.req, f.cancel = req.Clone(ctx), cancel
	if ids != nil {
		f.id = ids.Add(1)
	}
	if fs.m == nil {
		fs.m = make(map[string]*Flight)
	}
	fs.m[key] = f
	return f, true
}

// joinedLocked takes the deadline of a caller's context into the one the
// shared call plans against: the latest, or none once a caller has none.
// A caller who goes does not shorten it: the call may outlast the
// deadlines of those left, who then go, and the last cancels it.
// Flights.mu is held.
func (f *Flight) joinedLocked(ctx context.Context) {
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

// Latest returns the deadline the shared call plans against: the latest
// of its callers', or none. It is not its context's: a context's deadline
// never moves (context.Context), and this one does as callers join.
func (f *Flight) Latest() (time.Time, bool) {
	if dl := f.deadline.Load(); dl != nil {
		return *dl, true
	}
	return time.Time{}, false
}

// Wait waits for f's result or the end of ctx, the context of a caller who
// joined it, and ends that caller's wait. It returns the result when it is
// in, nil otherwise, and, to the leader, the response too large to share,
// to read on. The last caller to go before the result cancels the call
// and waits until it has ended, so that no goroutine outlives every
// caller.
func (fs *Flights) Wait(ctx context.Context, f *Flight, leader bool) (res *Result, stream *http.Response) {
	select {
	case <-f.done:
	case <-ctx.Done():
	}
	fs.mu.Lock()
	f.waiters--
	if f.finished {
		if leader {
			stream, f.res.stream = f.res.stream, nil
		}
		fs.mu.Unlock()
		return &f.res, stream
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
	return nil, nil
}

// Land publishes the result of f's call, once the call has ended, and
// wakes its callers. The call's context ends, unless the leader has a
// stream to read on; a stream whose leader has gone is closed, for no one
// would read it.
func (fs *Flights) Land(f *Flight, res Result) {
	if res.stream == nil {
		f.cancel() // the call is over, and nothing reads on
	}
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
		_ = res.stream.Body.Close() // no one to hand it to
	}
	close(f.done)
}
