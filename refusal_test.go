package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A call refused because an earlier call under its key left the write
// uncertain says so, and carries what this process knows of that call:
// when it ended, its attempts, the phase it reached. Under a Ledger shared
// with another Transport, whose call it was, it says that this is not
// known here.
func TestRefusalUnderUncertainKeyDescribesEarlierCall(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ledger ledger.Ledger
		other  bool // the uncertain call is another Transport's
	}{
		{"no ledger", nil, false},
		{"ledger.Memory", &ledger.Memory{}, false},
		{"ledger.Memory, another Transport's call", &ledger.Memory{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := stallingServer(t, 1)
			newTr := func() *Transport {
				return newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{AttemptTimeout: 200 * time.Millisecond, Budget: budget.Unlimited()}, Keys: KeyPolicy{Ledger: tc.ledger}})
			}
			tr := newTr()
			first := uncertainPOST(t, tr, srv.URL, "order-21")
			require.False(t, first.Earlier, "the first call's own write is uncertain")
			assert.Equal(t, 1, first.Attempts)
			assert.Equal(t, decide.PhasePostWrite, first.Phase)
			assert.False(t, first.At.IsZero())

			if tc.other {
				tr = newTr()
			}
			again := uncertainPOST(t, tr, srv.URL, "order-21")
			assert.Equal(t, 1, srv.Requests(), "the later call is not sent")
			assert.True(t, again.Earlier, "the refusal says it is about an earlier call")
			msg := again.Error()
			assert.Contains(t, msg, "not sent: an earlier call under idempotency key "+strconv.Quote("order-21"))
			assert.Contains(t, msg, "in scope "+srv.URL)
			if tc.other {
				assert.True(t, again.At.IsZero(), "what another process did is not known here")
				assert.Zero(t, again.Attempts)
				assert.Equal(t, decide.PhaseUnknown, again.Phase)
				assert.Contains(t, msg, "is not known here")
				return
			}
			assert.Equal(t, first.At, again.At, "when the earlier call ended")
			assert.Equal(t, 1, again.Attempts, "the earlier call's attempts")
			assert.Equal(t, decide.PhasePostWrite, again.Phase, "the phase it reached")
			assert.Contains(t, msg, "after 1 attempt (phase post_write)")

			require.NoError(t, again.Resolve(context.Background(), false))
			assert.True(t, tr.keys.Empty(), "once resolved, nothing is kept of the call")
		})
	}
}

// The ledger's refusals name the request, its key and the key's scope, as
// the reconcile errors do.
func TestLedgerRefusalsNameKeyAndScope(t *testing.T) {
	const key = "order-22"
	ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
	srv := newOrdersServer(t, always(orderHold))
	client, _ := newLedgerClient(t, ledger, nil)
	held := doAsync(client, newKeyedPOST(t, callCtx(t), srv.url(), key, `{"item":"book"}`))
	srv.waitArrived(t, 1)

	_, _, dup := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	_, _, conflict := postKeyed(t, client, srv.url(), key, `{"item":"other"}`)
	close(srv.release)
	if r := receiveReply(t, held); r.err == nil {
		readAndClose(t, r.resp)
	}
	for _, err := range []error{dup, conflict} {
		require.Error(t, err)
		msg := err.Error()
		assert.Contains(t, msg, "POST "+srv.url())
		assert.Contains(t, msg, "idempotency key "+strconv.Quote(key))
		assert.Contains(t, msg, "in scope http://")
	}
	assert.ErrorIs(t, dup, ErrDuplicateInFlight)
	assert.ErrorIs(t, conflict, ErrIdempotencyConflict)
}

func TestRefusalNamesAreBounded(t *testing.T) {
	srv := stallingServer(t, 1)
	scope := strings.Repeat("scope-", 100)
	tr := newTransport(t, newFakeClock(), &Transport{
		Retry: RetryPolicy{
			AttemptTimeout: 200 * time.Millisecond,
			Budget:         budget.Unlimited(),
		},
		Keys: KeyPolicy{
			Ledger: &ledger.Memory{},
		},
		Scope: ScopePolicy{
			Of: func(*http.Request) string { return scope },
		},
	})
	uncertainPOST(t, tr, srv.URL, "order-23")
	again := uncertainPOST(t, tr, srv.URL, "order-23")
	assert.Less(t, len(again.Error()), 400, "a long scope is cut: %q", again.Error())
}

func TestBulkheadFullErrorCountsAttempts(t *testing.T) {
	assert.Equal(t, "retryfuse: bulkhead full: 1 attempt in flight to http://x:80",
		(&BulkheadFullError{Scope: "http://x:80", MaxInFlight: 1}).Error())
	assert.Equal(t, "retryfuse: bulkhead full: 2 attempts in flight to http://x:80 (waited 1s in the queue)",
		(&BulkheadFullError{Scope: "http://x:80", MaxInFlight: 2, QueueWait: time.Second}).Error())
}

// refusedForEarlier reports whether err refuses a call because an earlier
// call under its key left the write uncertain.
func refusedForEarlier(err error) bool {
	var rec *ReconcileRequiredError
	return errors.As(err, &rec) && rec.Earlier
}
