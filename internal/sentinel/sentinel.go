// Package sentinel holds the sentinel errors that the root package shares
// with the packages of its policies, so that an error made in a policy's
// package matches the root's exported sentinel with errors.Is: ErrDeclined
// (exported as retryfuse.ErrDeclined), ErrInvalidPolicy (exported as
// retryfuse.ErrInvalidPolicy), ErrInvalidIdempotencyKey (exported as
// retryfuse.ErrInvalidIdempotencyKey), ErrNotRepeatable (exported as
// retryfuse.ErrNotRepeatable) and ErrFingerprintLimit (exported as
// retryfuse.ErrFingerprintLimit).
package sentinel

import (
	"errors"
	"fmt"
	"math"
)

var (
	// ErrDeclined is wrapped by every refusal on a limit that passes.
	ErrDeclined = errors.New("retryfuse: declined")
	// ErrInvalidPolicy is wrapped by every error about an invalid setting.
	ErrInvalidPolicy = errors.New("retryfuse: invalid policy")
	// ErrInvalidIdempotencyKey is wrapped by every error about a key that
	// cannot be used: a header that cannot be sent safely, an empty key
	// given to a ledger.
	ErrInvalidIdempotencyKey = errors.New("retryfuse: invalid idempotency key")
	// ErrNotRepeatable is wrapped by every error about a request that may
	// not be sent again, or whose body cannot be read again.
	ErrNotRepeatable = errors.New("retryfuse: request is not repeatable")
	// ErrFingerprintLimit is wrapped by the error about a body longer than
	// the limit of its fingerprint.
	ErrFingerprintLimit = errors.New("retryfuse: body longer than the fingerprint limit")
)

// Declined returns a sentinel error with message msg that matches
// ErrDeclined.
func Declined(msg string) error { return &declinedError{msg} }

type declinedError struct{ msg string }

func (e *declinedError) Error() string { return e.msg }
func (e *declinedError) Unwrap() error { return ErrDeclined }

// InvalidPolicy returns the error of a setting named field: "<ErrInvalidPolicy>: field problem".
func InvalidPolicy(field, problem string) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidPolicy, field, problem)
}

// Finite reports a negative, NaN or infinite setting.
func Finite(field string, v float64) error {
	switch {
	case math.IsNaN(v):
		return InvalidPolicy(field, "is NaN")
	case math.IsInf(v, 0):
		return InvalidPolicy(field, "is infinite")
	case v < 0:
		return InvalidPolicy(field, "is negative")
	}
	return nil
}
