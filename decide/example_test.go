package decide_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/retryfuse/retryfuse/decide"
)

// A keyed POST timed out after it was written: it may have been applied,
// so it is never replayed, key or no key.
func ExampleDecide() {
	v := decide.Decide(decide.Input{
		Policy:   decide.DefaultPolicy(),
		Request:  decide.Request{Method: "POST", IdempotencyKey: true, ReplayableBody: true},
		Attempts: []decide.Attempt{{Outcome: decide.OutcomeTimeout, Phase: decide.PhasePostWrite, Cost: 1}},
	})
	fmt.Println(v.Decision, v.Evidence, v.Rule == decide.RuleUncertainWrite)
	// Output: reconcile_required unknown true
}

// The same question in the contract's JSON form.
func ExampleDecodeInput() {
	in, err := decide.DecodeInput(strings.NewReader(`{"contractVersion":1,
		"request":{"method":"PUT"},
		"attempts":[{"outcome":"failure","phase":"pre_write"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := decide.EncodeVerdict(os.Stdout, decide.Decide(in)); err != nil {
		fmt.Println(err)
	}

	_, err = decide.DecodeInput(strings.NewReader(`{"contractVersion":1,"keyState":"maybe"}`))
	fmt.Println(err)
	// Output:
	// {"contractVersion":1,"decision":"replay_safe","evidence":"pass","rule":8,"reason":"the request may be sent"}
	// retryfuse: invalid contract input: keyState: unknown value "maybe", want none, in_flight, completed or conflict
}
