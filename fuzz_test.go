package retryfuse

import (
	"net/http"
	"testing"
	"time"
)

// A Retry-After within MaxRetryAfter plus a backoff jitter can exceed what
// a Duration holds when both caps are set near their limits. The wait must
// saturate at MaxRetryAfter, never wrap to a negative delay, which would
// retry at once, earlier than the server asked.
func TestRetryAfterPlusJitterNeverWraps(t *testing.T) {
	const year = 365 * 24 * time.Hour
	srv := newTestServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "3153600000") // 100 years
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	clk := newFakeClock()
	var log hookLog
	tr := newTransport(t, clk, &Transport{
		MaxRetryAfter: 200 * year, InitialBackoff: 200 * year, MaxBackoff: 200 * year,
		Hooks: log.hooks(),
	})
	tr.randN = func(n int64) int64 { return n - 1 } // the largest jitter
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Do: got %v, %v; want 200", resp, err)
	}
	if got := clk.Sleeps(); len(got) != 1 || got[0] != 200*year {
		t.Errorf("waits: got %v, want [%v] (the cap)", got, 200*year)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.retries) != 1 || log.retries[0].Delay != 200*year {
		t.Errorf("Retry hook: got %+v, want one retry with Delay %v", log.retries, 200*year)
	}
}
