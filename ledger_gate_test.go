package retryfuse

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/internal/stored"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// completeRecorder is a Ledger that records what Complete was given.
type completeRecorder struct {
	*MemoryLedger
	got chan *StoredResponse
}

func (r completeRecorder) Complete(ctx context.Context, key, token string, res *StoredResponse) error {
	r.got <- res
	return r.MemoryLedger.Complete(ctx, key, token, res)
}

// The Transport hands a ledger no result whose headers are over the
// bounds, whatever the ledger would do with it: the key is completed
// without a result, and a later call under it is told to reconcile.
func TestResultWithLargeHeadersIsNotStored(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("a", stored.MaxHeaderBytes))
		w.WriteHeader(http.StatusCreated)
	})
	rec := completeRecorder{&MemoryLedger{}, make(chan *StoredResponse, 1)}
	client, _ := newLedgerClient(t, rec, nil)
	resp, _, err := postKeyed(t, client, srv.URL, "big-1", "order")
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	select {
	case res := <-rec.got:
		assert.Nil(t, res, "got a stored result, want none: its headers are over the bound")
	case <-time.After(callWait):
		t.Fatal("Complete was not called")
	}
	_, _, err = postKeyed(t, client, srv.URL, "big-1", "order")
	assert.ErrorIs(t, err, ErrAlreadyApplied)
	assert.Equal(t, 1, srv.count(), "the completed key is not sent again")
}

// A 307 or 308 of a keyed POST is not its completion: http.Client sends
// the same key and body to the new location, which the ledger lets through
// and completes under the fingerprint of the path first sent to, so that a
// later call under the key is answered from the ledger.
func TestRedirectedKeyedPOSTUnderALedger(t *testing.T) {
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var effects atomic.Int32
			srv := newTestServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/charges" {
					w.Header().Set("Location", "/v2/charges")
					w.WriteHeader(status)
					return
				}
				effects.Add(1)
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "ch_1")
			})
			client, _ := newLedgerClient(t, &MemoryLedger{}, nil)
			for call := 1; call <= 2; call++ {
				resp, body, err := postKeyed(t, client, srv.URL+"/charges", "charge-1", `{"amount":100}`)
				require.NoErrorf(t, err, "call %d", call)
				assert.Equalf(t, http.StatusCreated, resp.StatusCode, "call %d: got %d, want 201", call, resp.StatusCode)
				assert.Equalf(t, "ch_1", body, "call %d", call)
			}
			assert.Equal(t, int32(1), effects.Load(), "the charge is applied once")
			assert.Equal(t, 2, srv.count(), "the second call is answered from the ledger: nothing sent")
		})
	}
}

// A 303 after a keyed POST is followed by a GET of the result with the
// same headers: another operation, which the ledger lets through.
func TestSeeOtherAfterAKeyedPOSTUnderALedger(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Location", "/charges/ch_1")
			w.WriteHeader(http.StatusSeeOther)
			return
		}
		_, _ = io.WriteString(w, "ch_1")
	})
	client, _ := newLedgerClient(t, &MemoryLedger{}, nil)
	resp, body, err := postKeyed(t, client, srv.URL+"/charges", "charge-2", `{"amount":100}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ch_1", body)
}
