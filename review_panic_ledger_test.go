package retryfuse

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// A key claimed in the ledger must be settled on every path out of
// RoundTrip, a panic of the base included. Left in flight, the key was
// freed when its claim expired, and a later call under it sent the write
// again although the panicking attempt may have been applied.
func TestRvBasePanicLeavesTheKeyUncertainNotInFlight(t *testing.T) {
	clk := newFakeClock()
	ledger, err := NewMemoryLedger(MemoryLedgerConfig{InFlightTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ledger.now = clk.Now
	base := &panicBase{}
	tr := newTransport(t, clk, &Transport{Base: base, Ledger: ledger, Budget: UnlimitedBudget{}})
	const url = "http://rv-ledger.invalid/charges"
	post := func() *http.Request {
		req := newRequest(t, testCtx(t), http.MethodPost, url, `{"amount":1}`)
		req.Header.Set(HeaderIdempotencyKey, "rv-key-1")
		return req
	}

	if !roundTripPanics(tr, post()) {
		t.Fatal("the base's panic did not reach the caller")
	}
	if got := base.seen.Load(); got != 1 {
		t.Fatalf("requests the base received: got %d, want 1", got)
	}

	base.status.Store(201)
	for _, after := range []time.Duration{0, 2 * time.Minute} { // before and after the in-flight claim would expire
		_ = clk.Sleep(testCtx(t), after)
		resp, err := tr.RoundTrip(post())
		if err == nil {
			_ = resp.Body.Close()
		}
		var rec *ReconcileRequiredError
		if !errors.As(err, &rec) || !errors.Is(err, ErrEarlierUncertain) {
			t.Errorf("a later call under the key, %v on: got %v, %v; want a *ReconcileRequiredError (ErrEarlierUncertain)", after, resp, err)
		}
	}
	if got := base.seen.Load(); got != 1 {
		t.Errorf("requests the base received: got %d, want 1 (the possibly applied write never sent again)", got)
	}
}
