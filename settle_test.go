package retryfuse

import (
	"net/http"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Toward a server known to honour keys, a write left uncertain is settled
// by repeating it under its key: Repeat stops the Transport holding the
// key, and the repeat gets the server's stored result; the write was
// applied once, and the caller looked nothing up. Without Repeat the key
// is held, as toward any server.
func TestRepeatSettlesAnUncertainWriteTowardAServerThatHonoursKeys(t *testing.T) {
	for _, withLedger := range []bool{false, true} {
		name := "the Transport's memory"
		if withLedger {
			name = "a Ledger"
		}
		t.Run(name, func(t *testing.T) {
			srv := newHonouringServer(t)
			tr := &Transport{
				Retry: RetryPolicy{MaxAttempts: 1, AttemptTimeout: 100 * time.Millisecond, Budget: budget.Unlimited()},
				Keys:  KeyPolicy{ServerHonours: true},
			}
			if withLedger {
				tr.Keys.Ledger = &ledger.Memory{}
			}
			tr = newTransport(t, newFakeClock(), tr)
			confirmServerKeys(t, tr, srv.URL)
			_, _, err := keyedPOST(t, tr, srv.URL, "pay-9")
			var rec *ReconcileRequiredError
			require.ErrorAs(t, err, &rec, "one attempt, its response lost")

			_, _, err = keyedPOST(t, tr, srv.URL, "pay-9")
			var held *ReconcileRequiredError
			require.ErrorAs(t, err, &held, "before Repeat, the key is held")
			assert.True(t, held.Earlier)
			assert.Equal(t, 1, srv.Requests(), "a held key sends nothing")

			require.NoError(t, rec.Repeat(testCtx(t)))
			resp, body, err := keyedPOST(t, tr, srv.URL, "pay-9")
			require.NoError(t, err, "the repeat after Repeat")
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, "charge ch_1", string(body), "the server's stored result")
			assert.Equal(t, 1, srv.charges.Total(), "applied once")
			assert.Equal(t, 2, srv.Requests())
		})
	}
}

// Toward a server not known to honour keys, Repeat frees nothing: it
// returns an error matching ErrNotRepeatable, and the key stays held.
func TestRepeatRefusedUnlessTheServerIsKnownToHonourKeys(t *testing.T) {
	srv := newHonouringServer(t)
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 1, AttemptTimeout: 100 * time.Millisecond}})
	_, _, err := keyedPOST(t, tr, srv.URL, "pay-10")
	var rec *ReconcileRequiredError
	require.ErrorAs(t, err, &rec)
	assert.ErrorIs(t, rec.Repeat(testCtx(t)), ErrNotRepeatable)
	_, _, err = keyedPOST(t, tr, srv.URL, "pay-10")
	var held *ReconcileRequiredError
	require.ErrorAs(t, err, &held, "the key is still held")
	assert.Equal(t, 1, srv.Requests(), "nothing sent again")
}
