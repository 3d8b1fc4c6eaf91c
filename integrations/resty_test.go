package integrations

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/go-resty/resty/v2"
	"github.com/retryfuse/retryfuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// resty v2 under a retryfuse.Transport.
//
// The recipe: retryfuse as the transport of resty's http.Client, and
// either resty's retries off (SetRetryCount(0)), or on with one condition,
// retryfuse.MayRetry; each logical write's key fixed in the request's
// context with retryfuse.WithIdempotencyKey.
//
// What resty does, read from v2.17.2 (retry.go, request.go, client.go):
//
//   - With no retry condition it retries every error, a reconcile error
//     included, while the context is alive. Conditions replace that
//     default: the request is retried when one of them says so. resty v2
//     has no default condition on statuses: a response (even a 503) with
//     a nil error is retried only if a condition asks for it.
//   - Each of its attempts builds a new http.Request (with GetBody set for
//     a []byte body) and is one RoundTrip, so a key that retryfuse
//     generates (GenerateIdempotencyKeys) is a new key on every resty
//     attempt. A key in the context is the same on all of them.
//   - It reads the response body inside the attempt: an error reading a
//     body cut short after a 2xx reaches the conditions. retryfuse never
//     returns such an error bare, so MayRetry says no to it: the request
//     was answered, and may have been applied. A condition that also asks
//     for r.RawResponse == nil says the same in resty's own terms.
//
// Tests set resty's wait between retries to 1 ms; no count depends on it.

// orderStep is what the fake order API does with one request.
type orderStep int

const (
	orderApply         orderStep = iota // applies the order, answers 201
	order503                            // 503, nothing applied
	orderApplyThen503                   // applies the order, then answers 503 (a gateway that gave up late)
	orderApplyAndStall                  // applies the order, never answers
	orderApplyAndCut                    // applies the order, answers 201 and cuts the body short
)

// orderServer fakes POST /orders. The n-th request gets steps[n-1];
// requests past the last step get the last. A request whose idempotency
// key was applied before gets the stored result without a second effect.
func orderServer(t *testing.T, fx *effects, steps ...orderStep) string {
	t.Helper()
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, key := fx.record(r)
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		if b, ok := fx.stored(key); ok {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(b)
			return
		}
		result := fmt.Appendf(nil, `{"order":"o-%d"}`, n)
		switch steps[min(n, len(steps))-1] {
		case orderApply:
			fx.apply(key, result)
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(result)
		case order503:
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
		case orderApplyThen503:
			fx.apply(key, result)
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
		case orderApplyAndStall:
			fx.apply(key, result)
			stall(r)
		case orderApplyAndCut:
			fx.apply(key, result)
			w.Header().Set("Content-Length", strconv.Itoa(2*len(result)))
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(result)
			w.(http.Flusher).Flush()    // the status and part of the body are on the wire
			panic(http.ErrAbortHandler) // the connection closes before the promised length
		}
	}).URL
}

// mayRetry is the recipe's retry condition.
func mayRetry(_ *resty.Response, err error) bool { return retryfuse.MayRetry(err) }

// noResponseAndMayRetry retries only a request that got no response at
// all, and only when retryfuse allows it.
func noResponseAndMayRetry(r *resty.Response, err error) bool {
	return (r == nil || r.RawResponse == nil) && retryfuse.MayRetry(err)
}

// restyClient returns a resty client over tr with retryCount retries and
// the given conditions.
func restyClient(tr *retryfuse.Transport, retryCount int, conditions ...resty.RetryConditionFunc) *resty.Client {
	c := resty.NewWithClient(&http.Client{Transport: tr}).
		SetLogger(quiet{}).
		SetRetryCount(retryCount).
		SetRetryWaitTime(time.Millisecond).
		SetRetryMaxWaitTime(time.Millisecond)
	for _, cond := range conditions {
		c.AddRetryCondition(cond)
	}
	return c
}

type quiet struct{}

func (quiet) Errorf(string, ...any) {}
func (quiet) Warnf(string, ...any)  {}
func (quiet) Debugf(string, ...any) {}

// postOrder posts an order with ctx, under key when it is not empty.
func postOrder(ctx context.Context, c *resty.Client, base, key string) (*resty.Response, error) {
	req := c.R().SetContext(ctx).SetBody([]byte(`{"sku":"A-1","qty":1}`))
	if key != "" {
		req.SetHeader("Idempotency-Key", key)
	}
	return req.Post(base + "/orders")
}

// (a) Retries off: an unkeyed POST answered 503 (after the server applied
// it) is repeated by no one — retryfuse does not repeat a POST without a
// key, resty makes one attempt — and the caller gets the 503: one
// request, one effect.
func TestRestyRetriesOffUnkeyedPOST(t *testing.T) {
	var fx effects
	base := orderServer(t, &fx, orderApplyThen503)
	c := restyClient(fast(t, &retryfuse.Transport{}), 0)

	resp, err := postOrder(t.Context(), c, base, "")
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode())
	assert.Equal(t, 1, fx.Requests(), "requests at the server")
	assert.Equal(t, 1, fx.Applied(), "orders applied")
}

