package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// slowBody is a response body whose first Read moves the fake clock on by
// took, as a server trickling its body would.
type slowBody struct {
	clk  *fakeClock
	took time.Duration
	done bool
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	b.done = true
	_ = b.clk.Sleep(context.Background(), b.took)
	return copy(p, "busy"), nil
}

func (b *slowBody) Close() error { return nil }

// The set-aside response is read before the wait; when that read uses up
// the time the wait needed, no wait starts that would end past the
// caller's deadline: the 503 goes back, with ErrDeadline reported.
func TestR4NoWaitPastTheDeadlineAfterReadingTheSetAsideBody(t *testing.T) {
	clk := newFakeClock()
	var sent atomic.Int32
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{},
			Body: &slowBody{clk: clk, took: 980 * time.Millisecond}, Request: req}, nil
	})
	var log hookLog
	// The backoff is 50ms (half the 100ms ceiling); 1s is left before the
	// deadline when the 503 arrives, 20ms once its body is read.
	tr := newTransport(t, clk, &Transport{Base: base, Hooks: log.hooks()})
	ctx, cancel := context.WithDeadline(testCtx(t), clk.Now().Add(time.Second))
	defer cancel()
	resp, body, err := do(tr, newRequest(t, ctx, http.MethodGet, "http://api.example.test/", ""))
	if err != nil {
		t.Fatalf("Do: got error %v, want the 503", err)
	}
	if resp.StatusCode != 503 || string(body) != "busy" {
		t.Errorf("got %d %q, want 503 %q", resp.StatusCode, body, "busy")
	}
	if got := sent.Load(); got != 1 {
		t.Errorf("attempts sent: got %d, want 1", got)
	}
	for _, d := range clk.Sleeps() {
		if d != 980*time.Millisecond {
			t.Errorf("a wait of %v started, 20ms before the deadline", d)
		}
	}
	if got := log.giveUpReasons(); len(got) != 1 || !errors.Is(got[0], ErrDeadline) {
		t.Errorf("GiveUp reasons: got %v, want [ErrDeadline]", got)
	}
}
