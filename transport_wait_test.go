package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/backoff"
)

func TestRetryAfterHonoured(t *testing.T) {
	gmt := func(layout string) func(time.Time) string {
		return func(now time.Time) string {
			return strings.Replace(now.Add(7*time.Second).UTC().Format(layout), "UTC", "GMT", 1)
		}
	}
	tests := []struct {
		name  string
		value func(time.Time) string
	}{
		{"seconds", func(time.Time) string { return "7" }},
		{"IMF-fixdate", gmt(http.TimeFormat)},
		{"RFC 850", gmt(time.RFC850)},
		{"asctime", gmt(time.ANSIC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			var log hookLog
			tr := newTransport(t, clk, &Transport{Base: retryAfterMock(clk, tt.value), Retry: RetryPolicy{MaxRetryAfter: 20 * time.Second}, Hooks: log.hooks()})
			start := clk.Now()
			asked, ok := backoff.RetryAfter(&http.Response{Header: http.Header{"Retry-After": {tt.value(start)}}}, start)
			if !ok || asked < 6*time.Second || asked > 7*time.Second {
				t.Fatalf("bad case: value %q asks %v, %v", tt.value(start), asked, ok)
			}
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, mockURL, ""))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("Do: got %v, %v; want 200", resp, err)
			}
			sleeps := clk.Sleeps()
			if len(sleeps) != 1 || sleeps[0] < asked || sleeps[0] > 20*time.Second {
				t.Fatalf("waits: got %v, want one within [%v, 20s]", sleeps, asked)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.retries) != 1 || log.retries[0].Source != "retry_after" || log.retries[0].RetryAfter != asked || log.retries[0].Delay != sleeps[0] {
				t.Errorf("Retry events: got %+v, want one from retry_after asking %v, delay %v", log.retries, asked, sleeps[0])
			}
		})
	}
}

func TestRetryAfterWithJitterStaysUnderTheCap(t *testing.T) {
	clk := newFakeClock()
	mock := retryAfterMock(clk, func(time.Time) string { return "29" })
	tr := newTransport(t, clk, &Transport{
		Base: mock,
		Retry: RetryPolicy{
			MaxRetryAfter:  30 * time.Second,
			InitialBackoff: 5 * time.Second,
			MaxBackoff:     5 * time.Second,
		},
	})
	setRandN(tr, func(n int64) int64 { return n - 1 }) // the largest jitter
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, mockURL, "")); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got := clk.Sleeps(); len(got) != 1 || got[0] != 30*time.Second {
		t.Errorf("waits: got %v, want [30s] (29s asked plus jitter, capped)", got)
	}
}

func TestMalformedRetryAfterIgnored(t *testing.T) {
	for _, value := range []string{"soon", "-5", "1.5", "Tue, 32 Foo 2025 00:00:00 GMT"} {
		t.Run(value, func(t *testing.T) {
			clk := newFakeClock()
			var log hookLog
			tr := newTransport(t, clk, &Transport{
				Base: retryAfterMock(clk, func(time.Time) string { return value }),
				Retry: RetryPolicy{
					InitialBackoff: time.Second,
					MaxBackoff:     time.Second,
				},
				Hooks: log.hooks(),
			})
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, mockURL, ""))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("Do: got %v, %v; want 200", resp, err)
			}
			if got := clk.Sleeps(); len(got) != 1 || got[0] != 500*time.Millisecond {
				t.Errorf("waits: got %v, want [500ms] (the backoff, half-ceiling jitter)", got)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.retries) != 1 || log.retries[0].Source != "backoff" {
				t.Errorf("Retry events: got %+v, want one from backoff", log.retries)
			}
		})
	}
}

