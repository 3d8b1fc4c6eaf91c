package retryfusetest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// post sends a charge under key straight to rt (no retries of its own),
// and returns the status and the problem type of its answer.
func post(rt http.RoundTripper, key string) (status int, problem string, err error) {
	req, err := http.NewRequest(http.MethodPost, "http://payments.test/charges", strings.NewReader(`{"amount":1000}`))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var p struct{ Type string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Type, nil
}

// A handler behind the idempotency middleware applies its effect and
// crashes before its response: the middleware holds the key as uncertain,
// and a repeat under it is answered 409 (outcome unknown), never run.
func TestCrashBetweenEffectAndResponseBehindTheMiddlewareIsNeverRunTwice(t *testing.T) {
	charges := retryfusetest.NewRecorder()
	crashing := retryfusetest.NewHandler(charges.Wrap(nil), retryfusetest.ApplyThenReset())
	mw, err := idempotency.New(crashing, idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	api := retryfusetest.NewTransport(mw)

	if _, _, err := post(api, "order-7"); err == nil {
		t.Fatal("first POST: got an answer, want the connection dropped by the crash")
	}
	status, problem, err := post(api, "order-7")
	if err != nil || status != http.StatusConflict || problem != idempotency.ProblemOutcomeUnknown {
		t.Errorf("repeat: got %d %q %v, want 409 %q", status, problem, err, idempotency.ProblemOutcomeUnknown)
	}
	charges.ExactlyOnce(t, "order-7")
}

// ExampleNewHandler places a fault inside the idempotency middleware: the
// handler applies its effect and crashes before its response.
func ExampleNewHandler() {
	charges := retryfusetest.NewRecorder()
	crashing := retryfusetest.NewHandler(charges.Wrap(nil), retryfusetest.ApplyThenReset())
	mw, _ := idempotency.New(crashing, idempotency.Config{})
	api := retryfusetest.NewTransport(mw)

	_, _, err := post(api, "order-7")
	fmt.Println("first:", err)
	status, problem, _ := post(api, "order-7")
	fmt.Println("repeat:", status, problem == idempotency.ProblemOutcomeUnknown)
	fmt.Println("applied:", charges.Applied("order-7"))
	// Output:
	// first: EOF
	// repeat: 409 true
	// applied: 1
}
