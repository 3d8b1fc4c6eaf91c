package retryfuse_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
)

// A Breaker on a Transport: after three failures in a row the scope opens,
// and the next call fails fast without being sent. The BreakerChange hook
// reports the transition.
func ExampleBreaker() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // the dependency is down
	}))
	defer srv.Close()

	b, err := breaker.New(breaker.Settings{
		FailureThreshold: 3,
		OpenTimeout:      time.Minute,
	})
	if err != nil {
		panic(err)
	}
	tr := &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{
			MaxAttempts: 1,
		},
		Brake: retryfuse.BrakePolicy{
			Breaker: b,
		},
		Scope: retryfuse.ScopePolicy{
			Of: func(*http.Request) string { return "payments" },
		},
		Hooks: retryfuse.Hooks{BreakerChange: func(i breaker.Change) {
			fmt.Printf("%s: %v -> %v (cause: %v)\n", i.Scope, i.From, i.To, i.Cause)
		}},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	for i := range 4 {
		resp, err := client.Get(srv.URL)
		if errors.Is(err, breaker.ErrOpen) {
			fmt.Printf("call %d not sent: circuit open\n", i+1)
			continue
		}
		resp.Body.Close()
		fmt.Printf("call %d: %d\n", i+1, resp.StatusCode)
	}
	// Output:
	// call 1: 503
	// call 2: 503
	// payments: closed -> open (cause: retryfuse: retryable status 503 Service Unavailable)
	// call 3: 503
	// call 4 not sent: circuit open
}
