package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unrecordingLedger is a Ledger whose Complete and Uncertain never reach
// it: a shared store that cannot be reached while a result is recorded.
type unrecordingLedger struct{ Ledger }

var errStoreUnreachable = errors.New("store unreachable")

func (unrecordingLedger) Complete(context.Context, string, string, *StoredResponse) error {
	return errStoreUnreachable
}

func (unrecordingLedger) Uncertain(context.Context, string, string) error {
	return errStoreUnreachable
}

// An applied write whose result could not be recorded leaves its claim to
// expire: uncertain then, never free, so that a redelivery after
// InFlightTTL is not sent and applied a second time.
func TestUnrecordedResultNeverFreesTheKey(t *testing.T) {
	const key = "order-unrecorded"
	l, clock := newTestLedger(t, 0)
	client, _ := newLedgerClientOn(t, clock, unrecordingLedger{l}, nil)
	srv := newOrdersServer(t, firstThenApply(orderApply))

	resp, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	_, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	assert.ErrorIsf(t, err, ErrDuplicateInFlight, "while the claim lasts: got %v, want ErrDuplicateInFlight", err)
	for _, advance := range []time.Duration{testLedgerInFlightTTL, testLedgerTTL - time.Nanosecond} {
		clock.Advance(advance)
		_, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
		rec := reconcileErrOf(t, err, key)
		assert.Truef(t, rec.Earlier, "%v later: got %v, want a refusal because of the earlier call", advance, rec)
	}
	assert.Equalf(t, 1, srv.effects(key), "got %d effects, want 1: the write must not be applied twice", srv.effects(key))

	clock.Advance(time.Nanosecond) // TTL after the claim's expiry: free
	resp, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
}
