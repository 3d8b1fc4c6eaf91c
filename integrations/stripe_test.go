package integrations

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/retryfuse/retryfuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"
)

// stripe-go under a retryfuse.Transport.
//
// The recipe: MaxNetworkRetries 0, so that retryfuse is the one retry
// owner, and the deadline on the context of each call (stripe-go passes
// it on to the request), not on http.Client.Timeout.
//
// What stripe-go does, read from v82.5.1 (stripe.go):
//
//   - It sends every POST with an Idempotency-Key header, its own random
//     key unless the params carry one, the same on each of its retries; and
//     it sets GetBody. retryfuse may therefore repeat a create.
//   - A transport error comes back from a call exactly as http.Client.Do
//     returned it, a *url.Error, not wrapped in a *stripe.Error: errors.As
//     finds the *retryfuse.ReconcileRequiredError in it.
//   - Its own retries (MaxNetworkRetries, 2 by default) repeat every
//     transport error that is not a redirect, scheme or certificate
//     problem — a *ReconcileRequiredError included — unless the request's
//     context is done; and a status of 409 or 5xx only when its body is not
//     a Stripe API error: a JSON error body is asked canRetry, which is true
//     for a 429 lock_timeout alone. A 503 page of a load balancer in front
//     of the API is retried; a 503 in Stripe's error shape is not.
//   - It sleeps 0.5 s to 5 s between its own retries (tests below turn the
//     sleep off with SetNetworkRetriesSleep; no count depends on it).

// stripeStep is what the fake Stripe API does with one request.
type stripeStep int

const (
	stripeCharge         stripeStep = iota // applies the charge, answers 200
	stripeBalancer503                      // a load balancer's 503 page: nothing applied
	stripeAPI503                           // a 503 with a Stripe API error body: nothing applied
	stripeChargeAndStall                   // applies the charge, never answers
)

