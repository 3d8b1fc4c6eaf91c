// Package invalid holds the error of an invalid setting, shared by the root
// package and the packages of its policies: every such error wraps ErrPolicy,
// which the root package exports as ErrInvalidPolicy.
package invalid

import (
	"errors"
	"fmt"
	"math"
)

// ErrPolicy is wrapped by every error about an invalid setting.
var ErrPolicy = errors.New("retryfuse: invalid policy")

// Policy returns the error of a setting named field: "<ErrPolicy>: field problem".
func Policy(field, problem string) error {
	return fmt.Errorf("%w: %s %s", ErrPolicy, field, problem)
}

// Finite reports a negative, NaN or infinite setting.
func Finite(field string, v float64) error {
	switch {
	case math.IsNaN(v):
		return Policy(field, "is NaN")
	case math.IsInf(v, 0):
		return Policy(field, "is infinite")
	case v < 0:
		return Policy(field, "is negative")
	}
	return nil
}
