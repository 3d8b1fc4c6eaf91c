package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
)

// A Breaker driven by hand, on a clock of the caller's: two failures open
// the scope, a request is refused while it is open, and after OpenTimeout
// one probe passes and its success closes the scope. A retryfuse.Transport
// makes the same calls for every attempt (set the Breaker as its
// BrakePolicy.Breaker).
func ExampleBreaker_Allow() {
	b, err := breaker.New(breaker.Settings{FailureThreshold: 2, OpenTimeout: time.Second})
	if err != nil {
		fmt.Println(err) // wraps retryfuse.ErrInvalidPolicy, naming the setting
		return
	}
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	send := func(outcome breaker.Outcome) {
		ticket, change, err := b.Allow("payments", now)
		if err != nil {
			var open *breaker.OpenError
			fmt.Println("refused, not sent; circuit open:", errors.As(err, &open) && errors.Is(err, breaker.ErrOpen))
			return
		}
		if change.To != change.From {
			fmt.Printf("%v -> %v\n", change.From, change.To)
		}
		if change := ticket.Done(outcome, errors.New("503"), now); change.To != change.From {
			fmt.Printf("%v -> %v\n", change.From, change.To)
		}
	}

	send(breaker.Failure)
	send(breaker.Failure)
	send(breaker.Success)
	now = now.Add(time.Second) // OpenTimeout has passed: the next request probes
	send(breaker.Success)
	fmt.Println(b.StateAt("payments", now))
	// Output:
	// closed -> open
	// refused, not sent; circuit open: true
	// open -> half_open
	// half_open -> closed
	// closed
}
