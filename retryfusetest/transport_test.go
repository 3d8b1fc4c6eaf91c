package retryfusetest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryfuse/retryfuse/retryfusetest"
)

// closeCounter is a request body that counts its closes.
type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// traced sends a POST through rt under a trace, and returns the trace
// events in order, the error and the body's closes.
func traced(t *testing.T, ctx context.Context, rt http.RoundTripper) (events []string, err error, closes int32) {
	t.Helper()
	body := &closeCounter{Reader: strings.NewReader("x")}
	var mu atomic.Pointer[[]string]
	mu.Store(&[]string{})
	add := func(e string) { s := append(*mu.Load(), e); mu.Store(&s) }
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn:      func(string) { add("GetConn") },
		GotConn:      func(httptrace.GotConnInfo) { add("GotConn") },
		WroteHeaders: func() { add("WroteHeaders") },
		WroteRequest: func(httptrace.WroteRequestInfo) { add("WroteRequest") },
	})
	req, rerr := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.test/x", body)
	if rerr != nil {
		t.Fatal(rerr)
	}
	resp, err := rt.RoundTrip(req)
	if resp != nil {
		_ = resp.Body.Close()
	}
	return *mu.Load(), err, body.closed.Load()
}

func TestTransportTracesAsTheWireDoes(t *testing.T) {
	for _, tc := range []struct {
		fault  retryfusetest.Fault
		events string
		err    error
	}{
		{retryfusetest.Answer(), "GetConn GotConn WroteHeaders WroteRequest", nil},
		{retryfusetest.Refuse(), "GetConn", syscall.ECONNREFUSED},
		{retryfusetest.ResetBeforeRead(), "GetConn GotConn WroteHeaders WroteRequest", syscall.ECONNRESET},
		{retryfusetest.ApplyThenReset(), "GetConn GotConn WroteHeaders WroteRequest", syscall.ECONNRESET},
		{retryfusetest.ApplyThenClose(), "GetConn GotConn WroteHeaders WroteRequest", io.EOF},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			events, err, closes := traced(t, t.Context(), retryfusetest.NewTransport(nil, tc.fault))
			if got := strings.Join(events, " "); got != tc.events {
				t.Errorf("trace: got %q, want %q", got, tc.events)
			}
			if (tc.err == nil && err != nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
				t.Errorf("error: got %v, want %v", err, tc.err)
			}
			if closes != 1 {
				t.Errorf("request body closed %d times, want once", closes)
			}
		})
	}
}

func TestTransportWithADoneContextSendsNothing(t *testing.T) {
	rec := retryfusetest.NewRecorder()
	rt := retryfusetest.NewTransport(rec.Wrap(nil))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	events, err, closes := traced(t, ctx, rt)
	if !errors.Is(err, context.Canceled) || len(events) != 0 || closes != 1 {
		t.Errorf("got error %v, trace %q, %d closes; want context.Canceled, no trace, one close", err, events, closes)
	}
	if rt.Requests() != 0 || rec.Total() != 0 {
		t.Errorf("requests %d, effects %d; want none", rt.Requests(), rec.Total())
	}
}

func TestTransportStallEndsWithTheClientsContext(t *testing.T) {
	for _, f := range []retryfusetest.Fault{retryfusetest.StallBeforeApply(), retryfusetest.ApplyThenStall()} {
		synctest.Test(t, func(t *testing.T) {
			rec := retryfusetest.NewRecorder()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // the client gives up
			defer cancel()
			start := time.Now()
			_, err, _ := traced(t, ctx, retryfusetest.NewTransport(rec.Wrap(nil), f))
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Minute {
				t.Errorf("%v: got %v after %v, want context.DeadlineExceeded after 1m", f, err, time.Since(start))
			}
			if want := map[bool]int{true: 1}[f.Applies()]; rec.Total() != want {
				t.Errorf("%v: effects: got %d, want %d", f, rec.Total(), want)
			}
		})
	}
}

func TestTransportTurnsAHandlersPanicIntoAClosedConnection(t *testing.T) {
	rt := retryfusetest.NewTransport(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	if _, err, _ := traced(t, t.Context(), rt); !errors.Is(err, io.EOF) {
		t.Errorf("error: got %v, want io.EOF", err)
	}
}

func TestTransportHandsTheHandlerAServersRequest(t *testing.T) {
	var got *http.Request
	var body string
	rt := retryfusetest.NewTransport(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		body = string(b)
	}))
	req, _ := http.NewRequest(http.MethodPut, "http://api.test:8080/a%2Fb?q=1", strings.NewReader("payload"))
	req.Header["idempotency-key"] = []string{"k"}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got.Method != http.MethodPut || got.Host != "api.test:8080" || got.RequestURI != "/a%2Fb?q=1" ||
		got.URL.EscapedPath() != "/a%2Fb" || got.Header.Get("Idempotency-Key") != "k" || body != "payload" || got.ContentLength != 7 {
		t.Errorf("server's request: got %s %s host %q uri %q key %q body %q length %d", got.Method, got.URL, got.Host,
			got.RequestURI, got.Header.Get("Idempotency-Key"), body, got.ContentLength)
	}
	if httptrace.ContextClientTrace(got.Context()) != nil {
		t.Errorf("the server's context carries the client's trace")
	}
}

func TestFaultsPastTheScriptAnswer(t *testing.T) {
	rt := retryfusetest.NewTransport(nil, retryfusetest.ApplyThenReset())
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
		if resp, err := rt.RoundTrip(req); err == nil {
			_ = resp.Body.Close()
		}
	}
	if got := fmt.Sprint(rt.Met()); got != "[ApplyThenReset() Answer() Answer()]" {
		t.Errorf("met: got %s, want the fault and two answers", got)
	}
}

func TestRetryAfterWithAnImpossibleStatusFailsWithAnError(t *testing.T) {
	for _, status := range []int{0, 99, 1000} {
		rt := retryfusetest.NewTransport(nil, retryfusetest.RetryAfter(status, time.Second))
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
		if resp, err := rt.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "not an HTTP status") {
			t.Errorf("status %d: got %v, %v; want an error naming the status", status, resp, err)
		}
		srv := retryfusetest.NewServer(t, nil, retryfusetest.RetryAfterDate(status, time.Second))
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Errorf("Server, status %d: got %d, want 500", status, resp.StatusCode)
		}
	}
}
