package decide

import "strconv"

// This file is the decision core: contract versions 1 and 2
// (docs/CONTRACT.md). It is pure: no I/O, no clock, no globals, no
// allocation. Every "may this request be sent (again)?" question of the
// transport is answered here and nowhere else.

// Version is the newest version of the decision contract Decide
// implements. It answers every question of an older version as that
// version did: version 2 adds one fact (Request.ServerHonoursKeys), which
// a question of version 1 cannot set.
const Version = 2

// Phase says how far an attempt got on the wire.
type Phase uint8

const (
	// PhaseUnknown: the base transport gave no trace. Treated as written.
	PhaseUnknown Phase = iota
	// PhasePreWrite: no byte of the request left this process (no connection
	// was obtained: a dial, DNS or TLS failure).
	PhasePreWrite
	// PhasePostWrite: a connection was obtained, so some or all of the
	// request may have been written; a response, too, came after the write.
	PhasePostWrite
)

var phaseNames = [...]string{"unknown", "pre_write", "post_write"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "Phase(" + strconv.Itoa(int(p)) + ")"
}

// Outcome is what one attempt established, in the contract's terms.
type Outcome uint8

const (
	// OutcomeSuccess: a confirmed result (any response that is not retried).
	OutcomeSuccess Outcome = iota + 1
	// OutcomeFailure: a definite failure: a retryable error response, or an
	// error before anything was written.
	OutcomeFailure
	// OutcomeTimeout: the attempt timed out.
	OutcomeTimeout
	// OutcomeUnknown: the outcome cannot be established (a reset or EOF after
	// the request may have been written).
	OutcomeUnknown
)

var outcomeNames = [...]string{"", "success", "failure", "timeout", "unknown"}

func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// KeyState is the state of a request's idempotency key in the ledger.
type KeyState uint8

const (
	KeyNone      KeyState = iota // the key is unknown to the ledger, or there is no ledger
	KeyInFlight                  // another call holds the key now
	KeyCompleted                 // an earlier call under the key got a confirmed result
	KeyConflict                  // the key was used before with a different body
)

var keyStateNames = [...]string{"none", "in_flight", "completed", "conflict"}

func (k KeyState) String() string {
	if int(k) < len(keyStateNames) {
		return keyStateNames[k]
	}
	return "KeyState(" + strconv.Itoa(int(k)) + ")"
}

// Decision is the verdict of the decision core.
type Decision uint8

const (
	ReplaySafe        Decision = iota + 1 // the request may be sent (again)
	ReplayStored                          // a confirmed result exists: return it, send nothing
	ReconcileRequired                     // a write may have taken effect: never replay it
	Brake                                 // stop: send nothing more
	RejectConflict                        // the key was used with another body: send nothing
)

var decisionNames = [...]string{"", "replay_safe", "replay_stored", "reconcile_required", "brake", "reject_conflict"}

func (d Decision) String() string {
	if d > 0 && int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return "Decision(" + strconv.Itoa(int(d)) + ")"
}

// Evidence qualifies a decision: pass (the correct, safe outcome), fail (a
// known-bad condition) or unknown (the facts cannot be established).
type Evidence uint8

const (
	EvidencePass Evidence = iota + 1
	EvidenceFail
	EvidenceUnknown
)

var evidenceNames = [...]string{"", "pass", "fail", "unknown"}

func (e Evidence) String() string {
	if e > 0 && int(e) < len(evidenceNames) {
		return evidenceNames[e]
	}
	return "Evidence(" + strconv.Itoa(int(e)) + ")"
}

// Attempt is one attempt already made for an operation.
type Attempt struct {
	Outcome Outcome
	Phase   Phase
	// Cost is the attempt's weight; non-negative.
	Cost float64
}

// uncertain reports whether the attempt's outcome cannot be established.
func (a Attempt) uncertain() bool {
	switch a.Outcome {
	case OutcomeUnknown:
		return true
	case OutcomeTimeout:
		return a.Phase != PhasePreWrite
	}
	return false
}

// Request are the facts about a request the contract needs.
type Request struct {
	Method         string // case-sensitive, as on the wire
	IdempotencyKey bool   // the request carries an idempotency key
	ReplayableBody bool   // the body can be sent again byte for byte (no body counts)
	// ServerHonoursKeys (contract version 2): the server is known to honour
	// Idempotency-Key — it runs a key's request at most once and answers a
	// repeat with the stored result, or 409 while the first is in progress.
	// A repeat with the same key and body then cannot apply the effect twice.
	ServerHonoursKeys bool
}

// keyedRepeatSafe reports whether the server makes a repeat of r safe
// whatever became of the earlier attempts: it honours keys, and r carries
// its key and the same body.
func (r Request) keyedRepeatSafe() bool {
	return r.ServerHonoursKeys && r.IdempotencyKey && r.ReplayableBody
}

