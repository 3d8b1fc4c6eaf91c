package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
)

// The Fallback: asked only for a call that failed all the way, never for
// an uncertain write, a final response or a caller who is gone; a
// Fallback that panics or answers nothing is contained and reported; and
// nothing is ever sent again because of it.

// fallbackLog records the Fallback's calls, and answers with answer.
type fallbackLog struct {
	mu     sync.Mutex
	calls  int
	req    *http.Request
	status int // of the response it was given, 0 for none
	err    error
	answer func(resp *http.Response, err error) (*http.Response, error)
}

func (f *fallbackLog) fallback(req *http.Request, resp *http.Response, err error) (*http.Response, error) {
	f.mu.Lock()
	f.calls++
	f.req, f.err = req, err
	if resp != nil {
		f.status = resp.StatusCode
	}
	f.mu.Unlock()
	return f.answer(resp, err)
}

func (f *fallbackLog) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// cached answers with a 200 "cached", closing the response it is given.
func cached(resp *http.Response, _ error) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("cached"))}, nil
}

// fallbackTransport returns a Transport with fb as its Fallback, its
// policy events recorded by pl, on a fake clock that never waits.
func fallbackTransport(t *testing.T, fb *fallbackLog, pl *policyLog, tr *Transport) *Transport {
	t.Helper()
	tr.Fallback = fb.fallback
	tr.Hooks.Policy = pl.hook
	if tr.Retry.Budget == nil {
		tr.Retry.Budget = budget.Unlimited()
	}
	return newTransport(t, newFakeClock(), tr)
}

func TestFallbackAnswersFailedCalls(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		u := refusedURL(t)
		fb, pl := &fallbackLog{answer: cached}, newPolicyLog()
		tr := fallbackTransport(t, fb, pl, &Transport{Retry: RetryPolicy{MaxAttempts: 2}})
		req := newRequest(t, testCtx(t), http.MethodGet, u, "")
		resp, body, err := do(tr, req)
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != "cached" {
			t.Fatalf("got %v, %q; want the Fallback's 200", err, body)
		}
		if fb.count() != 1 || !errors.Is(fb.err, syscall.ECONNREFUSED) || !errors.Is(fb.err, ErrAttemptsExhausted) {
			t.Errorf("Fallback: %d calls, given %v; want one, with the refused connection", fb.count(), fb.err)
		}
		if fb.req.URL.String() != u {
			t.Errorf("Fallback got the request for %s, want %s", fb.req.URL, u)
		}
		e := pl.next(t)
		if e.Policy != policyFallback || e.Action != actionAnswered || e.Err != nil || e.CallID != 1 {
			t.Errorf("Policy event: got %s/%s err %v call %d, want fallback/answered of call 1", e.Policy, e.Action, e.Err, e.CallID)
		}
	})

	t.Run("circuit open", func(t *testing.T) {
		srv := statusServer(t, http.StatusOK, "live")
		fb, pl := &fallbackLog{answer: cached}, newPolicyLog()
		tr := fallbackTransport(t, fb, pl, &Transport{Brake: BrakePolicy{Breaker: openBreaker(t)}, Scope: ScopePolicy{Of: func(*http.Request) string { return "dep" }}})
		_, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || string(body) != "cached" {
			t.Fatalf("got %v, %q; want the Fallback's answer", err, body)
		}
		var open *breaker.OpenError
		if fb.count() != 1 || !errors.As(fb.err, &open) {
			t.Errorf("Fallback: %d calls, given %v; want one, with a *breaker.OpenError", fb.count(), fb.err)
		}
		if got := srv.count(); got != 0 {
			t.Errorf("requests at the server: got %d, want 0", got)
		}
	})

	t.Run("503 after attempts ran out", func(t *testing.T) {
		srv := newTestServer(t, failThenOK(100))
		bodies := &responseBodies{rt: &http.Transport{}}
		t.Cleanup(bodies.CloseIdleConnections)
		fb, pl := &fallbackLog{answer: cached}, newPolicyLog()
		tr := fallbackTransport(t, fb, pl, &Transport{Base: bodies, Retry: RetryPolicy{MaxAttempts: 3}})
		_, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || string(body) != "cached" {
			t.Fatalf("got %v, %q; want the Fallback's answer", err, body)
		}
		if fb.count() != 1 || fb.status != http.StatusServiceUnavailable || fb.err != nil {
			t.Errorf("Fallback: %d calls, given status %d, err %v; want one, with the 503", fb.count(), fb.status, fb.err)
		}
		if open, total := bodies.open(); len(open) != 0 || total != 3 {
			t.Errorf("response bodies: %d of %d left open, want all 3 closed (the last 503's too)", len(open), total)
		}
		if got := srv.count(); got != 3 {
			t.Errorf("requests at the server: got %d, want 3 (MaxAttempts, none for the Fallback)", got)
		}
	})

	t.Run("503 handed on", func(t *testing.T) {
		srv := newTestServer(t, failThenOK(100))
		fb := &fallbackLog{answer: func(resp *http.Response, err error) (*http.Response, error) { return resp, err }}
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{Retry: RetryPolicy{MaxAttempts: 2}})
		resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || string(body) != "try later" {
			t.Fatalf("got %v, %q; want the 503 the Fallback handed on, its body whole", err, body)
		}
	})

	t.Run("an error", func(t *testing.T) {
		u := refusedURL(t)
		mine := errors.New("no cached copy")
		fb := &fallbackLog{answer: func(*http.Response, error) (*http.Response, error) { return nil, mine }}
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{Retry: RetryPolicy{MaxAttempts: 1}})
		if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, u, "")); !errors.Is(err, mine) {
			t.Errorf("got %v, want the Fallback's error", err)
		}
	})

	t.Run("a response beside an error", func(t *testing.T) {
		srv := newTestServer(t, failThenOK(100))
		mine := errors.New("no cached copy")
		extra := &closeTrackedBody{Reader: strings.NewReader("extra")}
		var given *http.Response
		fb := &fallbackLog{answer: func(resp *http.Response, _ error) (*http.Response, error) {
			given = resp
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: extra}, mine
		}}
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{Retry: RetryPolicy{MaxAttempts: 1}})
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if !errors.Is(err, mine) || resp != nil {
			t.Errorf("got %v, %v; want the Fallback's error alone", resp, err)
		}
		if !extra.closed.Load() {
			t.Error("the response returned beside the error was left open")
		}
		if given == nil {
			t.Fatal("the Fallback was given no response")
		}
		if _, err := given.Body.Read(make([]byte, 1)); err == nil {
			t.Error("the 503 the Fallback was given is still open, want it closed")
		}
	})
}

