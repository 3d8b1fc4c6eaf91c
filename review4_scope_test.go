package retryfuse

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// always503 is a base that answers every request with a 503, without a
// network.
func always503() http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	})
}

// One scope is one budget, however its URL spells the default port:
// http://h/ and http://h:80/ are the same dependency (HostScope names both
// "http://h:80"), so NewBudget is called once and both share its budget.
func TestR4DefaultPortSpellingsShareOneBudget(t *testing.T) {
	var (
		mu     sync.Mutex
		scopes []string
	)
	tr := newTransport(t, newFakeClock(), &Transport{
		Base:        always503(),
		MaxAttempts: 1,
		NewBudget: func(scope string) (Budget, error) {
			mu.Lock()
			scopes = append(scopes, scope)
			mu.Unlock()
			return UnlimitedBudget{}, nil
		},
	})
	for _, u := range []string{"http://api.example.test/a", "http://api.example.test:80/b", "https://api.example.test/c", "https://api.example.test:443/d"} {
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, u, ""))
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		_ = resp
	}
	want := []string{"http://api.example.test:80", "https://api.example.test:443"}
	if len(scopes) != len(want) || scopes[0] != want[0] || scopes[1] != want[1] {
		t.Errorf("NewBudget called for scopes %q, want %q (once per scope)", scopes, want)
	}
}
