package alarm_test

import (
	"context"
	"fmt"
	"time"

	"github.com/retryfuse/retryfuse/internal/alarm"
)

// wallClock is the wall clock with the runtime's timers, as a Transport's
// is: an alarm on it is a time.Timer.
type wallClock struct{}

func (wallClock) Now() time.Time                       { return time.Now() }
func (wallClock) NewTimer(d time.Duration) *time.Timer { return time.NewTimer(d) }
func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// A wait that races a delay against another event, as a hedge's delay
// races the first attempt's answer: whichever comes first wins, and Stop
// releases the alarm either way.
func ExampleAfter() {
	answer := make(chan string) // no answer comes in this example
	a := alarm.After(wallClock{}, time.Millisecond)
	defer a.Stop()
	select {
	case s := <-answer:
		fmt.Println("answered:", s)
	case <-a.C:
		fmt.Println("the delay is up: send a hedge")
	}
	// Output:
	// the delay is up: send a hedge
}
