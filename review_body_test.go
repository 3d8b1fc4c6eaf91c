package retryfuse

import (
	"net/http"
	"testing"
	"time"
)

// roundTripFunc adapts a function to an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A base may answer with a nil Body (http.Client tolerates it and puts an
// empty one in its place). With AttemptTimeout set, the transport wrapped
// that nil Body to release the attempt's context on Close: the caller got a
// non-nil Body whose Read and Close panicked.
func TestRvNilResponseBodyWithAttemptTimeout(t *testing.T) {
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Request: r}, nil
	})
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, AttemptTimeout: time.Minute})
	var (
		resp *http.Response
		body []byte
		err  error
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("reading the response panicked: %v", p)
			}
		}()
		resp, body, err = do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://example.invalid/", ""))
	}()
	if err != nil || resp.StatusCode != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("Do: got %v, %q, %v; want 204 with an empty body", resp, body, err)
	}
}
