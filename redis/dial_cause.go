package retryfuseredis

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"
)

// This file is how an error of a Redis call names why Redis could not be
// reached. go-redis dials in the background, retrying, while the call
// waits for a connection; when the call's context ends first, its error is
// the context's, and the dial's own error (connection refused, no such
// host) goes only to go-redis's log. So each client the budgets and the
// ledger use gets a dial hook, once, that keeps the error of its last
// dial, and an error of a call that got no answer carries it.

// dialWatch is a client's dial hook: it keeps the error of the client's
// last dial, nil once a dial succeeds. It holds nothing of the client, so
// that the registry below does not keep a client alive. This type is
// concurrency safe.
type dialWatch struct {
	last atomic.Pointer[error]
}

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		switch {
		case err == nil:
			w.last.Store(nil)
		case !errors.Is(err, context.Canceled):
			// A dial given up by its caller says nothing of the server.
			w.last.Store(&err)
		}
		return conn, err
	}
}

func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// lastError returns the error of the client's last dial, nil when it
// succeeded (or none was made).
func (w *dialWatch) lastError() error {
	if w == nil {
		return nil
	}
	if p := w.last.Load(); p != nil {
		return *p
	}
	return nil
}

// watches holds the dial hook of each client given to a budget or a
// ledger, so that a client shared by many gets one hook. A client is held
// weakly: its entry goes when it is collected.
var watches struct {
	mu sync.Mutex
	m  map[any]*dialWatch // a weak.Pointer to the client → its hook
}

// watchDials gives client its dial hook, unless it has one already, and
// returns it: on a *redis.Client itself, on every node client of a
// *redis.ClusterClient made from now on (go-redis makes them on first use),
// on every shard of a *redis.Ring. Another UniversalClient is not
// watched: nil.
func watchDials(client redis.UniversalClient) *dialWatch {
	switch c := client.(type) {
	case *redis.Client:
		return watchOnce(c, func(w *dialWatch) { c.AddHook(w) })
	case *redis.ClusterClient:
		return watchOnce(c, func(w *dialWatch) { c.OnNewNode(func(n *redis.Client) { n.AddHook(w) }) })
	case *redis.Ring:
		return watchOnce(c, func(w *dialWatch) {
			c.OnNewNode(func(n *redis.Client) { n.AddHook(w) })
			// The shards made already: ForEachShard sends nothing itself.
			_ = c.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
				n.AddHook(w)
				return nil
			})
		})
	}
	return nil
}

func watchOnce[T any](c *T, install func(*dialWatch)) *dialWatch {
	key := weak.Make(c)
	watches.mu.Lock()
	defer watches.mu.Unlock()
	if w := watches.m[key]; w != nil {
		return w
	}
	if watches.m == nil {
		watches.m = make(map[any]*dialWatch)
	}
	w := &dialWatch{}
	install(w)
	watches.m[key] = w
	runtime.AddCleanup(c, func(key weak.Pointer[T]) {
		watches.mu.Lock()
		delete(watches.m, key)
		watches.mu.Unlock()
	}, key)
	return w
}

// watchOf returns client's dial hook, nil when it has none.
func watchOf(client redis.UniversalClient) *dialWatch {
	var key any
	switch c := client.(type) {
	case *redis.Client:
		key = weak.Make(c)
	case *redis.ClusterClient:
		key = weak.Make(c)
	case *redis.Ring:
		key = weak.Make(c)
	default:
		return nil
	}
	watches.mu.Lock()
	defer watches.mu.Unlock()
	return watches.m[key]
}

// unavailableError is the error of a Redis call of a budget or the ledger
// that failed: it wraps ErrUnavailable, the call's error, and, when Redis
// gave no answer and the client's last dial failed, that dial's error.
type unavailableError struct {
	what string // the call, when worth naming; may be empty
	err  error  // the call's own error
	dial error  // the client's last dial error, or nil
}

func (e *unavailableError) Error() string {
	s := ErrUnavailable.Error() + ": "
	if e.what != "" {
		s += e.what + ": "
	}
	s += e.err.Error()
	if e.dial != nil {
		s += " (last connection attempt: " + e.dial.Error() + ")"
	}
	return s
}

func (e *unavailableError) Unwrap() []error {
	if e.dial == nil {
		return []error{ErrUnavailable, e.err}
	}
	return []error{ErrUnavailable, e.err, e.dial}
}

// unavailable returns the error of a call of client that failed with err,
// named what (or unnamed: ""): the one place where the budgets and the
// ledger make such errors. It carries client's last dial error when that
// dial failed, unless Redis answered the call (a reply error) or err is a
// failed dial itself.
func unavailable(client redis.UniversalClient, what string, err error) error {
	e := &unavailableError{what: what, err: err}
	var reply redis.Error
	if !errors.As(err, &reply) && !isDialError(err) {
		e.dial = watchOf(client).lastError()
	}
	return e
}

// isDialError reports whether err is a failed dial: no connection was
// made.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
