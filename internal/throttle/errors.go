package throttle

import (
	"strconv"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// ErrThrottled is matched by the error of a call that the throttle of its
// scope refused before anything was sent (see ThrottlePolicy). It matches
// ErrDeclined; ReasonName names it "throttled".
var ErrThrottled = sentinel.Declined("retryfuse: throttled")

// Error is the error of a throttled call: ErrThrottled, with its scope
// and the share of new calls the throttle refused then (Admit's).
type Error struct {
	Scope string
	Share float64
}

func (e *Error) Error() string {
	return "retryfuse: throttled: " + e.Scope + " has rejected most recent requests; " +
		strconv.Itoa(int(e.Share*100+0.5)) + "% of new calls are refused before they are sent"
}

// Unwrap makes errors.Is match ErrThrottled, and through it ErrDeclined.
func (e *Error) Unwrap() error { return ErrThrottled }
