package retryfusetest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// The examples below show each fault as a retryfuse client meets it: a
// keyed POST (a charge) or a GET through a retryfuse.Transport over the
// fault Transport, and the effects the handler applied.

// charges is the handler of the examples: it applies a charge and
// answers 201 with "charged".
var charges = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, "charged")
})

// call sends a request through a retryfuse Transport over base, with the
// policy given, and prints what the caller gets: the status and body, or
// the kind of error.
func call(base http.RoundTripper, method string, retry retryfuse.RetryPolicy) {
	callAt("http://payments.test", base, method, retry)
}

// callAt is call to the server at url.
func callAt(url string, base http.RoundTripper, method string, retry retryfuse.RetryPolicy) {
	req, _ := http.NewRequestWithContext(context.Background(), method, url+"/charges", strings.NewReader(`{"amount":1}`))
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", "order-1")
	}
	resp, err := (&http.Client{Transport: &retryfuse.Transport{Base: base, Retry: retry}}).Do(req)
	var rec *retryfuse.ReconcileRequiredError
	switch {
	case errors.As(err, &rec):
		fmt.Printf("reconcile required, phase %v, attempts %d\n", rec.Phase, rec.Attempts)
	case err != nil:
		fmt.Println("error:", errors.Unwrap(err))
	default:
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Printf("%d %q %v\n", resp.StatusCode, body, err)
	}
}

func ExampleAnswer() {
	rec := retryfusetest.NewRecorder()
	call(retryfusetest.NewTransport(rec.Wrap(charges), retryfusetest.Answer()), http.MethodPost, retryfuse.RetryPolicy{})
	fmt.Println("applied:", rec.Applied("order-1"))
	// Output:
	// 201 "charged" <nil>
	// applied: 1
}

