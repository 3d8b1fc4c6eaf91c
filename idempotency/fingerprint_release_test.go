package idempotency

import (
	"net/http"
	"testing"

	"github.com/retryfuse/retryfuse/ledger"
)

// A key reused with another query is another operation: refused (422),
// never given the first's stored response.
func TestQueryIsPartOfTheFingerprint(t *testing.T) {
	next := &counter{}
	h, _ := newHandler(t, next, Config{})
	if w := serve(h, post("/transfer?to=alice", "k1", `{"amount":5}`)); w.Code != http.StatusCreated {
		t.Fatalf("first: status %d, want 201", w.Code)
	}
	w := serve(h, post("/transfer?to=bob", "k1", `{"amount":5}`))
	problemOf(t, w, ProblemKeyReused, http.StatusUnprocessableEntity)
	if n := next.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	// The honest repeat, with the same query, is the stored response.
	if w := serve(h, post("/transfer?to=alice", "k1", `{"amount":5}`)); w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("repeat: status %d, replayed %q; want the stored 201", w.Code, w.Header().Get(HeaderReplayed))
	}
}

// Config.Fingerprint narrows the fingerprint: here the query is left out,
// so a repeat whose signature changed is still the same operation.
func TestFingerprintSettingNarrowsIt(t *testing.T) {
	next := &counter{}
	h, _ := newHandler(t, next, Config{Fingerprint: func(r *http.Request, body []byte) ledger.Fingerprint {
		return FingerprintOf(r.Method, r.URL.EscapedPath(), "", body)
	}})
	serve(h, post("/upload?sig=aaa", "k1", "x"))
	w := serve(h, post("/upload?sig=bbb", "k1", "x"))
	if w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("repeat with another signature: status %d, replayed %q; want the stored 201", w.Code, w.Header().Get(HeaderReplayed))
	}
	if n := next.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// The default fingerprint is the one retryfuse's Transport computes, the
// query included: both halves agree.
func TestFingerprintOfMatchesTheTransport(t *testing.T) {
	spy := &spyLedger{Ledger: &ledger.Memory{}}
	h, _ := newHandler(t, &counter{}, Config{Ledger: spy})
	serve(h, post("/transfer?to=alice", "k1", "body"))
	want := FingerprintOf(http.MethodPost, "/transfer", "to=alice", []byte("body"))
	if len(spy.fps) != 1 || spy.fps[0] != want {
		t.Errorf("stored fingerprints %x, want [%x]", spy.fps, want)
	}
	if FingerprintOf(http.MethodPost, "/transfer", "", []byte("body")) == want {
		t.Error("the fingerprint without the query equals the one with it")
	}
}

// A handler that answered a failure before doing anything releases its
// key: the response goes out unstored, and a repeat runs afresh.
func TestReleaseFreesTheKey(t *testing.T) {
	runs := 0
	spy := &spyLedger{Ledger: &ledger.Memory{}}
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if runs == 1 {
			if !Release(w) {
				t.Error("Release: false for a claimed request's writer")
			}
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}), Config{Ledger: spy})
	if w := serve(h, post("/charges", "k1", "x")); w.Code != http.StatusServiceUnavailable || w.Header().Get(HeaderReplayed) != "" {
		t.Fatalf("first: status %d, replayed %q; want the handler's 503", w.Code, w.Header().Get(HeaderReplayed))
	}
	if w := serve(h, post("/charges", "k1", "x")); w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "" {
		t.Errorf("repeat: status %d, replayed %q; want a fresh run's 201", w.Code, w.Header().Get(HeaderReplayed))
	}
	if runs != 2 {
		t.Errorf("handler ran %d times, want 2", runs)
	}
	if w := serve(h, post("/charges", "k1", "x")); w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("third: status %d, replayed %q; want the stored 201", w.Code, w.Header().Get(HeaderReplayed))
	}
	if want := []string{"release", "complete"}; len(spy.steps) != 2 || spy.steps[0] != want[0] || spy.steps[1] != want[1] {
		t.Errorf("ledger steps %v, want %v", spy.steps, want)
	}
}

// unwrapping is a ResponseWriter of other middleware, which unwraps to
// the one it wraps.
type unwrapping struct{ http.ResponseWriter }

func (u unwrapping) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// Release finds the middleware's writer beneath others that unwrap, and
// reports false for a writer that is not one.
func TestReleaseThroughWrappers(t *testing.T) {
	var found bool
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		found = Release(unwrapping{w})
		w.WriteHeader(http.StatusServiceUnavailable)
	}), Config{})
	serve(h, post("/charges", "k1", "x"))
	if !found {
		t.Error("Release through a wrapper: false, want true")
	}
	if Release(unwrapping{nil}) || Release(nil) {
		t.Error("Release of a writer the middleware did not give: true, want false")
	}
}
