package retryfusetest

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
)

// A Recorder records the effects a handler applies: each time the handler
// it wraps runs, the request's idempotency key (its Idempotency-Key
// header, or X-Idempotency-Key) and its body. Its assertions take a
// testing.TB and report on it. The zero value is ready to use. This type
// is concurrency safe.
type Recorder struct {
	mu      sync.Mutex
	order   []string            // keys in the order first applied
	applied map[string][]string // key → bodies, one per run
	total   int
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Wrap returns a handler that records an effect and then runs h. A nil h
// answers 200 OK with an empty body. Wrap the handler that applies the
// effect, inside any middleware that may answer without running it (the
// idempotency middleware replaying a stored result), so that only real
// effects are counted.
func (r *Recorder) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
			_ = req.Body.Close()
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		r.record(keyOf(req.Header), string(body))
		if h != nil {
			h.ServeHTTP(w, req)
		}
	})
}

// keyOf returns the request's idempotency key, or "" without one.
func keyOf(h http.Header) string {
	if k := h.Get("Idempotency-Key"); k != "" {
		return k
	}
	return h.Get("X-Idempotency-Key")
}

func (r *Recorder) record(key, body string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applied == nil {
		r.applied = map[string][]string{}
	}
	if _, ok := r.applied[key]; !ok {
		r.order = append(r.order, key)
	}
	r.applied[key] = append(r.applied[key], body)
	r.total++
}

// Applied returns how many times an effect was applied under key; "" for
// requests without a key.
func (r *Recorder) Applied(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.applied[key])
}

// Bodies returns the bodies of the effects applied under key, in order.
func (r *Recorder) Bodies(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied[key])
}

// Keys returns the keys under which effects were applied, in the order
// each was first applied; "" stands for requests without a key.
func (r *Recorder) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order)
}

// Total returns how many effects were applied, under any key or none.
func (r *Recorder) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// AtMostOnce reports an error on tb for every key whose effect was applied
// more than once. Requests without a key are not checked.
func (r *Recorder) AtMostOnce(tb testing.TB) {
	tb.Helper()
	for _, key := range r.Keys() {
		if n := r.Applied(key); key != "" && n > 1 {
			tb.Errorf("idempotency key %q: applied %d times, want at most once", key, n)
		}
	}
}

// ExactlyOnce reports an error on tb unless the effect under key was
// applied exactly once.
func (r *Recorder) ExactlyOnce(tb testing.TB, key string) {
	tb.Helper()
	if n := r.Applied(key); n != 1 {
		tb.Errorf("idempotency key %q: applied %d times, want exactly once", key, n)
	}
}

// NotApplied reports an error on tb if any effect was applied under key.
func (r *Recorder) NotApplied(tb testing.TB, key string) {
	tb.Helper()
	if n := r.Applied(key); n != 0 {
		tb.Errorf("idempotency key %q: applied %d times, want never", key, n)
	}
}
