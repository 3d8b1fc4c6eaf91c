package sentinel

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestDeclinedMatchesErrDeclinedOnly(t *testing.T) {
	err := Declined("retryfuse: circuit open")
	if !errors.Is(err, ErrDeclined) {
		t.Errorf("errors.Is(%v, ErrDeclined) = false, want true", err)
	}
	if errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("errors.Is(%v, ErrInvalidPolicy) = true, want false", err)
	}
	if got, want := err.Error(), "retryfuse: circuit open"; got != want {
		t.Errorf("message: got %q, want %q", got, want)
	}
	// Two refusals are told apart by identity, not by their messages.
	if other := Declined("retryfuse: circuit open"); errors.Is(err, other) {
		t.Error("two Declined errors of the same message match each other")
	}
}

func TestInvalidPolicyWrapsErrInvalidPolicyAndNamesTheField(t *testing.T) {
	err := InvalidPolicy("Settings.OpenTimeout", "must not be negative")
	if !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("errors.Is(%v, ErrInvalidPolicy) = false, want true", err)
	}
	if errors.Is(err, ErrDeclined) {
		t.Errorf("errors.Is(%v, ErrDeclined) = true, want false", err)
	}
	for _, part := range []string{"Settings.OpenTimeout", "must not be negative"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message %q does not name %q", err.Error(), part)
		}
	}
}

func TestFinite(t *testing.T) {
	tests := []struct {
		v       float64
		problem string // "" when v is accepted
	}{
		{math.NaN(), "NaN"},
		{math.Inf(1), "infinite"},
		{math.Inf(-1), "infinite"},
		{-1, "negative"},
		{-math.SmallestNonzeroFloat64, "negative"},
		{-math.MaxFloat64, "negative"},
		{0, ""},
		{math.Copysign(0, -1), ""}, // -0 is zero
		{math.SmallestNonzeroFloat64, ""},
		{0.1, ""},
		{1, ""},
		{math.MaxFloat64, ""},
	}
	for _, tt := range tests {
		err := Finite("Config.Ratio", tt.v)
		if tt.problem == "" {
			if err != nil {
				t.Errorf("Finite(%v) = %v, want nil", tt.v, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("Finite(%v) = %v, want an error wrapping ErrInvalidPolicy", tt.v, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "Config.Ratio") || !strings.Contains(msg, tt.problem) {
			t.Errorf("Finite(%v) = %q, want it to name Config.Ratio and say %q", tt.v, msg, tt.problem)
		}
	}
}
