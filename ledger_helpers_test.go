package retryfuse

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/require"
)

// The key ledger's and the Reconciler's transport tests make keyed POSTs
// to an orders server (servers_test.go), through a client whose Transport
// runs on a fake clock.

// callWait bounds every wait on a real socket or goroutine in these tests.
const callWait = 10 * time.Second

// heldAttemptTimeout cuts an attempt whose response the server holds back.
// It leaves a loaded machine time to run the handler (to apply the order)
// before the client gives up; the tests that wait for it run in parallel.
const heldAttemptTimeout = 500 * time.Millisecond

// newMemoryLedger returns l, and the error its settings give.
func newMemoryLedger(l *ledger.Memory) (*ledger.Memory, error) { return l, l.Validate() }

// newLedgerOnFakeClock returns a ledger.Memory and a virtual clock for the
// Transports that share it (newLedgerClientOn): a ledger.Memory runs on
// the clock of the Transport that uses it.
func newLedgerOnFakeClock(t *testing.T, cfg *ledger.Memory) (*ledger.Memory, *fakeClock) {
	t.Helper()
	if cfg == nil {
		cfg = &ledger.Memory{}
	}
	l, err := newMemoryLedger(cfg)
	require.NoError(t, err)
	return l, newFakeClock()
}

// The settings of newTestLedger's ledger.
const (
	testLedgerTTL         = 10 * time.Minute
	testLedgerInFlightTTL = time.Minute
	testLedgerMaxBody     = 8
)

// newTestLedger returns a ledger.Memory with the test settings above,
// running on a fake clock of its own (as a Transport runs it on its own),
// which starts at a fixed time: tests move it, nothing sleeps. It is for
// the tests that wrap the ledger, which a Transport would then not run on
// its clock.
func newTestLedger(t testing.TB, maxEntries int) (ledger.Ledger, *fakeClock) {
	t.Helper()
	l, err := newMemoryLedger(&ledger.Memory{
		MaxEntries:    maxEntries,
		TTL:           testLedgerTTL,
		InFlightTTL:   testLedgerInFlightTTL,
		MaxStoredBody: testLedgerMaxBody,
	})
	require.NoError(t, err)
	clock := newFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return ledgerOn(l, clock), clock
}

// newLedgerClient returns a client over a Transport with ledger l, no retry
// budget and a virtual clock of its own; tune adjusts the Transport before
// first use.
func newLedgerClient(t *testing.T, l ledger.Ledger, tune func(*Transport)) (*http.Client, *Transport) {
	t.Helper()
	return newLedgerClientOn(t, newFakeClock(), l, tune)
}

// newLedgerClientOn is newLedgerClient on clock clk.
func newLedgerClientOn(t *testing.T, clk *fakeClock, l ledger.Ledger, tune func(*Transport)) (*http.Client, *Transport) {
	t.Helper()
	tr := &Transport{Keys: KeyPolicy{Ledger: l}, Retry: RetryPolicy{Budget: budget.Unlimited()}}
	clk.install(tr)
	setRandN(tr, func(n int64) int64 { return n / 2 })
	if tune != nil {
		tune(tr)
	}
	require.NoError(t, tr.Validate())
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, tr
}

// callCtx is the caller's context of a test: generous, so that a hang fails
// the test instead of stalling the run.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callWait)
	t.Cleanup(cancel)
	return ctx
}

// newKeyedPOST builds a POST (with GetBody, so replayable) carrying key.
func newKeyedPOST(t *testing.T, ctx context.Context, url, key, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set(headerIdempotencyKey, key)
	}
	return req
}

// postKeyed sends a keyed POST through c and returns its response, with the
// body read and closed, or its error.
func postKeyed(t *testing.T, c *http.Client, url, key, body string) (*http.Response, string, error) {
	t.Helper()
	resp, err := c.Do(newKeyedPOST(t, callCtx(t), url, key, body))
	if err != nil {
		return nil, "", err
	}
	b, rerr := io.ReadAll(resp.Body)
	require.NoError(t, rerr)
	require.NoError(t, resp.Body.Close())
	return resp, string(b), nil
}
