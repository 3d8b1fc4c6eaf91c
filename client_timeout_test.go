package retryfuse

import (
	"errors"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A keyed write under http.Client.Timeout. The client runs a timer of its
// own for the same deadline it puts in the request's context; when that
// timer has struck by the time RoundTrip returns, net/http replaces the
// Transport's error with a text-only timeout error (net/http's client.go:
// setRequestCancel starts the timer, Client.do asks didTimeout), and the
// *ReconcileRequiredError cannot be found in what the caller gets. Which of
// the two goroutines runs first is the scheduler's choice. What does not
// depend on it: the Reconcile hook has the typed error, and the Transport
// records the uncertain key, before RoundTrip returns; so the next call
// under the key is not sent, and it gets a *ReconcileRequiredError of its
// own, far from any timer, whose Resolve settles the key.

// awaitClientTimer is a base that, when an attempt fails, waits for the
// http.Client's timer to have struck (the client closes the request's
// Cancel channel right after recording its timeout) before returning: the
// case where net/http's timer wins, made certain.
type awaitClientTimer struct{ base *http.Transport }

func (a awaitClientTimer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.base.RoundTrip(req)
	if err != nil && req.Cancel != nil {
		select {
		case <-req.Cancel:
		case <-time.After(callWait):
		}
	}
	return resp, err
}

func (a awaitClientTimer) CloseIdleConnections() { a.base.CloseIdleConnections() }

func TestClientTimeoutNextCallUnderTheKeyIsNotSent(t *testing.T) {
	ledgers := []struct {
		name   string
		ledger func(*testing.T) ledger.Ledger
	}{
		{"no ledger", func(*testing.T) ledger.Ledger { return nil }},
		{"ledger.Memory", func(t *testing.T) ledger.Ledger {
			l, err := newMemoryLedger(&ledger.Memory{})
			require.NoError(t, err)
			return l
		}},
	}
	races := []struct {
		name        string
		clientFirst bool // the client's timer has struck when the Transport returns
	}{
		{"either may win", false},
		{"the client's timer wins", true},
	}
	for _, lc := range ledgers {
		for _, rc := range races {
			t.Run(lc.name+"/"+rc.name, func(t *testing.T) {
				t.Parallel()
				const key = "order-7"
				srv := stallingServer(t, 1) // applies the order, never answers
				var (
					hookMu  sync.Mutex
					hookErr *ReconcileRequiredError
				)
				tr := &Transport{
					Keys: KeyPolicy{
						Ledger: lc.ledger(t),
					},
					Hooks: Hooks{Reconcile: func(i ReconcileInfo) {
						hookMu.Lock()
						defer hookMu.Unlock()
						if hookErr == nil {
							hookErr = i.Err
						}
					}},
				}
				if rc.clientFirst {
					tr.Base = awaitClientTimer{base: cleanhttp.DefaultPooledTransport()}
				}
				newTransport(t, nil, tr)
				client := &http.Client{Transport: tr, Timeout: heldAttemptTimeout}

				_, err := client.Do(newKeyedPOST(t, testCtx(t), srv.URL, key, "pay 42"))
				require.Error(t, err, "first call")
				require.Equal(t, 1, srv.Requests(), "first call: the server applied the order")
				assert.True(t, os.IsTimeout(err), "first call: %v is a timeout", err)
				var rec *ReconcileRequiredError
				if rc.clientFirst {
					// net/http's replacement keeps the text, not the error.
					assert.False(t, errors.As(err, &rec), "first call: %v", err)
					assert.ErrorContains(t, err, "Client.Timeout exceeded")
					assert.ErrorContains(t, err, `reconcile required (idempotency key "order-7")`)
				} else if !errors.As(err, &rec) {
					t.Logf("first call: the client's timer won: %v", err)
				}
				// The Reconcile hook had the typed error before net/http.
				hookMu.Lock()
				first := hookErr
				hookMu.Unlock()
				require.NotNil(t, first, "first call: the Reconcile hook's error")
				assert.Equal(t, key, first.IdempotencyKey, "first call: the Reconcile hook's error")
				assert.Equal(t, 1, first.Attempts, "first call: the Reconcile hook's error")

				_, err = client.Do(newKeyedPOST(t, testCtx(t), srv.URL, key, "pay 42"))
				rec = reconcileErrOf(t, err, key)
				assert.True(t, rec.Earlier, "next call: refused because of the first")
				assert.Equal(t, 1, rec.Attempts, "next call: the first call's attempts")
				assert.Equal(t, 1, srv.Requests(), "next call: not sent")

				// The next call's error resolves the key: the order was
				// applied (the server says so), and a call after that is
				// still not sent.
				require.NoError(t, rec.Resolve(testCtx(t), true), "Resolve")
				_, err = client.Do(newKeyedPOST(t, testCtx(t), srv.URL, key, "pay 42"))
				assert.ErrorIs(t, err, ErrAlreadyApplied, "after Resolve")
				assert.Equal(t, 1, srv.Requests(), "after Resolve: not sent")
			})
		}
	}
}
