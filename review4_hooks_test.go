package retryfuse

import (
	"net/http"
	"testing"
	"time"
)

// Hooks set after Validate (which the Transport's doc allows: its fields
// are frozen by the first RoundTrip) report the time since RoundTrip was
// called, not the time since year 1.
func TestR4ElapsedOfHooksSetAfterValidate(t *testing.T) {
	clk := newFakeClock()
	tr := newTransport(t, clk, &Transport{Base: always503(), MaxAttempts: 2, BudgetUnits: 100})
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	var log hookLog
	tr.Hooks = log.hooks()
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://api.example.test/", "")); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.decisions) == 0 || len(log.dones) != 2 {
		t.Fatalf("events: got %d decisions and %d attempts done, want some and 2", len(log.decisions), len(log.dones))
	}
	if got := log.decisions[0].Elapsed; got != 0 {
		t.Errorf("Elapsed of the first Decision: got %v, want 0 (the fake clock has not moved)", got)
	}
	wait := clk.Sleeps()
	if got, want := log.dones[1].Elapsed, wait[0]; got != want || got > time.Hour {
		t.Errorf("Elapsed of the second AttemptDone: got %v, want %v (the one wait)", got, want)
	}
}
