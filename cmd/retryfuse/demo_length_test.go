package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The demo's scenarios wait on purpose (a deadline waited out, held
// requests, runs of arrivals); those waits, set by the defaults, are most
// of its length. They stay within 7.5s, so that the demo takes the "about
// eight seconds" the README says.
func TestDemoDefaultsWaitAtMostSevenAndAHalfSeconds(t *testing.T) {
	cfg := defaultDemoConfig()
	held := time.Duration(cfg.tailCalls / tailSlowEvery)
	waits := cfg.deadline + // Retry-After: the plain loop waits out the caller's deadline
		cfg.runFor + // brake: calls arrive for this long
		(demoAttempts+1)*lostAttemptTimeout + // lost response: each plain attempt times out, then retryfuse's one
		held*tailSlowFor + // tail: the plain client waits out every held request
		2*held*tailHedgeDelay + // ... and each hedged side waits at most the hedge delay for each
		overloadFor + overloadAfter + overloadDeadline // overload: arrivals, then the last call's deadline
	assert.LessOrEqual(t, waits, 7500*time.Millisecond, "the defaults' built-in waits")
}