func TestFallbackNotAsked(t *testing.T) {
	t.Run("404", func(t *testing.T) {
		srv := statusServer(t, http.StatusNotFound, "no such thing")
		fb := &fallbackLog{answer: cached}
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{})
		resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || resp.StatusCode != http.StatusNotFound || string(body) != "no such thing" {
			t.Errorf("got %v, %q; want the 404 itself", err, body)
		}
		if n := fb.count(); n != 0 {
			t.Errorf("Fallback calls: got %d, want 0 (a final response is the answer)", n)
		}
	})

	t.Run("200", func(t *testing.T) {
		srv := statusServer(t, http.StatusOK, "fresh")
		fb := &fallbackLog{answer: cached}
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{})
		_, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || string(body) != "fresh" {
			t.Errorf("got %v, %q; want the 200", err, body)
		}
		if n := fb.count(); n != 0 {
			t.Errorf("Fallback calls: got %d, want 0", n)
		}
	})

	t.Run("uncertain write", func(t *testing.T) {
		const key = "order-fb"
		ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
		srv := newOrdersServer(t, always(orderApplyThenStall))
		fb := &fallbackLog{answer: cached}
		client, _ := newLedgerClient(t, ledger, func(tr *Transport) {
			tr.Retry.AttemptTimeout = heldAttemptTimeout
			tr.Fallback = fb.fallback
		})
		_, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
		reconcileErrOf(t, err, key)
		if n := fb.count(); n != 0 {
			t.Errorf("Fallback calls: got %d, want 0 (an uncertain write is never papered over)", n)
		}
		if got := srv.posts.Load(); got != 1 {
			t.Errorf("POSTs at the server: got %d, want 1", got)
		}
	})

	t.Run("caller cancelled", func(t *testing.T) {
		srv := newBranchServer(t)
		srv.hold(1)
		fb := &fallbackLog{answer: cached}
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{})
		ctx, cancel := context.WithCancel(testCtx(t))
		call := goDo(tr, newRequest(t, ctx, http.MethodGet, srv.URL, ""))
		waitFor(t, srv.arrived, 1, "the request")
		cancel()
		call.wait(t)
		if !errors.Is(call.err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", call.err)
		}
		if n := fb.count(); n != 0 {
			t.Errorf("Fallback calls: got %d, want 0 (the caller is gone)", n)
		}
	})

	t.Run("invalid idempotency key", func(t *testing.T) {
		srv := statusServer(t, http.StatusOK, "fresh")
		fb := &fallbackLog{answer: cached}
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{})
		req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "{}")
		req.Header.Set("Idempotency-Key", "bad\x01key")
		_, _, err := do(tr, req)
		if !errors.Is(err, ErrInvalidIdempotencyKey) {
			t.Errorf("got %v, want ErrInvalidIdempotencyKey: bad input is not papered over", err)
		}
		if n := fb.count(); n != 0 {
			t.Errorf("Fallback calls: got %d, want 0 (the caller's mistake)", n)
		}
	})

	t.Run("body over the fingerprint limit", func(t *testing.T) {
		srv := statusServer(t, http.StatusOK, "fresh")
		fb := &fallbackLog{answer: cached}
		ledger, _ := newMemoryLedger(&ledger.Memory{})
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{Keys: KeyPolicy{Ledger: ledger, MaxFingerprintBytes: 4}})
		req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "longer than four bytes")
		req.Header.Set("Idempotency-Key", "k-fp")
		_, _, err := do(tr, req)
		if !errors.Is(err, ErrFingerprintLimit) {
			t.Errorf("got %v, want ErrFingerprintLimit", err)
		}
		if n := fb.count(); n != 0 {
			t.Errorf("Fallback calls: got %d, want 0 (a setting or a request that is wrong)", n)
		}
	})

	t.Run("caller cancelled while waiting to retry", func(t *testing.T) {
		srv := newTestServer(t, failThenOK(100))
		fb := &fallbackLog{answer: cached}
		ctx, cancel := context.WithCancel(testCtx(t))
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{})
		setSleep(tr, func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() })
		_, _, err := do(tr, newRequest(t, ctx, http.MethodGet, srv.URL, ""))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
		if n := fb.count(); n != 0 {
			t.Errorf("Fallback calls: got %d, want 0", n)
		}
	})
}

