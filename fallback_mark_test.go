package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse/internal/fallback"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fallbacks that say what they are: a response the Fallback produced is
// marked, whatever the Fallback does with its header; a request that needs
// current data is never answered by the Fallback; the Policy event tells
// the cases apart.

// staleCopy is a Fallback's answer built on a header map it keeps, as a
// cache would.
func staleCopy(h http.Header) func(*http.Response, error) (*http.Response, error) {
	return func(*http.Response, error) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(strings.NewReader("stale"))}, nil
	}
}

func TestFallbackResponseIsMarkedWithWhyTheCallFailed(t *testing.T) {
	t.Run("503 after attempts ran out", func(t *testing.T) {
		srv := newTestServer(t, failThenOK(100))
		kept := http.Header{"Content-Type": {"text/plain"}}
		fb, pl := &fallbackLog{answer: staleCopy(kept)}, newPolicyLog()
		tr := fallbackTransport(t, fb, pl, &Transport{Retry: RetryPolicy{MaxAttempts: 2}})
		resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		require.NoError(t, err)
		assert.Equal(t, "stale", string(body))
		assert.Equal(t, "attempts_exhausted", resp.Header.Get("Retryfuse-Fallback"))
		assert.Equal(t, "text/plain", resp.Header.Get("Content-Type"), "the Fallback's own headers kept")
		assert.Equal(t, http.Header{"Content-Type": {"text/plain"}}, kept, "the Fallback's header map is not written")
		assert.Equal(t, actionAnswered, pl.next(t).Action)
	})
	t.Run("circuit open", func(t *testing.T) {
		fb := &fallbackLog{answer: cached}
		tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{Brake: BrakePolicy{Breaker: openBreaker(t)}, Scope: ScopePolicy{Of: func(*http.Request) string { return "dep" }}})
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, refusedURL(t), ""))
		require.NoError(t, err)
		assert.Equal(t, "circuit_open", resp.Header.Get("Retryfuse-Fallback"))
	})
	t.Run("a Fallback that sets the header itself, or leaves none", func(t *testing.T) {
		for _, h := range []http.Header{nil, {"Retryfuse-Fallback": {""}}, {"Retryfuse-Fallback": {"fresh"}}} {
			fb := &fallbackLog{answer: staleCopy(h)}
			tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{Retry: RetryPolicy{MaxAttempts: 1}})
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, refusedURL(t), ""))
			require.NoError(t, err)
			assert.Equal(t, []string{"attempts_exhausted"}, resp.Header.Values("Retryfuse-Fallback"), "the Fallback's header %v", h)
		}
	})
}

func TestFallbackHandingOnTheCallsResponseLeavesItUnmarked(t *testing.T) {
	srv := newTestServer(t, failThenOK(100))
	fb, pl := &fallbackLog{answer: func(resp *http.Response, err error) (*http.Response, error) { return resp, err }}, newPolicyLog()
	tr := fallbackTransport(t, fb, pl, &Transport{Retry: RetryPolicy{MaxAttempts: 1}})
	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "try later", string(body))
	assert.Empty(t, resp.Header.Values("Retryfuse-Fallback"))
	assert.Equal(t, actionHandedOn, pl.next(t).Action)
}

func TestDependencysOwnMarkIsKept(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retryfuse-Fallback", "circuit_open") // a fallback upstream
	})
	fb := &fallbackLog{answer: cached}
	tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{})
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	require.NoError(t, err)
	assert.Equal(t, "circuit_open", resp.Header.Get("Retryfuse-Fallback"))
	assert.Zero(t, fb.count())
}