func TestRetryAfterTooLongReturnsTheResponseAtOnce(t *testing.T) {
	tests := []struct {
		name     string
		value    string
		deadline time.Duration
	}{
		{"over MaxRetryAfter", "31", 0},
		{"year 9999", "Fri, 31 Dec 9999 23:59:59 GMT", 0},
		{"huge seconds", "99999999999999999999", 0},
		{"longer than the deadline", "6", 5 * time.Second},
		{"as long as the deadline", "5", 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			var log hookLog
			mock := retryAfterMock(clk, func(time.Time) string { return tt.value })
			tr := newTransport(t, clk, &Transport{Base: mock, Retry: RetryPolicy{MaxRetryAfter: 30 * time.Second}, Hooks: log.hooks()})
			ctx := testCtx(t)
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, clk.Now().Add(tt.deadline))
				defer cancel()
			}
			resp, body, err := do(tr, newRequest(t, ctx, http.MethodGet, mockURL, ""))
			if err != nil {
				t.Fatalf("Do: got error %v, want nil and the 503", err)
			}
			if resp.StatusCode != 503 || string(body) != "busy" {
				t.Errorf("got %d %q, want 503 %q", resp.StatusCode, body, "busy")
			}
			if got := resp.Header.Get("Retry-After"); got != tt.value {
				t.Errorf("Retry-After handed back: got %q, want %q", got, tt.value)
			}
			if got := mock.GetTotalCallCount(); got != 1 {
				t.Errorf("attempts sent: got %d, want 1", got)
			}
			if got := clk.Sleeps(); len(got) != 0 {
				t.Errorf("waits: got %v, want none", got)
			}
			if got := log.giveUpReasons(); len(got) != 1 || !errors.Is(got[0], errRetryAfterTooLong) {
				t.Errorf("GiveUp reasons: got %v, want [errRetryAfterTooLong]", got)
			}
		})
	}
}

func TestDeadlineShorterThanBackoff(t *testing.T) {
	t.Run("response", func(t *testing.T) {
		clk := newFakeClock()
		var log hookLog
		mock := httpmock.NewMockTransport()
		mock.RegisterResponder(http.MethodGet, mockURL, sequenceResponder(503, 200))
		tr := newTransport(t, clk, &Transport{Base: mock, Retry: RetryPolicy{InitialBackoff: 5 * time.Second, MaxBackoff: 5 * time.Second}, Hooks: log.hooks()})
		ctx, cancel := context.WithDeadline(testCtx(t), clk.Now().Add(2*time.Second))
		defer cancel()
		resp, _, err := do(tr, newRequest(t, ctx, http.MethodGet, mockURL, ""))
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("Do: got %v, %v; want the 503 and no error", resp, err)
		}
		if got := clk.Sleeps(); len(got) != 0 {
			t.Errorf("waits: got %v, want none", got)
		}
		if got := mock.GetTotalCallCount(); got != 1 {
			t.Errorf("attempts sent: got %d, want 1", got)
		}
		if got := log.giveUpReasons(); len(got) != 1 || !errors.Is(got[0], ErrDeadline) {
			t.Errorf("GiveUp reasons: got %v, want [ErrDeadline]", got)
		}
	})
	t.Run("error", func(t *testing.T) {
		clk := newFakeClock()
		mock := httpmock.NewMockTransport()
		mock.RegisterResponder(http.MethodGet, mockURL, httpmock.NewErrorResponder(io.ErrUnexpectedEOF))
		tr := newTransport(t, clk, &Transport{Base: mock, Retry: RetryPolicy{InitialBackoff: 5 * time.Second, MaxBackoff: 5 * time.Second}})
		ctx, cancel := context.WithDeadline(testCtx(t), clk.Now().Add(2*time.Second))
		defer cancel()
		_, _, err := do(tr, newRequest(t, ctx, http.MethodGet, mockURL, ""))
		if !errors.Is(err, ErrDeadline) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("Do: got error %v, want one matching ErrDeadline and the last error", err)
		}
		if got := clk.Sleeps(); len(got) != 0 {
			t.Errorf("waits: got %v, want none", got)
		}
	})
}

func TestCancellationMidWait(t *testing.T) {
	srv := statusServer(t, 503, "busy")
	clk := newFakeClock()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	clk.onSleep = func(time.Duration) { cancel() } // the caller gives up during the wait
	var log hookLog
	tr := newTransport(t, clk, &Transport{Retry: RetryPolicy{MaxAttempts: 5}, Hooks: log.hooks()})
	resp, _, err := do(tr, newRequest(t, ctx, http.MethodGet, srv.URL, ""))
	if resp != nil {
		t.Errorf("Do: got a response %d, want none", resp.StatusCode)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do: got error %v, want one matching context.Canceled", err)
	}
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != 503 {
		t.Errorf("Do: got error %v, want it to carry the last status, a *StatusError 503", err)
	}
	if got := srv.count(); got != 1 {
		t.Errorf("requests seen by the server: got %d, want 1", got)
	}
	if got := len(clk.Sleeps()); got != 1 {
		t.Errorf("waits: got %d, want 1", got)
	}
	if got := log.giveUpReasons(); len(got) != 1 || !errors.Is(got[0], context.Canceled) {
		t.Errorf("GiveUp reasons: got %v, want [context.Canceled]", got)
	}
}

