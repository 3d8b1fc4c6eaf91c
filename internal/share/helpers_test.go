package share

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// patience bounds every wait of these tests on another goroutine.
const patience = 10 * time.Second

// testContext returns a context that ends with the test or after patience.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	t.Cleanup(cancel)
	return ctx
}

// newRequest returns a GET of a fixed URL under ctx.
func newRequest(t *testing.T, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/items", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// await receives from ch, failing the test after patience.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(patience)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s: nothing within %v", what, patience)
		var zero T
		return zero
	}
}

// done reports whether ch is closed now.
func done(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waited is what Flights.Wait returned to one caller.
type waited struct {
	res    *Result
	stream *http.Response
}

// waitOn calls fs.Wait on a goroutine of its own, and sends what it
// returned on the channel it returns.
func waitOn(ctx context.Context, fs *Flights, f *Flight, leader bool) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		res, stream := fs.Wait(ctx, f, leader)
		ch <- waited{res, stream}
	}()
	return ch
}

// body is a response body that records its closing. It is safe for
// concurrent use.
type body struct {
	io.Reader
	closed atomic.Bool
}

func newBody(s string) *body { return &body{Reader: strings.NewReader(s)} }

func (b *body) Close() error { b.closed.Store(true); return nil }

// connBody is the body of a switch of protocols: a connection, written to
// as well as read.
type connBody struct{ *body }

func (connBody) Write(p []byte) (int, error) { return len(p), nil }

// response returns a 200 response with body b, its length n (-1 when
// unknown).
func response(b io.ReadCloser, n int64) *http.Response {
	return &http.Response{
		StatusCode:    http.StatusOK,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		Body:          b,
		ContentLength: n,
	}
}

// readAll reads r's body to its end and closes it.
func readAll(t *testing.T, r *http.Response) (string, error) {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	return string(b), err
}
