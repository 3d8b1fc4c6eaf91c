package retryfuse

import "time"

type BreakerState uint8

type BreakerSettings struct{}

type BreakerTransition struct {
	Scope    string
	From, To BreakerState
	At       time.Time
	Cause    error
	Settings BreakerSettings
}