// A refused connection wrote nothing: even a POST is sent again.
func ExampleRefuse() {
	rec := retryfusetest.NewRecorder()
	api := retryfusetest.NewTransport(rec.Wrap(charges), retryfusetest.Refuse())
	call(api, http.MethodPost, retryfuse.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	fmt.Println("met:", api.Met(), "applied:", rec.Applied("order-1"))
	// Output:
	// 201 "charged" <nil>
	// met: [Refuse() Answer()] applied: 1
}

// Reset before the server read it: nothing applied, but the client cannot
// know, and must reconcile.
func ExampleResetBeforeRead() {
	rec := retryfusetest.NewRecorder()
	call(retryfusetest.NewTransport(rec.Wrap(charges), retryfusetest.ResetBeforeRead()), http.MethodPost, retryfuse.RetryPolicy{})
	fmt.Println("applied:", rec.Applied("order-1"))
	// Output:
	// reconcile required, phase post_write, attempts 1
	// applied: 0
}

// The lost response after commit.
func ExampleApplyThenReset() {
	rec := retryfusetest.NewRecorder()
	call(retryfusetest.NewTransport(rec.Wrap(charges), retryfusetest.ApplyThenReset()), http.MethodPost, retryfuse.RetryPolicy{})
	fmt.Println("applied:", rec.Applied("order-1"))
	// Output:
	// reconcile required, phase post_write, attempts 1
	// applied: 1
}

// A GET after a closed connection is simply sent again.
func ExampleApplyThenClose() {
	api := retryfusetest.NewTransport(charges, retryfusetest.ApplyThenClose())
	call(api, http.MethodGet, retryfuse.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	fmt.Println("requests:", api.Requests())
	// Output:
	// 201 "charged" <nil>
	// requests: 2
}

// stallTimeout ends the attempts of the stall examples. It runs from
// before the attempt reaches the fault Transport, which sends nothing once
// it has struck: it must outlast any pause of a loaded machine (a shorter
// one, struck before the request was written, turns the post_write
// reconcile shown into an unknown phase, or into no effect at all).
const stallTimeout = time.Second

// A stalled write times out after it was written: reconcile.
func ExampleStallBeforeApply() {
	rec := retryfusetest.NewRecorder()
	api := retryfusetest.NewTransport(rec.Wrap(charges), retryfusetest.StallBeforeApply())
	call(api, http.MethodPost, retryfuse.RetryPolicy{AttemptTimeout: stallTimeout})
	fmt.Println("applied:", rec.Applied("order-1"))
	// Output:
	// reconcile required, phase post_write, attempts 1
	// applied: 0
}

func ExampleApplyThenStall() {
	rec := retryfusetest.NewRecorder()
	api := retryfusetest.NewTransport(rec.Wrap(charges), retryfusetest.ApplyThenStall())
	call(api, http.MethodPost, retryfuse.RetryPolicy{AttemptTimeout: stallTimeout})
	fmt.Println("applied:", rec.Applied("order-1"))
	// Output:
	// reconcile required, phase post_write, attempts 1
	// applied: 1
}

// A load balancer answers two 503s before the request reaches the
// server: the GET is sent again past them, and applied once.
func ExampleStatus() {
	rec := retryfusetest.NewRecorder()
	api := retryfusetest.NewTransport(rec.Wrap(charges),
		retryfusetest.Status(http.StatusServiceUnavailable), retryfusetest.Status(http.StatusServiceUnavailable))
	call(api, http.MethodGet, retryfuse.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	fmt.Println("met:", api.Met())
	fmt.Println("applied:", rec.Total())
	// Output:
	// 201 "charged" <nil>
	// met: [Status(503) Status(503) Answer()]
	// applied: 1
}

// A Retry-After longer than the Transport's cap is not waited: the 429
// comes back at once.
func ExampleRetryAfter() {
	api := retryfusetest.NewTransport(charges, retryfusetest.RetryAfter(http.StatusTooManyRequests, 2*time.Second))
	call(api, http.MethodGet, retryfuse.RetryPolicy{MaxRetryAfter: time.Second})
	resp, _ := retryfusetest.NewTransport(nil, retryfusetest.RetryAfter(http.StatusTooManyRequests, 1500*time.Millisecond)).
		RoundTrip(httpGet())
	fmt.Println("Retry-After:", resp.Header.Get("Retry-After"))
	// Output:
	// 429 "" <nil>
	// Retry-After: 2
}

func ExampleRetryAfterDate() {
	before := time.Now()
	resp, _ := retryfusetest.NewTransport(nil, retryfusetest.RetryAfterDate(http.StatusServiceUnavailable, 10*time.Second)).
		RoundTrip(httpGet())
	after := time.Now()
	at, err := http.ParseTime(resp.Header.Get("Retry-After"))
	// 10s after the answer, rounded up to a whole second: the answer came
	// between before and after.
	fmt.Println(resp.StatusCode, err, !at.Before(before.Add(10*time.Second)) && at.Before(after.Add(11*time.Second)))
	// Output:
	// 503 <nil> true
}

// The body arrives one byte per interval.
func ExampleSlowBody() {
	call(retryfusetest.NewTransport(charges, retryfusetest.SlowBody(time.Millisecond)), http.MethodGet, retryfuse.RetryPolicy{})
	// Output:
	// 201 "charged" <nil>
}

// The body stops short of its Content-Length.
func ExampleTruncatedBody() {
	call(retryfusetest.NewTransport(charges, retryfusetest.TruncatedBody(3)), http.MethodGet, retryfuse.RetryPolicy{})
	// Output:
	// 201 "cha" unexpected EOF
}

// An HTTP/2 stream reset before the handler ran: a POST must reconcile, a
// GET is sent again.
func ExampleStreamReset() {
	call(retryfusetest.NewTransport(charges, retryfusetest.StreamReset()), http.MethodPost, retryfuse.RetryPolicy{})
	call(retryfusetest.NewTransport(charges, retryfusetest.StreamReset()), http.MethodGet,
		retryfuse.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	// Output:
	// reconcile required, phase post_write, attempts 1
	// 201 "charged" <nil>
}

func ExampleRecorder() {
	rec := retryfusetest.NewRecorder()
	api := retryfusetest.NewTransport(rec.Wrap(charges))
	for _, key := range []string{"a", "b", "a"} {
		req, _ := http.NewRequest(http.MethodPost, "http://payments.test/charges", strings.NewReader("body-"+key))
		req.Header.Set("Idempotency-Key", key)
		resp, _ := api.RoundTrip(req)
		_ = resp.Body.Close()
	}
	fmt.Println(rec.Keys(), rec.Applied("a"), rec.Bodies("a"), rec.Total())
	// Output:
	// [a b] 2 [body-a body-a] 3
}

// A Server puts the faults on a real loopback socket.
func ExampleNewServer() {
	srv := retryfusetest.NewServer(nil, charges, retryfusetest.ApplyThenReset())
	defer srv.Close()
	callAt(srv.URL, srv.Client().Transport, http.MethodPost, retryfuse.RetryPolicy{})
	fmt.Println("met:", srv.Met())
	// Output:
	// reconcile required, phase post_write, attempts 1
	// met: [ApplyThenReset()]
}

func httpGet() *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	return req
}
