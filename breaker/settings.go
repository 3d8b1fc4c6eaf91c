package breaker

import (
	"strconv"
	"time"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// This file is a Breaker's settings: their defaults and their checks.

// Settings configures a Breaker. A zero field means its default; a
// negative one is invalid.
type Settings struct {
	// FailureThreshold is the number of consecutive dependency failures
	// that opens a scope. Zero means 5.
	FailureThreshold int
	// MinObservations is the number of outcomes (successes and failures) a
	// scope must have seen since it last closed, or since it was first
	// seen, before it may open, so that a few failures out of a tiny sample
	// do not open it. Zero means FailureThreshold; a value at or below
	// FailureThreshold has no further effect.
	MinObservations int
	// OpenTimeout is how long a scope stays open before probes may run.
	// Zero means 30s.
	OpenTimeout time.Duration
	// MaxProbes is the number of probes let through at once when a scope is
	// half-open. Zero means 1.
	MaxProbes int
	// ProbeSuccesses is the number of consecutive successful probes that
	// close a half-open scope. Zero means 1.
	ProbeSuccesses int
	// MaxScopes bounds the number of scopes remembered. When it is reached,
	// a new scope evicts the least recently used closed scope that has no
	// request in flight, else the least recently used closed scope (the
	// outcomes of its requests in flight are then dropped). Open and
	// half-open scopes are never forgotten: while every remembered scope is
	// open or half-open, a new scope's requests pass unbraked and
	// uncounted. Zero means 1024.
	MaxScopes int
	// Version names these settings, so that every change of a scope's
	// state, every refusal and every event says which settings were in
	// force (Change.Settings, OpenError.Version): a
	// change of thresholds is never mistaken for a recovery. Zero means
	// the next version: 1 for New, one above the version in force
	// for Update. A version set must not go backwards (see Update).
	Version uint64
}

// resolve validates s and fills in the defaults.
func (s Settings) resolve() (Settings, error) {
	ints := [...]struct {
		name string
		v    int
	}{
		{"FailureThreshold", s.FailureThreshold},
		{"MinObservations", s.MinObservations},
		{"MaxProbes", s.MaxProbes},
		{"ProbeSuccesses", s.ProbeSuccesses},
		{"MaxScopes", s.MaxScopes},
	}
	for _, f := range ints {
		if f.v < 0 {
			return s, sentinel.InvalidPolicy("breaker.Settings."+f.name, "must not be negative, got "+strconv.Itoa(f.v))
		}
	}
	if s.OpenTimeout < 0 {
		return s, sentinel.InvalidPolicy("breaker.Settings.OpenTimeout", "must not be negative, got "+s.OpenTimeout.String())
	}
	orDefault := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	orDefault(&s.FailureThreshold, 5)
	orDefault(&s.MinObservations, s.FailureThreshold)
	orDefault(&s.MaxProbes, 1)
	orDefault(&s.ProbeSuccesses, 1)
	orDefault(&s.MaxScopes, 1024)
	if s.Version == 0 {
		s.Version = 1 // New's; Update gives the next
	}
	if s.OpenTimeout == 0 {
		s.OpenTimeout = 30 * time.Second
	}
	return s, nil
}