// A Fallback that panics, or answers neither a response nor an error, is
// reported, and the call's own outcome goes back as it was.
func TestFallbackFailureContained(t *testing.T) {
	answers := map[string]func(*http.Response, error) (*http.Response, error){
		"panics":               func(*http.Response, error) (*http.Response, error) { panic("fallback panics") },
		"answers nothing":      func(*http.Response, error) (*http.Response, error) { return nil, nil },
		"panics with an error": func(*http.Response, error) (*http.Response, error) { panic(errors.New("boom")) },
	}
	for name, answer := range answers {
		t.Run(name+", after an error", func(t *testing.T) {
			u := refusedURL(t)
			fb, pl := &fallbackLog{answer: answer}, newPolicyLog()
			tr := fallbackTransport(t, fb, pl, &Transport{Retry: RetryPolicy{MaxAttempts: 2}})
			_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, u, ""))
			if !errors.Is(err, ErrAttemptsExhausted) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("got %v, want the call's own error", err)
			}
			e := pl.next(t)
			if e.Policy != policyFallback || e.Action != actionFailed || e.Err == nil {
				t.Errorf("Policy event: got %s/%s err %v, want fallback/failed with its error", e.Policy, e.Action, e.Err)
			}
		})
		t.Run(name+", after a 503", func(t *testing.T) {
			srv := newTestServer(t, failThenOK(100))
			fb, pl := &fallbackLog{answer: answer}, newPolicyLog()
			tr := fallbackTransport(t, fb, pl, &Transport{Retry: RetryPolicy{MaxAttempts: 2}})
			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			if err != nil || resp.StatusCode != http.StatusServiceUnavailable || string(body) != "try later" {
				t.Errorf("got %v, %q; want the last 503, its body whole", err, body)
			}
			if e := pl.next(t); e.Policy != policyFallback || e.Action != actionFailed {
				t.Errorf("Policy event: got %s/%s, want fallback/failed", e.Policy, e.Action)
			}
			if got := srv.count(); got != 2 {
				t.Errorf("requests at the server: got %d, want 2 (none for the Fallback)", got)
			}
		})
	}
}

// A Fallback for a keyed write whose attempts ran out is asked once, and
// nothing is sent again because of it.
func TestFallbackNeverResends(t *testing.T) {
	srv := newTestServer(t, failThenOK(100))
	fb := &fallbackLog{answer: cached}
	tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{Retry: RetryPolicy{MaxAttempts: 3}})
	req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order")
	req.Header.Set(headerIdempotencyKey, "k-fb")
	_, body, err := do(tr, req)
	if err != nil || string(body) != "cached" {
		t.Fatalf("got %v, %q; want the Fallback's answer", err, body)
	}
	if got := srv.count(); got != 3 {
		t.Errorf("requests at the server: got %d, want 3", got)
	}
	if n := fb.count(); n != 1 {
		t.Errorf("Fallback calls: got %d, want 1", n)
	}
}
