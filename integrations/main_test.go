package integrations

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stallCap bounds how long a fake server stalls when the client never
// goes away, so that no test can hang on a handler.
const stallCap = 5 * time.Second

// deadline is the caller's (or the proxy's) deadline in the scenarios
// where a server applies a write and then stalls: long enough for a
// loopback request to be written under the race detector, short enough to
// keep the tests quick.
const deadline = 500 * time.Millisecond

// attemptTimeout bounds one attempt in the scenarios where the caller's
// context must stay alive while an attempt is cut.
const attemptTimeout = 300 * time.Millisecond

// effects counts, on the side of a fake server, the requests it received
// and the writes it applied, and remembers the result of each idempotency
// key as a server that honours keys does: a request under a key that was
// already applied is answered with the stored result, not applied again.
type effects struct {
	mu       sync.Mutex
	requests []seen
	applied  int
	results  map[string][]byte // by idempotency key
}

// seen is one request as the server received it.
type seen struct {
	Method, Path, Key string
	Header            http.Header
}

// record counts r and returns its number, from 1, and its idempotency key
// (read under any spelling of the header, as retryfuse may send it).
func (e *effects) record(r *http.Request) (n int, key string) {
	key, _ = retryfuse.IdempotencyKeyOf(r.Header)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests = append(e.requests, seen{Method: r.Method, Path: r.URL.Path, Key: key, Header: r.Header.Clone()})
	return len(e.requests), key
}

// stored returns the result stored under key, if the write it names was
// applied.
func (e *effects) stored(key string) ([]byte, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.results[key]
	return b, ok && key != ""
}

// apply applies one write and stores its result under key (when there is
// one).
func (e *effects) apply(key string, result []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.applied++
	if key != "" {
		if e.results == nil {
			e.results = map[string][]byte{}
		}
		e.results[key] = result
	}
}

// Requests is the number of requests the server received.
func (e *effects) Requests() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.requests)
}

// Applied is the number of writes the server applied.
func (e *effects) Applied() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.applied
}

// Seen returns the requests the server received, in order.
func (e *effects) Seen() []seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.requests)
}

// Keys returns the idempotency key of each request, in order.
func (e *effects) Keys() []string {
	var keys []string
	for _, s := range e.Seen() {
		keys = append(keys, s.Key)
	}
	return keys
}

// stall holds a request whose write was applied without answering it,
// until the client goes away (its deadline or attempt timeout struck) or
// stallCap passes. The body must have been read: net/http notices a client
// that went away only once the request body is consumed.
func stall(r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-time.After(stallCap):
	}
}

// newServer starts h on a loopback port, closed when the test ends.
func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// fast returns tr with a short backoff, so that the tests spend no time
// waiting between attempts; no count depends on it. Its idle connections
// are closed when the test ends.
func fast(t *testing.T, tr *retryfuse.Transport) *retryfuse.Transport {
	t.Helper()
	// The tests count what each layer sends to a dependency that rejects
	// everything: the throttle of new calls, which would refuse a share of
	// them once the dependency has rejected five, is left off (the
	// default), so that the figures are the retry layers' own.
	tr.Retry.InitialBackoff = time.Millisecond
	tr.Retry.MaxBackoff = 5 * time.Millisecond
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// allSame reports whether every string of ss is non-empty and equal to the
// first.
func allSame(ss []string) bool {
	for _, s := range ss {
		if s == "" || s != ss[0] {
			return false
		}
	}
	return len(ss) > 0
}