// (b) Retries on with MayRetry as the one condition. A keyed POST answered
// 503 and then 201 is repeated by retryfuse and not by resty: two
// requests, one order, one resty attempt. Against a dependency that keeps
// failing, the requests stay retryfuse's three, where a condition on 5xx
// sends 3 × 4.
func TestRestyMayRetryCondition(t *testing.T) {
	t.Run("keyed POST, 503 then 201", func(t *testing.T) {
		var fx effects
		base := orderServer(t, &fx, order503, orderApply)
		c := restyClient(fast(t, &retryfuse.Transport{}), 3, mayRetry)

		resp, err := postOrder(t.Context(), c, base, "order-1")
		require.NoError(t, err)
		assert.Equal(t, http.StatusCreated, resp.StatusCode())
		assert.Equal(t, 1, resp.Request.Attempt, "resty's attempts")
		assert.Equal(t, 2, fx.Requests(), "requests at the server")
		assert.Equal(t, 1, fx.Applied(), "orders applied")
		assert.Equal(t, []string{"order-1", "order-1"}, fx.Keys())
	})

	t.Run("keyed POST, always 503", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			cond resty.RetryConditionFunc
			want int
		}{
			{"MayRetry", mayRetry, 3},
			{"a condition on 5xx", func(r *resty.Response, err error) bool { return r != nil && r.StatusCode() >= 500 }, 12},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var fx effects
				base := orderServer(t, &fx, order503)
				c := restyClient(fast(t, &retryfuse.Transport{}), 3, tc.cond)
				resp, err := postOrder(t.Context(), c, base, "order-1")
				require.NoError(t, err)
				assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode())
				assert.Equal(t, tc.want, fx.Requests(), "requests at the server")
				assert.Zero(t, fx.Applied())
			})
		}
	})

	// An unkeyed POST applied and then cut by the attempt timeout (the
	// context still alive): retryfuse returns the reconcile error. MayRetry
	// refuses it; resty's default (no condition: every error) sends the POST
	// again, and the server, with no key to go by, applies it twice.
	t.Run("unkeyed POST, lost response", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			cond      []resty.RetryConditionFunc
			requests  int
			applied   int
			reconcile bool
		}{
			{"MayRetry", []resty.RetryConditionFunc{mayRetry}, 1, 1, true},
			{"resty's default, no condition", nil, 2, 2, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var fx effects
				base := orderServer(t, &fx, orderApplyAndStall, orderApply)
				c := restyClient(fast(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{AttemptTimeout: attemptTimeout}}), 3, tc.cond...)
				_, err := postOrder(t.Context(), c, base, "")
				var rec *retryfuse.ReconcileRequiredError
				assert.Equal(t, tc.reconcile, errors.As(err, &rec), "reconcile error returned: %v", err)
				assert.Equal(t, tc.requests, fx.Requests(), "requests at the server")
				assert.Equal(t, tc.applied, fx.Applied(), "orders applied")
			})
		}
	})
}

// (c) The server applies a POST and its 201's body is cut short; resty's
// body read fails, and resty's default (no condition: every error) sends
// the POST again. With the key of the logical write fixed in the context,
// the resend carries the same key and the server answers it from its
// stored result: one order. With keys generated by retryfuse alone, each
// resty attempt is a new RoundTrip with a new key, and the server applies
// the order twice. (MayRetry would not resend it at all: see (d).)
func TestRestyContextKeySurvivesRetries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ctxKey  bool
		applied int
	}{
		{"key in the context", true, 1},
		{"GenerateIdempotencyKeys alone", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fx effects
			base := orderServer(t, &fx, orderApplyAndCut, orderApply)
			c := restyClient(fast(t, &retryfuse.Transport{Keys: retryfuse.KeyPolicy{Generate: true}}), 3) // resty's default condition

			ctx := t.Context()
			key := ""
			if tc.ctxKey {
				key = "order-" + rand.Text()
				ctx = retryfuse.WithIdempotencyKey(ctx, key)
			}
			resp, err := postOrder(ctx, c, base, "")
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, resp.StatusCode())
			assert.Equal(t, 2, resp.Request.Attempt, "resty's attempts")
			keys := fx.Keys()
			require.Len(t, keys, 2, "requests at the server")
			assert.NotEmpty(t, keys[0])
			assert.NotEmpty(t, keys[1])
			if tc.ctxKey {
				assert.Equal(t, []string{key, key}, keys)
			} else {
				assert.NotEqual(t, keys[0], keys[1], "a new key on each resty attempt")
			}
			assert.Equal(t, tc.applied, fx.Applied(), "orders applied")
		})
	}
}

// (d) The same cut body on an unkeyed POST with no key anywhere: neither
// MayRetry alone nor a condition that also requires that no response
// arrived retries it, and the caller gets the body's error after one
// order.
func TestRestyCutBodyUnkeyedPOST(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cond    resty.RetryConditionFunc
		applied int
	}{
		{"MayRetry alone", mayRetry, 1},
		{"no response and MayRetry", noResponseAndMayRetry, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fx effects
			base := orderServer(t, &fx, orderApplyAndCut, orderApply)
			c := restyClient(fast(t, &retryfuse.Transport{}), 3, tc.cond)
			_, err := postOrder(t.Context(), c, base, "")
			if tc.applied == 1 {
				assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
			} else {
				assert.NoError(t, err, "the resend was answered")
			}
			assert.Equal(t, tc.applied, fx.Requests(), "requests at the server")
			assert.Equal(t, tc.applied, fx.Applied(), "orders applied")
		})
	}
}
