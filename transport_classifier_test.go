package retryfuse

import (
	"errors"
	"net/http"
	"testing"
)

func retryEverything(*http.Response, error) Class { return ClassRetryable }

func TestClassifierMakes404RetryableForGET(t *testing.T) {
	srv := statusServer(t, 404, "not yet")
	clk := newFakeClock()
	tr := newTransport(t, clk, &Transport{MaxAttempts: 3, Classifier: func(resp *http.Response, err error) Class {
		if resp != nil && resp.StatusCode == 404 {
			return ClassRetryable
		}
		return ClassDefault
	}})
	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != 404 || string(body) != "not yet" {
		t.Fatalf("Do: got %v, %q, %v; want the final 404", resp, body, err)
	}
	if got := srv.count(); got != 3 {
		t.Errorf("requests seen by the server: got %d, want 3", got)
	}
}

func TestClassifierCanMake503Final(t *testing.T) {
	srv := statusServer(t, 503, "down")
	tr := newTransport(t, newFakeClock(), &Transport{Classifier: func(*http.Response, error) Class { return ClassFinal }})
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("Do: got %v, %v; want the 503", resp, err)
	}
	if got := srv.count(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
}

func TestClassifierCannotMakePOSTWithoutKeyRepeatable(t *testing.T) {
	for _, status := range []int{404, 503} {
		srv := statusServer(t, status, "no")
		tr := newTransport(t, newFakeClock(), &Transport{MaxAttempts: 3, Classifier: retryEverything})
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, srv.URL, "payload"))
		if err != nil || resp.StatusCode != status {
			t.Fatalf("Do: got %v, %v; want the %d", resp, err, status)
		}
		if got := srv.count(); got != 1 {
			t.Errorf("status %d: requests seen by the server: got %d, want 1", status, got)
		}
	}
	url := refusedURL(t)
	tr := newTransport(t, newFakeClock(), &Transport{MaxAttempts: 3, Classifier: retryEverything})
	_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, url, "payload"))
	var re *RetryError
	if !errors.Is(err, ErrNotRepeatable) || !errors.As(err, &re) || re.Attempts != 1 {
		t.Errorf("refused POST: got %v, want ErrNotRepeatable after 1 attempt", err)
	}
}

func TestClassifierCannotReplayAnUncertainPOST(t *testing.T) {
	srv := newTestServer(t, stallUntilGone)
	clk := newFakeClock()
	tr := newTransport(t, clk, &Transport{AttemptTimeout: shortTimeout, MaxAttempts: 3, Classifier: retryEverything})
	req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "payload")
	req.Header.Set(headerIdempotencyKey, "pay-9")
	_, _, err := do(tr, req)
	wantReconcile(t, err, http.MethodPost, srv.URL, "pay-9")
	if got := srv.count(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
	if got := clk.Sleeps(); len(got) != 0 {
		t.Errorf("waits: got %v, want none", got)
	}
}
