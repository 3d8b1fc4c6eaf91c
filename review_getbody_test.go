package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// When GetBody fails for a retry, that retry is never sent: the error
// reports the attempts actually made, and its Last is still the last
// attempt's error (with GetBody's beside it), as RetryError documents.
func TestRvGetBodyFailureReportsTheAttemptsMade(t *testing.T) {
	url := refusedURL(t)
	var log hookLog
	tr := newTransport(t, newFakeClock(), &Transport{MaxAttempts: 3, Budget: UnlimitedBudget{}, Hooks: log.hooks()})
	errGetBody := errors.New("rv: body source gone")
	var calls atomic.Int32
	req := newRequest(t, testCtx(t), http.MethodPut, url, "payload")
	req.GetBody = func() (io.ReadCloser, error) {
		calls.Add(1)
		return nil, errGetBody
	}
	req.Body = io.NopCloser(strings.NewReader("payload"))

	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("RoundTrip: got %v, nil; want an error", resp)
	}
	var re *RetryError
	if !errors.As(err, &re) {
		t.Fatalf("RoundTrip: got %v, want a *RetryError", err)
	}
	if re.Attempts != 1 {
		t.Errorf("RetryError.Attempts: got %d, want 1 (the retry whose body could not be had was not sent)", re.Attempts)
	}
	for _, want := range []error{ErrNotRepeatable, syscall.ECONNREFUSED, errGetBody} {
		if !errors.Is(err, want) {
			t.Errorf("RoundTrip error %q: does not match %v", err, want)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.giveUps) != 1 || log.giveUps[0].Attempt != 1 {
		t.Errorf("GiveUp events: got %+v, want one about attempt 1", log.giveUps)
	}
}
