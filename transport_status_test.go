package retryfuse

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
	"github.com/retryfuse/retryfuse/decide"
)

const mockURL = "http://api.example.test/items"

// sequenceResponder answers with statuses in turn and then repeats the last.
func sequenceResponder(statuses ...int) httpmock.Responder {
	n := 0
	return func(*http.Request) (*http.Response, error) {
		s := statuses[min(n, len(statuses)-1)]
		n++
		return httpmock.NewStringResponse(s, fmt.Sprintf("answer %d: %d", n, s)), nil
	}
}

func TestRetryableStatusRetriedForGET(t *testing.T) {
	for _, status := range []int{408, 425, 429, 500, 502, 503, 504} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			mock := httpmock.NewMockTransport()
			mock.RegisterResponder(http.MethodGet, mockURL, sequenceResponder(status, 200))
			clk := newFakeClock()
			tr := newTransport(t, clk, &Transport{Base: mock})

			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, mockURL, ""))
			if err != nil {
				t.Fatalf("Do: got error %v, want nil", err)
			}
			if resp.StatusCode != 200 || string(body) != "answer 2: 200" {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "answer 2: 200")
			}
			if got := mock.GetTotalCallCount(); got != 2 {
				t.Errorf("attempts sent: got %d, want 2", got)
			}
			if got := clk.Sleeps(); len(got) != 1 {
				t.Errorf("waits: got %v, want one", got)
			}
		})
	}
}

func TestTerminalStatusNotRetried(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 409, 422, 501, 505} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			mock := httpmock.NewMockTransport()
			mock.RegisterResponder(http.MethodGet, mockURL, sequenceResponder(status, 200))
			clk := newFakeClock()
			var log hookLog
			tr := newTransport(t, clk, &Transport{Base: mock, Hooks: log.hooks()})

			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, mockURL, ""))
			if err != nil {
				t.Fatalf("Do: got error %v, want nil", err)
			}
			if resp.StatusCode != status {
				t.Errorf("status: got %d, want %d", resp.StatusCode, status)
			}
			if got := mock.GetTotalCallCount(); got != 1 {
				t.Errorf("attempts sent: got %d, want 1", got)
			}
			if got := clk.Sleeps(); len(got) != 0 {
				t.Errorf("waits: got %v, want none", got)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.dones) != 1 || log.dones[0].Retryable || log.dones[0].Outcome != decide.OutcomeSuccess || log.dones[0].StatusCode != status {
				t.Errorf("AttemptDone events: got %+v, want one, status %d, not retryable, outcome success", log.dones, status)
			}
		})
	}
}

// A final retryable response goes back as a response, on a real
// connection, with its body readable after RoundTrip returned, with and
// without an attempt timeout.
func TestFinal503ReturnedAsResponse(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("AttemptTimeout=", timeout), func(t *testing.T) {
			srv := newTestServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "unavailable %d", n)
			})
			clk := newFakeClock()
			var log hookLog
			tr := newTransport(t, clk, &Transport{MaxAttempts: 3, AttemptTimeout: timeout, Hooks: log.hooks()})

			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			if err != nil {
				t.Fatalf("Do: got error %v, want nil and the 503", err)
			}
			if resp.StatusCode != 503 || string(body) != "unavailable 3" {
				t.Errorf("got %d %q, want 503 %q", resp.StatusCode, body, "unavailable 3")
			}
			if got := srv.count(); got != 3 {
				t.Errorf("requests seen by the server: got %d, want 3", got)
			}
			if got := len(clk.Sleeps()); got != 2 {
				t.Errorf("waits: got %d, want 2", got)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.giveUps) != 1 || !errors.Is(log.giveUps[0].Reason, ErrAttemptsExhausted) || log.giveUps[0].StatusCode != 503 {
				t.Errorf("GiveUp events: got %+v, want one with ErrAttemptsExhausted and status 503", log.giveUps)
			}
		})
	}
}

// AttemptTimeout bounds an attempt until its headers arrive, not the
// reading of the body.
func TestAttemptTimeoutSparesTheBody(t *testing.T) {
	const timeout = 50 * time.Millisecond
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		time.Sleep(3 * timeout) // a bounded wait on a real socket
		fmt.Fprint(w, "late body")
	})
	tr := newTransport(t, newFakeClock(), &Transport{AttemptTimeout: timeout})
	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil {
		t.Fatalf("Do: got error %v, want nil", err)
	}
	if resp.StatusCode != 200 || string(body) != "late body" {
		t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "late body")
	}
	if got := srv.count(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
}
