package main

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOverloadScenarioInVirtualTime checks the overload scenario's claims
// in virtual time: the scenario runs in a testing/synctest bubble over a
// network in memory (memNet), so that its workers, queue, deadlines and
// arrivals keep their timing however slow the machine, or the race
// detector, makes the callers. What it measures is what an idle machine
// would; TestDemo checks that the demo's table shows what a run in real
// time measured.
func TestOverloadScenarioInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemNet()
		srv := &servers{listen: mem.listen, dial: mem.dial}
		defer srv.close()
		o, err := runOverload(srv)
		require.NoError(t, err)
		t.Logf("plain loop: %+v", o.Plain)
		t.Logf("MaxInFlight %d: %+v", overloadGuess, o.Static)
		t.Logf("AdaptiveInFlight: %+v", o.Adaptive)

		// The plain loop's queue outgrows the deadlines: most of the work
		// is for callers who had gone, its goodput is a fraction of what
		// the workers can do, and it is still draining when the load
		// falls.
		assert.Greater(t, o.Plain.WastedShare(), 0.5, "plain loop: work done for callers who had gone")
		assert.Less(t, o.Plain.Goodput, overloadCapacity/2, "plain loop: goodput")
		assert.Zero(t, o.Plain.Refused, "the plain loop refuses nothing")
		assert.Equal(t, time.Duration(-1), o.Plain.Recovered, "the plain loop's calls still fail when the load falls")
		// Either bulkhead keeps the queue short: the workers stay busy
		// with calls whose callers still wait, the rest is refused at once,
		// and the calls succeed as soon as the load falls.
		for name, s := range map[string]overloadSide{"MaxInFlight": o.Static, "AdaptiveInFlight": o.Adaptive} {
			assert.Less(t, s.WastedShare(), 0.05, "%s: work done for callers who had gone", name)
			assert.Greater(t, s.Goodput, 0.9*overloadCapacity, "%s: goodput, against the workers' %v/s", name, overloadCapacity)
			assert.Greater(t, s.Goodput, 2*o.Plain.Goodput, "%s: goodput, against the plain loop's", name)
			assert.Less(t, s.P99, o.Plain.P99, "%s: p99 of the calls that succeeded, against the plain loop's", name)
			assert.Less(t, s.Received, o.Plain.Received/2, "%s: requests received, against the plain loop's retries", name)
			assert.Positive(t, s.Refused, "%s: calls refused during the overload", name)
			assert.Zero(t, s.Recovered, "%s: the calls succeed at once when the load falls", name)
		}
	})
}
