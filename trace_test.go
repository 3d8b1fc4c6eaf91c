package retryfuse

import (
	"errors"
	"net/http"
	"testing"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse/decide"
)

// wrapperBase is a RoundTripper around net/http's Transport, as a logging
// or tracing transport is: the transport cannot know its type, but the
// trace it passes on shows that nothing was written.
type wrapperBase struct{ rt http.RoundTripper }

func (w wrapperBase) RoundTrip(r *http.Request) (*http.Response, error) { return w.rt.RoundTrip(r) }

// opaqueBase fails without passing the request on: it gives no trace.
type opaqueBase struct{ err error }

func (o opaqueBase) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return nil, o.err
}

func TestPhaseThroughWrapperBaseIsPreWrite(t *testing.T) {
	inner := cleanhttp.DefaultPooledTransport()
	t.Cleanup(inner.CloseIdleConnections)
	var phases []decide.Phase
	tr := newTransport(t, newFakeClock(), &Transport{
		Base:   wrapperBase{rt: inner},
		Budget: UnlimitedBudget{},
		Hooks:  Hooks{AttemptDone: func(i AttemptDoneInfo) { phases = append(phases, i.Phase) }},
	})
	req := newRequest(t, testCtx(t), http.MethodPost, refusedURL(t), "pay 10")
	req.Header.Set("Idempotency-Key", "k-wrapper")
	_, _, err := do(tr, req)
	if !errors.Is(err, ErrAttemptsExhausted) {
		t.Fatalf("got %v, want ErrAttemptsExhausted: a refused keyed POST is retried behind a wrapper", err)
	}
	if len(phases) != 3 {
		t.Fatalf("got %d attempts, want 3", len(phases))
	}
	for i, p := range phases {
		if p != decide.PhasePreWrite {
			t.Errorf("attempt %d: got phase %v, want pre_write", i+1, p)
		}
	}
}

func TestPhaseWithoutTraceIsUnknownAndTreatedAsWritten(t *testing.T) {
	tr := newTransport(t, newFakeClock(), &Transport{
		Base:   opaqueBase{err: errors.New("opaque failure")},
		Budget: UnlimitedBudget{},
	})
	req := newRequest(t, testCtx(t), http.MethodPost, "http://127.0.0.1:1/", "pay 10")
	req.Header.Set("Idempotency-Key", "k-opaque")
	_, _, err := do(tr, req)
	var rec *ReconcileRequiredError
	if !errors.As(err, &rec) {
		t.Fatalf("got %v, want *ReconcileRequiredError: without a trace the write may have happened", err)
	}
	if rec.Phase != decide.PhaseUnknown || rec.Attempts != 1 {
		t.Errorf("got phase %v after %d attempts, want unknown after 1", rec.Phase, rec.Attempts)
	}
}
