package decide

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func failures(n int, phase Phase, cost float64) []Attempt {
	out := make([]Attempt, n)
	for i := range out {
		out[i] = Attempt{Outcome: OutcomeFailure, Phase: phase, Cost: cost}
	}
	return out
}

// TestDecideWorkedExamples pins the worked examples of CONTRACT.md, row by
// row, as Go values.
func TestDecideWorkedExamples(t *testing.T) {
	def := DefaultPolicy()
	get := Request{Method: "GET", ReplayableBody: true}
	tests := []struct {
		name     string
		in       Input
		decision Decision
		evidence Evidence
	}{
		{"get_no_attempts", Input{Policy: def, Request: get}, ReplaySafe, EvidencePass},
		{"post_key_timeout_post_write", Input{Policy: def,
			Request:  Request{Method: "POST", IdempotencyKey: true, ReplayableBody: true},
			Attempts: []Attempt{{OutcomeTimeout, PhasePostWrite, 1}}}, ReconcileRequired, EvidenceUnknown},
		{"put_timeout_post_write", Input{Policy: def,
			Request:  Request{Method: "PUT", ReplayableBody: true},
			Attempts: []Attempt{{OutcomeTimeout, PhasePostWrite, 1}}}, ReplaySafe, EvidencePass},
		{"post_no_key_failure", Input{Policy: def,
			Request:  Request{Method: "POST", ReplayableBody: true},
			Attempts: failures(1, PhasePostWrite, 1)}, Brake, EvidencePass},
		{"get_five_failures", Input{Policy: def, Request: get, Attempts: failures(5, PhasePostWrite, 1)}, Brake, EvidenceFail},
		{"get_cost_60_40", Input{Policy: def, Request: get,
			Attempts: []Attempt{{OutcomeFailure, PhasePostWrite, 60}, {OutcomeFailure, PhasePostWrite, 40}}}, Brake, EvidenceFail},
		{"in_flight_post_key", Input{Policy: def, KeyState: KeyInFlight,
			Request: Request{Method: "POST", IdempotencyKey: true, ReplayableBody: true}}, Brake, EvidencePass},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(tt.in)
			assert.Equal(t, tt.decision, v.Decision, "got decision %s, want %s", v.Decision, tt.decision)
			assert.Equal(t, tt.evidence, v.Evidence, "got evidence %s, want %s", v.Evidence, tt.evidence)
			assert.Equal(t, v, Decide(tt.in), "got a different verdict for the same input")
		})
	}
}

// TestResponseIsNotAPhase pins the one vocabulary of phases: a response came
// after the write, so it is post_write, in the contract, the hooks and the
// logs alike; "response" is no phase.
func TestResponseIsNotAPhase(t *testing.T) {
	var p Phase
	assert.Error(t, p.UnmarshalText([]byte("response")), "got no error, want response refused as a phase")
	_, err := Phase(PhasePostWrite + 1).MarshalText()
	assert.Error(t, err, "got a text form for a phase after post_write, want none")
}

func TestDecideDoesNotAllocate(t *testing.T) {
	in := benchInput()
	if n := testing.AllocsPerRun(100, func() { _ = Decide(in) }); n != 0 {
		t.Errorf("got %v allocations per call, want 0", n)
	}
}

// benchInput is a 10-attempt history that goes through every rule to the
// last: a success, then failures and uncertain idempotent attempts.
func benchInput() Input {
	in := Input{
		Policy:  Policy{FailureThreshold: 10, BudgetUnits: 100},
		Request: Request{Method: "PUT", IdempotencyKey: true, ReplayableBody: true},
	}
	for i := range 10 {
		a := Attempt{Outcome: OutcomeFailure, Phase: PhasePostWrite, Cost: 1.5}
		switch {
		case i == 2:
			a.Outcome = OutcomeSuccess
		case i%3 == 0:
			a.Outcome, a.Phase = OutcomeTimeout, PhaseUnknown
		}
		in.Attempts = append(in.Attempts, a)
	}
	return in
}

func BenchmarkDecide(b *testing.B) {
	in := benchInput()
	b.ReportAllocs()
	var v Verdict
	for b.Loop() {
		v = Decide(in)
	}
	if v.Rule != RuleSend {
		b.Fatalf("got rule %d, want 8: the benchmark must walk every rule", v.Rule)
	}
}

func ExampleDecide() {
	v := Decide(Input{
		Policy:   DefaultPolicy(),
		Request:  Request{Method: "POST", IdempotencyKey: true, ReplayableBody: true},
		Attempts: []Attempt{{Outcome: OutcomeTimeout, Phase: PhasePostWrite, Cost: 1}},
	})
	fmt.Println(v.Decision, v.Evidence)
	// Output: reconcile_required unknown
}
