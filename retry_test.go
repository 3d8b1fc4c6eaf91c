package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
)

// cancelingBudget cancels the caller's context while the call records its
// first attempt: a gate that took the rest of the caller's time.
type cancelingBudget struct {
	cancel context.CancelFunc
}

func (b cancelingBudget) RecordRequest(context.Context) { b.cancel() }

func (cancelingBudget) AllowRetry(context.Context) (bool, error) { return true, nil }

// countingBase answers 200 at once, whatever the request's context says,
// as a base that does not watch the context would; it counts the attempts.
type countingBase struct{ n int }

func (b *countingBase) RoundTrip(r *http.Request) (*http.Response, error) {
	b.n++
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// No attempt starts once the caller's context is done, even when it ended
// during a gate after the call began — also behind a base that would not
// notice.
func TestNoAttemptAfterTheDeadlineStruckInAGate(t *testing.T) {
	base := &countingBase{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, Retry: RetryPolicy{Budget: cancelingBudget{cancel: cancel}}})
	req := newRequest(t, ctx, http.MethodPost, "http://127.0.0.1:1/", "pay 10")
	bs := &bodies{content: "pay 10"}
	bs.attach(req, true)
	resp, err := tr.RoundTrip(req)
	if resp != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, %v; want no response and context.Canceled", resp, err)
	}
	if base.n != 0 {
		t.Errorf("attempts sent: got %d, want 0", base.n)
	}
	if n, total := bs.unclosed(); n != 0 {
		t.Errorf("request bodies: %d of %d left unclosed, want none", n, total)
	}
}

// A generated key is new by construction: the ledger is not asked to hold it.
func TestGeneratedKeysBypassTheLedger(t *testing.T) {
	srv := statusServer(t, http.StatusCreated, "created")
	ledger, err := newMemoryLedger(&ledger.Memory{})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t, newFakeClock(), &Transport{Keys: KeyPolicy{Ledger: ledger, Generate: true}, Retry: RetryPolicy{Budget: budget.Unlimited()}})
	for range 3 {
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order"))
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("got %v, %v; want 201", resp, err)
		}
	}
	if n := ledger.Len(); n != 0 {
		t.Errorf("keys in the ledger: got %d, want 0", n)
	}
	if got := srv.count(); got != 3 {
		t.Errorf("requests seen by the server: got %d, want 3", got)
	}
}

// A reconcile error from a retryfuse Transport below is final, whatever its
// cause looks like: the write it reports must not be repeated.
func TestReconcileErrorFromBelowIsFinal(t *testing.T) {
	err := fmt.Errorf("base: %w", &ReconcileRequiredError{Method: http.MethodPost, Cause: io.EOF})
	if got := defaultClassify(nil, err); got != ClassFinal {
		t.Errorf("defaultClassify(reconcile error caused by EOF): got %v, want ClassFinal", got)
	}
	if got := defaultClassify(nil, fmt.Errorf("base: %w", io.EOF)); got != ClassRetryable {
		t.Errorf("defaultClassify(EOF): got %v, want ClassRetryable", got)
	}
}
