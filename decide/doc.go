// Package decide is retryfuse's decision core: contract versions 1 and 2 of the question
// "may this request be sent (again)?", and its JSON form.
//
// Decide is pure: no I/O, no clock, no globals, no allocation. Given the
// request's facts (method, idempotency key, replayable body), the state of
// its key in a ledger and the attempts made so far, it returns a Verdict:
// send (replay_safe), return the confirmed result (replay_stored), never
// replay a write that may have taken effect (reconcile_required), stop
// (brake) or refuse a key reused with another body (reject_conflict). The
// rules are evaluated in order and the first that matches decides; Rule
// names it. docs/CONTRACT.md in the repository is the specification, and
// the fixtures in testdata/contract pin it.
//
// DecodeInput reads one question as strict JSON, with errors that name the
// offending field (*InputError); EncodeVerdict writes one answer. The
// command `retryfuse decide` is a thin shell around the two.
//
//	in := decide.Input{
//		Policy:   decide.DefaultPolicy(),
//		Request:  decide.Request{Method: "POST", IdempotencyKey: true, ReplayableBody: true},
//		Attempts: []decide.Attempt{{Outcome: decide.OutcomeTimeout, Phase: decide.PhasePostWrite, Cost: 1}},
//	}
//	v := decide.Decide(in) // reconcile_required, by RuleUncertainWrite
package decide
