package retryfuse

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// uncertainPOST sends a keyed POST through tr and returns its reconcile
// error, which it requires.
func uncertainPOST(t *testing.T, tr *Transport, url, key string) *ReconcileRequiredError {
	t.Helper()
	req := newRequest(t, testCtx(t), http.MethodPost, url, "order")
	req.Header.Set("Idempotency-Key", key)
	_, _, err := do(tr, req)
	var rec *ReconcileRequiredError
	require.ErrorAs(t, err, &rec)
	return rec
}

// Without a Ledger, a Transport remembers the keys whose writes it left
// uncertain: a later call under one is told to reconcile, not sent, until
// the caller resolves it.
func TestUncertainKeyRememberedWithoutALedger(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprint("applied ", applied), func(t *testing.T) {
			srv := stallingServer(t, 1)
			tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{AttemptTimeout: 200 * time.Millisecond, Budget: budget.Unlimited()}})
			first := uncertainPOST(t, tr, srv.URL, "order-5")
			assert.ErrorIs(t, first.Cause, ErrAttemptTimeout)

			again := uncertainPOST(t, tr, srv.URL, "order-5")
			assert.True(t, again.Earlier, "a call under the uncertain key is told to reconcile")
			assert.Equal(t, 1, srv.Requests(), "and not sent")

			other := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order")
			other.Header.Set("Idempotency-Key", "order-6")
			resp, _, err := do(tr, other)
			require.NoError(t, err, "another key is not held")
			assert.Equal(t, http.StatusCreated, resp.StatusCode)

			require.NoError(t, again.Resolve(context.Background(), applied)) // the later call's error resolves the key too
			req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order")
			req.Header.Set("Idempotency-Key", "order-5")
			resp, _, err = do(tr, req)
			if applied {
				assert.ErrorIs(t, err, ErrAlreadyApplied, "an applied key is still not sent")
				assert.NotErrorIs(t, err, ErrReconcileRequired, "and it is not uncertain")
				assert.Equal(t, "already_applied", ReasonName(err))
				assert.Equal(t, 2, srv.Requests())
				return
			}
			require.NoError(t, err, "a key resolved as not applied is free")
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, 3, srv.Requests())
		})
	}
}

// With a Ledger, Resolve ends the ledger's uncertain claim with what the
// caller learnt.
func TestResolveWithALedger(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprint("applied ", applied), func(t *testing.T) {
			srv := stallingServer(t, 1)
			l := &ledger.Memory{}
			tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{AttemptTimeout: 200 * time.Millisecond, Budget: budget.Unlimited()}, Keys: KeyPolicy{Ledger: l}})
			first := uncertainPOST(t, tr, srv.URL, "order-8")
			again := uncertainPOST(t, tr, srv.URL, "order-8")
			assert.True(t, again.Earlier)
			require.NoError(t, first.Resolve(context.Background(), applied))
			assert.ErrorIs(t, first.Resolve(context.Background(), applied), ledger.ErrToken, "a claim is resolved once")

			req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order")
			req.Header.Set("Idempotency-Key", "order-8")
			resp, _, err := do(tr, req)
			if applied {
				assert.ErrorIs(t, err, ErrAlreadyApplied)
				assert.NotErrorIs(t, err, ErrReconcileRequired)
				assert.Equal(t, 1, srv.Requests())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, 2, srv.Requests())
		})
	}
}

// A write without a key of its own holds nothing: nothing is remembered,
// and Resolve does nothing.
func TestUnkeyedAndGeneratedKeysAreNotRemembered(t *testing.T) {
	srv := stallingServer(t, 2)
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{AttemptTimeout: 200 * time.Millisecond}, Keys: KeyPolicy{Generate: true}})
	for range 2 {
		_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order"))
		var rec *ReconcileRequiredError
		require.ErrorAs(t, err, &rec)
		assert.ErrorIs(t, rec.Cause, ErrAttemptTimeout, "each call is sent: a generated key is new")
		assert.NoError(t, rec.Resolve(context.Background(), false))
	}
	assert.Equal(t, 2, srv.Requests())
	assert.True(t, tr.keys.Empty(), "nothing is remembered")
}