// stripeServer fakes POST /v1/charges. The n-th request gets steps[n-1];
// requests past the last step get the last. Like Stripe's API, it answers
// a request whose idempotency key was already applied with the stored
// result, marked Idempotent-Replayed, without charging again.
func stripeServer(t *testing.T, fx *effects, steps ...stripeStep) string {
	t.Helper()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, key := fx.record(r)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/charges" {
			http.Error(w, "not faked", http.StatusNotFound)
			return
		}
		if b, ok := fx.stored(key); ok {
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
			return
		}
		charge := fmt.Appendf(nil, `{"id":"ch_%d","object":"charge","amount":1000,"currency":"usd"}`, n)
		switch steps[min(n, len(steps))-1] {
		case stripeCharge:
			fx.apply(key, charge)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(charge)
		case stripeBalancer503:
			_, _ = io.Copy(io.Discard, r.Body)
			http.Error(w, "upstream connect error or disconnect/reset before headers", http.StatusServiceUnavailable)
		case stripeAPI503:
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"type":"api_error","message":"The service is temporarily unavailable."}}`)
		case stripeChargeAndStall:
			fx.apply(key, charge)
			stall(r)
		}
	})
	return srv.URL
}

// stripeClient returns a stripe.Client whose API calls go to base through
// tr, with stripe-go's own retries set to maxNetworkRetries.
func stripeClient(base string, tr *retryfuse.Transport, maxNetworkRetries int64) *stripe.Client {
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(base),
		// No Timeout: the deadline goes on each call's context, where
		// retryfuse sees it; http.Client's own timer would replace the
		// reconcile error with a text-only timeout.
		HTTPClient:        &http.Client{Transport: tr},
		MaxNetworkRetries: stripe.Int64(maxNetworkRetries),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	backends.API.(*stripe.BackendImplementation).SetNetworkRetriesSleep(false)
	return stripe.NewClient("sk_test_fake", stripe.WithBackends(backends))
}

func createCharge(ctx context.Context, sc *stripe.Client) (*stripe.Charge, error) {
	return sc.V1Charges.Create(ctx, &stripe.ChargeCreateParams{
		Amount:   stripe.Int64(1000),
		Currency: stripe.String(string(stripe.CurrencyUSD)),
		Source:   &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")},
	})
}

// The recipe (MaxNetworkRetries 0, retryfuse's defaults): a create answered
// 503 and then 200 is repeated by retryfuse under stripe-go's own key, and
// the charge is applied once after two requests — retryfuse's two
// attempts, not multiplied by stripe-go's.
func TestStripeCreateRepeatedByRetryfuseAlone(t *testing.T) {
	var fx effects
	base := stripeServer(t, &fx, stripeBalancer503, stripeCharge)
	sc := stripeClient(base, fast(t, &retryfuse.Transport{}), 0)

	ch, err := createCharge(t.Context(), sc)
	require.NoError(t, err)
	assert.Equal(t, "ch_2", ch.ID)
	assert.Equal(t, 1, fx.Applied(), "charges applied")
	assert.Equal(t, 2, fx.Requests(), "requests at the API")
	assert.True(t, allSame(fx.Keys()), "every attempt carries stripe-go's one key: %q", fx.Keys())
}

// The recipe: a create whose response is lost (the API applied the charge,
// then the caller's deadline struck) is not repeated by anyone; the call
// returns the *url.Error of http.Client, unwrapped by stripe-go, in which
// errors.As finds the *retryfuse.ReconcileRequiredError carrying
// stripe-go's key to look the charge up by.
func TestStripeLostResponseIsReconcileRequired(t *testing.T) {
	var fx effects
	base := stripeServer(t, &fx, stripeChargeAndStall)
	sc := stripeClient(base, fast(t, &retryfuse.Transport{}), 0)

	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	_, err := createCharge(ctx, sc)
	require.Error(t, err)

	var rec *retryfuse.ReconcileRequiredError
	require.ErrorAs(t, err, &rec)
	assert.Equal(t, http.MethodPost, rec.Method)
	assert.Equal(t, fx.Keys()[0], rec.IdempotencyKey, "the key to reconcile by is stripe-go's")
	assert.NotEmpty(t, rec.IdempotencyKey)
	assert.True(t, rec.Timeout())

	var urlErr *url.Error
	assert.ErrorAs(t, err, &urlErr, "stripe-go returns http.Client's error as it is")
	var stripeErr *stripe.Error
	assert.False(t, errors.As(err, &stripeErr), "a transport error is not a *stripe.Error")

	assert.Equal(t, 1, fx.Applied(), "charges applied")
	assert.Equal(t, 1, fx.Requests(), "requests at the API: no replay")
}

// What the recipe avoids: stripe-go's own retries left on (the default,
// 2) on top of retryfuse's attempts (3). Measured, with the sane
// configuration beside it.
func TestStripeOwnRetriesOnTopMultiply(t *testing.T) {
	// A dependency that keeps failing with a load balancer's 503: each of
	// stripe-go's three tries is a RoundTrip that makes three attempts,
	// nine requests where three were meant.
	t.Run("load balancer 503", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			sdkRetries int64
			want       int
		}{
			{"recipe, MaxNetworkRetries 0", 0, 3},
			{"stripe-go's default retries on top", stripe.DefaultMaxNetworkRetries, 9},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var fx effects
				base := stripeServer(t, &fx, stripeBalancer503)
				sc := stripeClient(base, fast(t, &retryfuse.Transport{}), tc.sdkRetries)
				_, err := createCharge(t.Context(), sc)
				require.Error(t, err, "the create fails on the last 503")
				assert.Equal(t, tc.want, fx.Requests(), "requests at the API")
				assert.Zero(t, fx.Applied())
				assert.True(t, allSame(fx.Keys()), "one key throughout: %q", fx.Keys())
			})
		}
	})

	// The same with the throttle of new calls switched on: once the API has rejected five requests, stripe-go's own
	// tries that reach the Transport are refused before they are sent, a
	// share that grows as the rejections do. Over 20 creates, what reaches
	// the API stays well below the 9 per create of the retries on top.
	t.Run("load balancer 503, the throttle on", func(t *testing.T) {
		var fx effects
		base := stripeServer(t, &fx, stripeBalancer503)
		tr := fast(t, &retryfuse.Transport{})
		tr.Load.Throttle.On = true
		sc := stripeClient(base, tr, stripe.DefaultMaxNetworkRetries)
		const creates = 20
		for range creates {
			_, err := createCharge(t.Context(), sc)
			require.Error(t, err)
		}
		t.Logf("requests at the API: %d for %d creates", fx.Requests(), creates)
		assert.Less(t, fx.Requests(), creates*9/2, "requests at the API: at most half of the 9 per create without the throttle")
		assert.Zero(t, fx.Applied())
	})

	// A 503 in Stripe's error shape is not retried by stripe-go (canRetry
	// is false): only retryfuse's three attempts, whatever
	// MaxNetworkRetries says.
	t.Run("Stripe API error 503", func(t *testing.T) {
		var fx effects
		base := stripeServer(t, &fx, stripeAPI503)
		sc := stripeClient(base, fast(t, &retryfuse.Transport{}), stripe.DefaultMaxNetworkRetries)
		_, err := createCharge(t.Context(), sc)
		var stripeErr *stripe.Error
		require.ErrorAs(t, err, &stripeErr)
		assert.Equal(t, http.StatusServiceUnavailable, stripeErr.HTTPStatusCode)
		assert.Equal(t, 3, fx.Requests(), "requests at the API")
	})

	// A lost response with an attempt timeout (the context still alive):
	// retryfuse refuses to replay the create. stripe-go's own retries send
	// it again under the same key, but the Transport remembers the keys it
	// left uncertain: the resend is refused before it is sent, and the
	// caller gets the reconcile error after one request either way.
	t.Run("lost response, attempt timeout", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			sdkRetries int64
			requests   int
			reconcile  bool
		}{
			{"recipe, MaxNetworkRetries 0", 0, 1, true},
			{"stripe-go's default retries on top", stripe.DefaultMaxNetworkRetries, 1, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var fx effects
				base := stripeServer(t, &fx, stripeChargeAndStall, stripeCharge)
				sc := stripeClient(base, fast(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{AttemptTimeout: attemptTimeout}}), tc.sdkRetries)
				_, err := createCharge(t.Context(), sc)
				var rec *retryfuse.ReconcileRequiredError
				assert.Equal(t, tc.reconcile, errors.As(err, &rec), "reconcile error returned: %v", err)
				if !tc.reconcile {
					assert.NoError(t, err, "the replay was answered with the stored charge")
				}
				assert.Equal(t, tc.requests, fx.Requests(), "requests at the API")
				assert.Equal(t, 1, fx.Applied(), "charges applied")
				assert.True(t, allSame(fx.Keys()), "one key throughout: %q", fx.Keys())
			})
		}
	})
}
