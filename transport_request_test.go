package retryfuse

import (
	"context"
	"errors"
	"math"
	"net/http"
	"testing"
	"time"
)

// requestSnapshot is what a caller may rely on being unchanged after
// RoundTrip.
type requestSnapshot struct {
	method, url, host string
	header            http.Header
	ctx               context.Context
	body              any
	contentLength     int64
	hasGetBody        bool
}

func snapshot(r *http.Request) requestSnapshot {
	return requestSnapshot{
		method: r.Method, url: r.URL.String(), host: r.Host, header: r.Header.Clone(),
		ctx: r.Context(), body: r.Body, contentLength: r.ContentLength, hasGetBody: r.GetBody != nil,
	}
}

func (s requestSnapshot) diff(r *http.Request) string {
	switch {
	case r.Method != s.method:
		return "Method " + r.Method + ", want " + s.method
	case r.URL.String() != s.url:
		return "URL " + r.URL.String() + ", want " + s.url
	case r.Host != s.host:
		return "Host " + r.Host + ", want " + s.host
	case !equalHeaders(r.Header, s.header):
		return "Header changed"
	case r.Context() != s.ctx:
		return "Context replaced"
	case any(r.Body) != s.body:
		return "Body replaced"
	case r.ContentLength != s.contentLength:
		return "ContentLength changed"
	case (r.GetBody != nil) != s.hasGetBody:
		return "GetBody changed"
	}
	return ""
}

// The caller's request is never modified, and every body the transport
// was given or obtained is closed, whatever the path. RoundTrip is called
// directly: http.Client closes bodies too and would hide a leak.
func TestCallerRequestUnmodifiedAndBodyClosed(t *testing.T) {
	tests := []struct {
		name    string
		handler func(int, http.ResponseWriter, *http.Request)
		tr      *Transport
		key     string
		refused bool
		wantErr error
		wantN   int // requests the server sees
	}{
		{name: "success", handler: failThenOK(0), key: "k1", wantN: 1},
		{name: "success with generated key", handler: failThenOK(0), tr: &Transport{GenerateIdempotencyKeys: true}, wantN: 1},
		{name: "retry", handler: failThenOK(2), key: "k1", wantN: 3},
		{name: "retry with attempt timeout", handler: failThenOK(2), key: "k1", tr: &Transport{AttemptTimeout: time.Minute}, wantN: 3},
		{name: "invalid key", handler: failThenOK(0), key: "k\r\n1", wantErr: ErrInvalidIdempotencyKey},
		{name: "invalid policy", handler: failThenOK(0), key: "k1", tr: &Transport{MaxAttempts: -1}, wantErr: ErrInvalidPolicy},
		{name: "not repeatable", handler: failThenOK(1), wantN: 1},
		{name: "uncertain write", handler: stallUntilGone, key: "k1", tr: &Transport{AttemptTimeout: shortTimeout}, wantErr: ErrReconcileRequired, wantN: 1},
		{name: "refused connection", key: "k1", refused: true, wantErr: ErrAttemptsExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var srv *testServer
			url := refusedURL(t)
			if !tt.refused {
				srv = newTestServer(t, tt.handler)
				url = srv.URL + "/orders?token=secret"
			}
			tr := tt.tr
			if tr == nil {
				tr = &Transport{}
			}
			newTransport(t, newFakeClock(), tr)
			req := newRequest(t, testCtx(t), http.MethodPost, url, "")
			bs := &bodies{content: `{"amount":10}`}
			bs.attach(req, true)
			req.Header.Set("Accept", "application/json")
			if tt.key != "" {
				req.Header.Set(headerIdempotencyKey, tt.key)
			}
			before := snapshot(req)

			resp, err := tr.RoundTrip(req)
			if resp != nil {
				_ = resp.Body.Close()
			}
			if tt.wantErr == nil && err != nil {
				t.Errorf("RoundTrip: got error %v, want nil", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("RoundTrip: got error %v, want one matching %v", err, tt.wantErr)
			}
			if d := before.diff(req); d != "" {
				t.Errorf("caller's request modified: %s", d)
			}
			if srv != nil {
				if got := srv.count(); got != tt.wantN {
					t.Errorf("requests seen by the server: got %d, want %d", got, tt.wantN)
				}
			}
			if n, total := bs.unclosed(); n != 0 {
				t.Errorf("request bodies: %d of %d left unclosed, want none", n, total)
			}
		})
	}
}

func TestInvalidPolicy(t *testing.T) {
	tests := []struct {
		name string
		tr   *Transport
	}{
		{"negative MaxAttempts", &Transport{MaxAttempts: -1}},
		{"negative InitialBackoff", &Transport{InitialBackoff: -time.Second}},
		{"negative MaxBackoff", &Transport{MaxBackoff: -time.Second}},
		{"MaxBackoff below InitialBackoff", &Transport{InitialBackoff: 2 * time.Second, MaxBackoff: time.Second}},
		{"negative AttemptTimeout", &Transport{AttemptTimeout: -time.Second}},
		{"negative MaxRetryAfter", &Transport{MaxRetryAfter: -time.Second}},
		{"negative FailureThreshold", &Transport{FailureThreshold: -1}},
		{"negative BudgetUnits", &Transport{BudgetUnits: -1}},
		{"NaN BudgetUnits", &Transport{BudgetUnits: math.NaN()}},
		{"infinite BudgetUnits", &Transport{BudgetUnits: math.Inf(1)}},
		{"negative TimeoutCost", &Transport{TimeoutCost: -1}},
		{"NaN TimeoutCost", &Transport{TimeoutCost: math.NaN()}},
		{"infinite TimeoutCost", &Transport{TimeoutCost: math.Inf(1)}},
		{"negative MaxDrainBytes", &Transport{MaxDrainBytes: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := statusServer(t, 200, "ok")
			tr := tt.tr
			if err := tr.Validate(); !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("Validate: got %v, want an error wrapping ErrInvalidPolicy", err)
			}
			for range 2 { // the error stays
				_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
				if !errors.Is(err, ErrInvalidPolicy) {
					t.Errorf("Do: got %v, want an error wrapping ErrInvalidPolicy", err)
				}
			}
			if got := srv.count(); got != 0 {
				t.Errorf("requests seen by the server: got %d, want 0", got)
			}
		})
	}
	t.Run("Base is the Transport itself", func(t *testing.T) {
		tr := &Transport{}
		tr.Base = tr
		if err := tr.Validate(); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("Validate: got %v, want an error wrapping ErrInvalidPolicy", err)
		}
	})
	t.Run("zero value is valid", func(t *testing.T) {
		tr := &Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		if err := tr.Validate(); err != nil {
			t.Errorf("Validate: got %v, want nil", err)
		}
	})
}

// A zero MaxBackoff follows a long InitialBackoff rather than making the
// policy invalid: only values the caller set can conflict.
func TestLongInitialBackoffWithDefaultMaxBackoff(t *testing.T) {
	tr := &Transport{InitialBackoff: 20 * time.Second}
	if err := tr.Validate(); err != nil {
		t.Fatalf("Validate: got %v, want nil", err)
	}
	if got := tr.p.maxBackoff; got != 20*time.Second {
		t.Errorf("resolved MaxBackoff: got %v, want 20s", got)
	}
}

func TestNilRequestIsAnError(t *testing.T) {
	resp, err := (&Transport{}).RoundTrip(nil)
	if resp != nil || err == nil {
		t.Fatalf("RoundTrip(nil): got %v, %v; want no response and an error", resp, err)
	}
}