// The real timer of the wait stops as soon as the caller cancels.
func TestCancellationMidRealWait(t *testing.T) {
	srv := statusServer(t, 503, "busy")
	tr := &Transport{Retry: RetryPolicy{InitialBackoff: time.Hour, MaxBackoff: time.Hour}}
	setRandN(tr, func(n int64) int64 { return n - 1 })
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithCancel(testCtx(t))
	tr.Hooks.Retry = func(RetryInfo) { time.AfterFunc(20*time.Millisecond, cancel) }
	start := time.Now()
	_, _, err := do(tr, newRequest(t, ctx, http.MethodGet, srv.URL, ""))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do: got error %v, want one matching context.Canceled", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Do returned after %v, want shortly after the cancellation", el)
	}
}

func TestCancelledBeforeTheFirstAttempt(t *testing.T) {
	srv := statusServer(t, 200, "ok")
	tr := newTransport(t, newFakeClock(), &Transport{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := newRequest(t, ctx, http.MethodPost, srv.URL, "")
	bs := &bodies{content: "payload"}
	bs.attach(req, true)
	_, err := tr.RoundTrip(req)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RoundTrip: got error %v, want context.Canceled", err)
	}
	if got := srv.count(); got != 0 {
		t.Errorf("requests seen by the server: got %d, want 0", got)
	}
	if n, _ := bs.unclosed(); n != 0 {
		t.Errorf("request bodies left unclosed: got %d, want 0", n)
	}
}

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
func TestNoWaitPastTheDeadlineAfterReadingTheSetAsideBody(t *testing.T) {
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

// The wait before a retry selects between its timer and the caller's
// context; when both are ready, Go picks either, so the wait may end
// "on time" with the caller's context already done. No attempt may start
// then: the seam below ends the wait that way.
func TestNoRetryStartsAfterTheCallerIsDone(t *testing.T) {
	var sent atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	ctx, cancel := context.WithCancel(testCtx(t))
	tr := newTransport(t, nil, &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 3, Budget: budget.Unlimited()}})
	setSleep(tr, func(context.Context, time.Duration) error {
		cancel() // the caller gives up as the timer fires
		return nil
	})

	resp, err := tr.RoundTrip(newRequest(t, ctx, http.MethodGet, "http://rv.invalid/", ""))
	if err == nil {
		_ = resp.Body.Close()
	}
	if got := sent.Load(); got != 1 {
		t.Errorf("attempts sent: got %d, want 1 (none after the caller's context was done)", got)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RoundTrip: got %v, %v; want an error matching context.Canceled", resp, err)
	}
}

// A Retry-After far beyond any cap (a date in the year 9999) neither
// overflows nor waits: the 503 comes back at once, reported as
// errRetryAfterTooLong.
func TestRetryAfterYear9999ReturnsAtOnce(t *testing.T) {
	srv := newFaultServer(t, 3*time.Second)
	var log hookLog
	tr := newTransport(t, nil, &Transport{Hooks: log.hooks()})
	req, err := faultCall{name: "year9999", method: http.MethodGet, fault: faultRetryAfter503, retryAfter: "Fri, 31 Dec 9999 23:59:59 GMT"}.request(testCtx(t), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	resp, _, err := do(tr, req)
	elapsed := time.Since(began)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("Do: got %v, %v; want the 503", resp, err)
	}
	if elapsed > time.Second {
		t.Errorf("call took %v, want the 503 at once", elapsed)
	}
	if got := srv.arrivalsOf("year9999"); got != 1 {
		t.Errorf("attempts that reached the server: got %d, want 1", got)
	}
	if got := log.giveUpReasons(); len(got) != 1 || !errors.Is(got[0], errRetryAfterTooLong) {
		t.Errorf("GiveUp reasons: got %v, want [errRetryAfterTooLong]", got)
	}
}
