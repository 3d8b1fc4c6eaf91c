package retryfuse_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/retryfuse/retryfuse"
)

// Allow and Done return transitions instead of calling hooks, so they are
// reported here, with no lock held.
func ExampleBreaker() {
	b, err := retryfuse.NewBreaker(retryfuse.BreakerSettings{
		FailureThreshold: 3,
		OpenTimeout:      time.Minute,
	})
	if err != nil {
		panic(err)
	}
	report := func(tr retryfuse.BreakerTransition) {
		if tr.To != 0 {
			fmt.Printf("%s: %v -> %v (cause: %v)\n", tr.Scope, tr.From, tr.To, tr.Cause)
		}
	}

	for i := range 4 {
		ticket, tr, err := b.Allow("payments.example")
		report(tr)
		if errors.Is(err, retryfuse.ErrCircuitOpen) {
			fmt.Printf("request %d not sent: circuit open\n", i+1)
			continue
		}
		// ... send the request; here the dependency refuses every time.
		report(ticket.Done(retryfuse.ObserveFailure, errors.New("connection refused")))
	}
	fmt.Println(b.State("payments.example"), b.State("search.example"))
	// Output:
	// payments.example: closed -> open (cause: connection refused)
	// request 4 not sent: circuit open
	// open closed
}
