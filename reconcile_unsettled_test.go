package retryfuse

import (
	"net/http"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/retryfusetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Toward a server that honours keys, an uncertain keyed write is repeated;
// when the call stops before an answer settles it — the attempts run out on
// timeouts, or on 503s of a server whose ledger cannot answer, or the
// budget refuses the repeat — the write may still have been applied by the
// first attempt: the caller gets a *ReconcileRequiredError, not the last
// 503 nor an error that reads as a failure, and the key is held as for any
// uncertain write.
func TestRepeatedUncertainKeyedWriteUnsettledEndsInReconcile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []retryfusetest.Fault // the first is applied and its response lost
		later  http.HandlerFunc      // the answer to every attempt past the faults
		budget budget.Budget
		sent   int
	}{
		{"every attempt times out", stalls(3), nil, budget.Unlimited(), 3},
		{"503 while the ledger is down", stalls(1), func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(honour.HeaderHonoured, "?1")
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		}, budget.Unlimited(), 3},
		{"the budget refuses the repeat", stalls(1), nil, mustRatioBudget(t, budget.RatioConfig{MinPerSecond: -1}), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var later http.Handler
			if tc.later != nil {
				later = tc.later
			}
			srv := retryfusetest.NewServer(t, retryfusetest.NewRecorder().Wrap(later), tc.faults...)
			var reconciled int
			tr := newTransport(t, newFakeClock(), &Transport{
				Retry: RetryPolicy{
					AttemptTimeout: 100 * time.Millisecond,
					Budget:         tc.budget,
				},
				Keys: KeyPolicy{
					ServerHonours: true,
				},
				Hooks: Hooks{Reconcile: func(ReconcileInfo) { reconciled++ }},
			})
			confirmServerKeys(t, tr, srv.URL)
			resp, _, err := keyedPOST(t, tr, srv.URL, "pay-u")
			assert.Nil(t, resp)
			var rec *ReconcileRequiredError
			require.ErrorAs(t, err, &rec)
			assert.False(t, rec.Earlier)
			assert.Equal(t, "pay-u", rec.IdempotencyKey)
			assert.Equal(t, tc.sent, rec.Attempts)
			assert.ErrorIs(t, rec.Cause, ErrAttemptTimeout, "the cause is the uncertain attempt's")
			assert.Equal(t, tc.sent, srv.Requests())
			assert.Equal(t, 1, reconciled)

			_, _, err = keyedPOST(t, tr, srv.URL, "pay-u")
			require.ErrorAs(t, err, &rec, "the key is held until the caller resolves it")
			assert.True(t, rec.Earlier)
			assert.Equal(t, tc.sent, srv.Requests(), "not sent")
		})
	}
}

func mustRatioBudget(t *testing.T, cfg budget.RatioConfig) budget.Budget {
	b, err := budget.NewRatio(cfg)
	require.NoError(t, err)
	return b
}