// Policy holds the contract's policy. Both fields must be positive;
// DefaultPolicy gives the contract's defaults.
type Policy struct {
	FailureThreshold int     // trailing failing attempts that trip the brake
	BudgetUnits      float64 // total attempt cost that trips the brake
}

// DefaultPolicy returns the contract's default policy.
func DefaultPolicy() Policy {
	return Policy{FailureThreshold: 5, BudgetUnits: 100}
}

// Input is one question to the decision core.
type Input struct {
	// Version is the contract version of the question: 1 (or zero) or 2.
	// It is echoed in the verdict; the answer depends on the facts alone.
	Version  int
	Policy   Policy
	Request  Request
	KeyState KeyState
	Attempts []Attempt // oldest first
}

// Verdict is the decision core's answer: the decision, its evidence, the
// rule that decided and a short sentence saying why.
type Verdict struct {
	Decision Decision
	Evidence Evidence
	Rule     Rule
	Reason   string
	Version  int // the contract version of the question, 1 or 2
}

// Rule names the contract rule that decided a verdict. Rules are evaluated
// in order, and the first that matches decides.
type Rule uint8

const (
	RuleConflict         Rule = iota + 1 // 1: the key was used before with another body
	RuleCompleted                        // 2: a confirmed result exists (the key's, or the last attempt's)
	RuleUncertainWrite                   // 3: a write's outcome is uncertain
	RuleInFlight                         // 4: another call holds the key
	RuleNotRepeatable                    // 5: the request may not be sent again
	RuleFailureThreshold                 // 6: the trailing failures reached the threshold
	RuleCostBudget                       // 7: the attempts' cost reached the budget
	RuleSend                             // 8: nothing forbids sending
)

// IdempotentMethod reports whether method is idempotent by RFC 9110 §9.2.2:
// GET, HEAD, OPTIONS, TRACE, PUT and DELETE. The match is case-sensitive.
func IdempotentMethod(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// Repeatable reports whether the request may be sent more than once: an
// idempotent method or an idempotency key, and a replayable body.
func (r Request) Repeatable() bool {
	return (IdempotentMethod(r.Method) || r.IdempotencyKey) && r.ReplayableBody
}

// Decide applies the contract to in. The rules are evaluated in order and
// the first that matches decides. Decide does not validate in: callers that
// take input from outside use DecodeInput, which does.
func Decide(in Input) Verdict {
	v := decide(in)
	v.Version = max(in.Version, 1)
	return v
}

func decide(in Input) Verdict {
	n := len(in.Attempts)
	var last Attempt
	if n > 0 {
		last = in.Attempts[n-1]
	}
	switch {
	case in.KeyState == KeyConflict:
		return Verdict{RejectConflict, EvidenceFail, RuleConflict, "the idempotency key was used before with a different body", 0}
	case in.KeyState == KeyCompleted:
		return Verdict{ReplayStored, EvidencePass, RuleCompleted, "an earlier call under this key got a confirmed result", 0}
	case n > 0 && last.Outcome == OutcomeSuccess:
		return Verdict{ReplayStored, EvidencePass, RuleCompleted, "the last attempt succeeded", 0}
	case n > 0 && last.uncertain() && !IdempotentMethod(in.Request.Method) && !in.Request.keyedRepeatSafe():
		return Verdict{ReconcileRequired, EvidenceUnknown, RuleUncertainWrite, "the last attempt's outcome is uncertain and the method is not idempotent", 0}
	case in.KeyState == KeyInFlight:
		return Verdict{Brake, EvidencePass, RuleInFlight, "another call holds this idempotency key now", 0}
	case n > 0 && !in.Request.Repeatable():
		return Verdict{Brake, EvidencePass, RuleNotRepeatable, "the request may not be repeated", 0}
	}
	streak, cost := 0, 0.0
	for _, a := range in.Attempts {
		if a.Outcome == OutcomeSuccess {
			streak = 0
		} else {
			streak++
		}
		cost += a.Cost
	}
	switch {
	case streak >= in.Policy.FailureThreshold:
		return Verdict{Brake, EvidenceFail, RuleFailureThreshold, "the trailing streak of failed attempts reached the failure threshold", 0}
	case cost >= in.Policy.BudgetUnits:
		return Verdict{Brake, EvidenceFail, RuleCostBudget, "the total cost of the attempts reached the budget", 0}
	}
	if n > 0 && last.uncertain() && !IdempotentMethod(in.Request.Method) {
		return Verdict{ReplaySafe, EvidencePass, RuleSend, "the server honours the idempotency key: a repeat with the same key and body cannot apply the write twice", 0}
	}
	return Verdict{ReplaySafe, EvidencePass, RuleSend, "the request may be sent", 0}
}
