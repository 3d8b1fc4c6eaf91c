package retryfuse

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without a Ledger, a reconcile error frees only the hold it is about, as
// a Ledger's token does: once the key was resolved and a later write under
// it was left uncertain in turn, resolving an older error (the first
// call's, or one refused because of it) leaves the new hold in place, and
// the next call under the key is still not sent.
func TestAStaleReconcileErrorDoesNotFreeALaterHoldWithoutALedger(t *testing.T) {
	for _, stale := range []string{"the uncertain call's", "an earlier refusal's"} {
		t.Run(stale, func(t *testing.T) {
			srv := stallingServer(t, 2) // the first two writes are never answered
			tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{AttemptTimeout: 200 * time.Millisecond, Budget: budget.Unlimited()}})
			first := uncertainPOST(t, tr, srv.URL, "order-9")
			refused := uncertainPOST(t, tr, srv.URL, "order-9")
			require.True(t, refused.Earlier)
			require.NoError(t, first.Resolve(context.Background(), false), "looked up: not applied")

			second := uncertainPOST(t, tr, srv.URL, "order-9")
			require.False(t, second.Earlier, "the key was free: the write was sent again, and left uncertain")
			require.Equal(t, 2, srv.Requests())

			old := first
			if stale == "an earlier refusal's" {
				old = refused
			}
			require.NoError(t, old.Resolve(context.Background(), false))
			held := uncertainPOST(t, tr, srv.URL, "order-9")
			assert.True(t, held.Earlier, "the second write's hold stands")
			assert.Equal(t, 2, srv.Requests(), "nothing sent under the held key")

			require.NoError(t, second.Resolve(context.Background(), false), "its own error frees it")
			resp, _, err := keyedPOSTBody(t, tr, srv.URL, "order-9", "order")
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, 3, srv.Requests())
		})
	}
}

// keyedPOSTBody sends a keyed POST of body through tr.
func keyedPOSTBody(t *testing.T, tr *Transport, url, key, body string) (*http.Response, []byte, error) {
	t.Helper()
	req := newRequest(t, testCtx(t), http.MethodPost, url, body)
	req.Header.Set("Idempotency-Key", key)
	return do(tr, req)
}
