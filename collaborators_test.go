package retryfuse

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
)

// A typed nil in a collaborator's field (a nil pointer in an interface)
// is a bad setting: Validate and the first RoundTrip refuse it, naming
// the field, and nothing panics.
func TestTypedNilCollaboratorsAreInvalidSettings(t *testing.T) {
	for _, tt := range []struct {
		field string
		tr    func() *Transport
	}{
		{"Keys.Ledger", func() *Transport { return &Transport{Keys: KeyPolicy{Ledger: (*ledger.Memory)(nil)}} }},
		{"Retry.Budget", func() *Transport { return &Transport{Retry: RetryPolicy{Budget: (*budget.Ratio)(nil)}} }},
		{"Base", func() *Transport { return &Transport{Base: (*http.Transport)(nil)} }},
		{"Base", func() *Transport { return &Transport{Base: roundTripFunc(nil)} }},
	} {
		t.Run(tt.field, func(t *testing.T) {
			err := tt.tr().Validate()
			if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Validate: got %v, want ErrInvalidPolicy naming %s", err, tt.field)
			}
			sent := false
			tr := tt.tr()
			if tr.Base == nil {
				tr.Base = roundTripFunc(func(req *http.Request) (*http.Response, error) { sent = true; return nil, errors.New("sent") })
			}
			resp, err := tr.RoundTrip(newRequest(t, WithIdempotencyKey(testCtx(t), "k-1"), http.MethodPost, "http://dep.test/", "order"))
			if resp != nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("RoundTrip: got %v, %v; want ErrInvalidPolicy naming %s", resp, err, tt.field)
			}
			if sent {
				t.Error("a request was sent through a Transport with an invalid setting")
			}
		})
	}
}

// A NewBudget that returns a typed nil ends the call with an error naming
// it, before anything is sent.
func TestNewBudgetReturningATypedNilIsRefused(t *testing.T) {
	sent := false
	tr := &Transport{
		Base:  roundTripFunc(func(req *http.Request) (*http.Response, error) { sent = true; return nil, errors.New("sent") }),
		Retry: RetryPolicy{NewBudget: func(string) (budget.Budget, error) { return (*budget.Ratio)(nil), nil }},
	}
	resp, err := tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
	if resp != nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "Retry.NewBudget") {
		t.Fatalf("RoundTrip: got %v, %v; want ErrInvalidPolicy naming Retry.NewBudget", resp, err)
	}
	if sent {
		t.Error("a request was sent")
	}
}
