package retryfuse

import (
	"net/http"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scopeRecordOf returns the record of rawURL's scope in tr.
func scopeRecordOf(t *testing.T, tr *Transport, rawURL string) *scopeRecord {
	t.Helper()
	require.NoError(t, tr.Validate())
	req, err := http.NewRequest(http.MethodPost, rawURL, nil)
	require.NoError(t, err)
	st, err := tr.scopes.find(req, &tr.p)
	require.NoError(t, err)
	return st
}

// Repeat asks whether the server is known to honour keys when it is
// called, not only when the write was left uncertain: once what was
// learnt has expired (HonourMemory), or a response without the marker
// revoked it, the key stays held and nothing is sent again.
func TestRepeatRefusedOnceTheServerIsNoLongerKnownToHonourKeys(t *testing.T) {
	for _, lost := range []string{"expired", "revoked"} {
		for _, withLedger := range []bool{false, true} {
			name := lost + "/the Transport's memory"
			if withLedger {
				name = lost + "/a Ledger"
			}
			t.Run(name, func(t *testing.T) {
				srv := newHonouringServer(t)
				clk := newFakeClock()
				tr := &Transport{
					Retry: RetryPolicy{MaxAttempts: 1, AttemptTimeout: 100 * time.Millisecond, Budget: budget.Unlimited()},
					Keys:  KeyPolicy{HonourMemory: time.Minute},
				}
				if withLedger {
					tr.Keys.Ledger = &ledger.Memory{}
				}
				tr = newTransport(t, clk, tr)
				st := scopeRecordOf(t, tr, srv.URL)
				marked := &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}}
				marked.Header.Set(honour.HeaderHonoured, "?1")
				st.honour.Learn(marked, true, clk.Now(), time.Minute, false)

				_, _, err := keyedPOST(t, tr, srv.URL, "pay-11")
				var rec *ReconcileRequiredError
				require.ErrorAs(t, err, &rec, "one attempt, its response lost")

				switch lost {
				case "expired":
					clk.Advance(2 * time.Minute)
				case "revoked":
					unmarked := &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}}
					require.Equal(t, honour.Revoked, st.honour.Learn(unmarked, true, clk.Now(), time.Minute, false))
				}
				assert.ErrorIs(t, rec.Repeat(testCtx(t)), ErrNotRepeatable)

				_, _, err = keyedPOST(t, tr, srv.URL, "pay-11")
				var held *ReconcileRequiredError
				require.ErrorAs(t, err, &held, "the key is still held")
				assert.True(t, held.Earlier)
				assert.Equal(t, 1, srv.Requests(), "nothing sent again")
				assert.Equal(t, 1, srv.charges.Total())
			})
		}
	}
}