func TestFallbackNotAskedForARequestThatNeedsCurrentData(t *testing.T) {
	for name, mark := range map[string]func(*http.Request) *http.Request{
		"Cache-Control: no-cache":            withHeader("Cache-Control", "no-cache"),
		"Cache-Control: max-age=0":           withHeader("Cache-Control", "max-age=0"),
		"Cache-Control: private, Max-Age=00": withHeader("Cache-Control", `private, Max-Age="00"`),
		"Cache-Control: NO-CACHE":            withHeader("Cache-Control", "NO-CACHE"),
		"Pragma: no-cache":                   withHeader("Pragma", "no-cache"),
		"WithCurrentData": func(r *http.Request) *http.Request {
			return r.WithContext(WithCurrentData(r.Context()))
		},
	} {
		t.Run(name, func(t *testing.T) {
			// A Fallback that would serve its stale copy for anything.
			srv := newTestServer(t, failThenOK(100))
			fb, pl := &fallbackLog{answer: staleCopy(nil)}, newPolicyLog()
			tr := fallbackTransport(t, fb, pl, &Transport{Retry: RetryPolicy{MaxAttempts: 2}})
			resp, body, err := do(tr, mark(newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")))
			require.NoError(t, err)
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the dependency's failure")
			assert.Equal(t, "try later", string(body))
			assert.Empty(t, resp.Header.Values("Retryfuse-Fallback"))
			assert.Zero(t, fb.count(), "the Fallback asked")
			e := pl.next(t)
			assert.Equal(t, policyFallback+"/"+actionWithheld, e.Policy+"/"+e.Action)
		})
	}
	t.Run("an error goes back as it is", func(t *testing.T) {
		fb, pl := &fallbackLog{answer: staleCopy(nil)}, newPolicyLog()
		tr := fallbackTransport(t, fb, pl, &Transport{Retry: RetryPolicy{MaxAttempts: 1}})
		req := newRequest(t, WithCurrentData(testCtx(t)), http.MethodGet, refusedURL(t), "")
		_, _, err := do(tr, req)
		assert.ErrorIs(t, err, ErrAttemptsExhausted)
		assert.Zero(t, fb.count())
		assert.ErrorIs(t, pl.next(t).Err, ErrAttemptsExhausted, "the withheld event carries the call's error")
	})
}

func TestFallbackAskedWhenStaleDataWillDo(t *testing.T) {
	for name, mark := range map[string]func(*http.Request) *http.Request{
		"Cache-Control: max-age=60":             withHeader("Cache-Control", "max-age=60"),
		"Cache-Control: no-store":               withHeader("Cache-Control", "no-store"),
		"Cache-Control beside Pragma: no-cache": withHeaders("Cache-Control", "max-age=60", "Pragma", "no-cache"),
		"Cache-Control: max-stale":              withHeader("Cache-Control", "max-stale"),
		"an unrelated context value": func(r *http.Request) *http.Request {
			return r.WithContext(notTrueMark{r.Context()})
		},
		"Cache-Control: malformed max-age=zero, foo": withHeader("Cache-Control", "max-age=zero, foo"),
	} {
		t.Run(name, func(t *testing.T) {
			fb := &fallbackLog{answer: cached}
			tr := fallbackTransport(t, fb, newPolicyLog(), &Transport{Retry: RetryPolicy{MaxAttempts: 1}})
			_, body, err := do(tr, mark(newRequest(t, testCtx(t), http.MethodGet, refusedURL(t), "")))
			require.NoError(t, err)
			assert.Equal(t, "cached", string(body))
		})
	}
}

func TestWithCurrentDataOfANilContext(t *testing.T) {
	ctx := WithCurrentData(nil) //nolint:staticcheck // nil on purpose: bad input must not panic
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://dep.test/", nil)
	require.NoError(t, err)
	if !fallback.NeedsCurrent(req) {
		t.Error("the mark is not in the context")
	}
	if !errors.Is(context.Cause(ctx), nil) {
		t.Error("the context is done")
	}
}

// notTrueMark holds "yes", not true, under the key WithCurrentData marks a
// context with: the key is found by asking a marked context, so the test
// needs no name for it.
type notTrueMark struct{ context.Context }

func (c notTrueMark) Value(key any) any {
	if v, _ := WithCurrentData(context.Background()).Value(key).(bool); v {
		return "yes"
	}
	return c.Context.Value(key)
}

func withHeader(name, value string) func(*http.Request) *http.Request {
	return withHeaders(name, value)
}

func withHeaders(kv ...string) func(*http.Request) *http.Request {
	return func(r *http.Request) *http.Request {
		for i := 0; i+1 < len(kv); i += 2 {
			r.Header.Add(kv[i], kv[i+1])
		}
		return r
	}
}
