package retryfuse

import (
	"net/http"
	"testing"
)

// A request without a URL is an error of the caller's, as net/http's
// Transport reports it; with a Ledger, fingerprinting such a keyed request
// dereferenced the nil URL and panicked.
func TestRvNilURLWithLedgerIsAnErrorNotAPanic(t *testing.T) {
	ledger, err := NewMemoryLedger(MemoryLedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sent := false
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = true
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, Ledger: ledger})
	req := &http.Request{Method: http.MethodPost, Header: http.Header{HeaderIdempotencyKey: {"rv-key"}}}
	req = req.WithContext(testCtx(t))

	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("RoundTrip panicked: %v", p)
		}
	}()
	if _, err := FingerprintRequest(req, 1<<10); err == nil {
		t.Error("FingerprintRequest of a request without a URL: got nil error, want one")
	}
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
		t.Errorf("RoundTrip: got %v, nil; want an error", resp)
	}
	if sent {
		t.Error("the request without a URL reached the base")
	}
}
