package breaker

import (
	"time"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// ErrOpen is matched by every refusal of an open scope, a *OpenError; the
// root package exports it as ErrCircuitOpen, and it matches
// ErrDeclined.
var ErrOpen = sentinel.Declined("retryfuse: circuit open")

// OpenError is returned when the brake of a scope is open: the
// request was not sent. errors.Is(err, ErrOpen) holds.
type OpenError struct {
	Scope    string
	OpenedAt time.Time
	// ProbeAt is when a probe may next be let through.
	ProbeAt time.Time
	// Cause is the dependency failure that opened the circuit, when known.
	Cause error
	// Version is the version of the breaker's settings in force when the
	// request was refused (Settings.Version).
	Version uint64
}

func (e *OpenError) Error() string {
	s := "retryfuse: circuit open for " + e.Scope + " since " + e.OpenedAt.Format(time.RFC3339) + ", next probe at " + e.ProbeAt.Format(time.RFC3339)
	if e.Cause != nil {
		s += ": opened by: " + e.Cause.Error()
	}
	return s
}

// Unwrap returns ErrOpen and the cause that opened the circuit,
// so that errors.Is and errors.As match either.
func (e *OpenError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrOpen}
	}
	return []error{ErrOpen, e.Cause}
}
