package retryfuse

import "fmt"

// This file is the settings checked together: a setting that the others
// leave without effect is refused, naming both; within one policy first,
// then across policies. policy.go checks each setting alone and resolves
// the defaults.

// checkTogether refuses a setting that the others leave without effect,
// naming both: a setting that reads as active but does nothing is a
// mistake waiting to be found in production, as a setting out of range
// is. p holds the settings resolved, defaults included. Each policy's own
// settings are checked together first (its check method), then the few
// that span two policies (checkAcross).
//
// Most settings that shape another are its neighbours in one policy, and
// there the group's own defaults give every combination a meaning: a
// HedgePolicy with any field set hedges (Max zero is one hedge); a
// ReadPolicy with any field set shares reads; a BrakePolicy with a Route
// and no Breaker brakes with a Breaker of the default settings; a
// MinInFlight learns the in-flight limit; a RateLimit without a RateBurst
// has a burst of 1. Within a policy, what is still refused is a setting
// its neighbours leave idle or contradict:
//   - Retry.NewBudget beside a Retry.Budget: it is never called.
//   - Retry.TimeoutCost (other than 1) when no call can reach
//     Retry.MaxCallCost: the brake it weighs never stops a call.
//   - Keys.MaxStoredBody, Keys.MaxFingerprintBytes or Keys.Credentials
//     without a Keys.Ledger: only the Ledger fingerprints bodies, binds
//     credentials and stores results.
//   - Load.MaxQueued without a bulkhead (Load.MaxInFlight or a learnt
//     limit) to queue for; Load.RateBurst without a Load.RateLimit.
//   - Load.MaxWait without a rate limit, a queue, a learnt limit, slow
//     start or the pace: no attempt waits (a bulkhead without a queue
//     refuses at once); Load.MaxQueued with a
//     negative Load.MaxWait: no attempt waits in the queue; the floor of
//     the learnt limit above its ceiling.
//
// Across policies (checkAcross), what no group can settle:
//   - Hedge with Retry.MaxAttempts 1: a hedge counts as an attempt, and the
//     first attempt takes the only one.
//   - Hedge with Load.MaxInFlight 1 (a ceiling of 1 for a learnt limit
//     too): a hedge needs a bulkhead slot beside its attempt's, and never
//     gets one.
//   - Hedge.Delay at or above Retry.AttemptTimeout: every attempt times
//     out before its hedge is due (with Hedge.Quantile too: Delay is then
//     both the delay before an estimate and its cap).
//   - Scope.Max beside a Retry.Budget when nothing is kept per scope: no
//     in-flight limit, rate limit, hedging or breaker, no throttle or
//     pace, and a negative
//     Keys.HonourMemory (see keepsScopes).
//   - Load.SlowStart with neither a Brake nor a learnt limit: nothing
//     ramps.
//
// Accepted on purpose:
//   - The settings that shape retries (InitialBackoff, MaxBackoff,
//     MaxRetryAfter, MaxDrainBytes, MaxFailureStreak, MaxCallCost,
//     TimeoutCost, Budget, NewBudget; Keys.Generate) with
//     Retry.MaxAttempts 1, or a MaxFailureStreak of 1: that is the
//     documented way to turn retries off, often from configuration or in
//     a test; the settings stay idle in plain sight and apply again when
//     retries do. Refusing them would turn one switch into an edit of six
//     fields. Load.Throttle.Ratio and Window beside the deprecated
//     Load.Throttle.Disable are let be for the same reason (Disable
//     beside Load.Throttle.On or Load.Pace is refused: they contradict).
//   - A MaxFailureStreak or MaxCallCost that a call cannot reach before
//     MaxAttempts stops it (or a MaxAttempts beyond MaxFailureStreak):
//     each is a ceiling, and the lowest binds, as the defaults do (a
//     streak of 5 and a cost of 100 beside 3 attempts).
//   - Hedge.Max of Retry.MaxAttempts or more, MaxAttempts 2 or more:
//     hedges are sent while attempts remain, and the refusal of the next
//     is reported (Hooks.Policy). Hedge.Max is a ceiling per attempt.
//   - Retry.TimeoutCost without Retry.AttemptTimeout: the Base's own
//     timeouts (dial, TLS handshake, response headers) cost it too.
//   - Scope, or a Keys.Reconciler, with nothing else: the Transport's
//     memory of uncertain keys is per scope, and any uncertain write asks
//     the Reconciler.
//   - Keys.Generate with a Keys.Ledger: the keys it generates bypass the
//     Ledger (no earlier call can hold one); the callers' keys use it.
//   - An empty, non-nil Hedge.Methods: it says that no method is hedged,
//     and none is.
func (t *Transport) checkTogether(p *policy) error {
	if err := t.Retry.check(t, p); err != nil {
		return err
	}
	if err := t.Keys.check(); err != nil {
		return err
	}
	if err := t.Load.check(p); err != nil {
		return err
	}
	return t.checkAcross(p)
}

// check refuses the settings of r that its neighbours leave idle (see
// checkTogether).
func (r RetryPolicy) check(t *Transport, p *policy) error {
	if r.Budget != nil && r.NewBudget != nil {
		return invalidPolicy("Retry.NewBudget", "must be nil with a Retry.Budget: budget.Budget is the budget of every scope, and NewBudget is never called")
	}
	return t.checkTimeoutCost(p)
}

// check refuses the bounds of k that only its Ledger uses, without one.
func (k KeyPolicy) check() error {
	switch {
	case k.MaxStoredBody != 0 && k.Ledger == nil:
		return invalidPolicy(fmt.Sprint("Keys.MaxStoredBody ", k.MaxStoredBody), "needs a Keys.Ledger: only a Ledger stores results")
	case k.MaxFingerprintBytes != 0 && k.Ledger == nil:
		return invalidPolicy(fmt.Sprint("Keys.MaxFingerprintBytes ", k.MaxFingerprintBytes), "needs a Keys.Ledger: only a Ledger fingerprints bodies")
	case k.Credentials.set() && k.Ledger == nil:
		return invalidPolicy("Keys.Credentials", "needs a Keys.Ledger: only a Ledger binds credentials into the fingerprints it keeps")
	}
	return nil
}

// check refuses the settings of l that its neighbours leave idle or
// contradict (see checkTogether).
func (l LoadPolicy) check(p *policy) error {
	switch {
	case l.MaxQueued > 0 && l.MaxInFlight == 0 && !p.adaptive:
		return invalidPolicy("Load.MaxQueued", "needs a Load.MaxInFlight or Load.Adaptive to queue for")
	case l.RateBurst > 0 && l.RateLimit == 0:
		return invalidPolicy("Load.RateBurst", "needs a Load.RateLimit")
	case l.Throttle.Disable && l.Throttle.On:
		return invalidPolicy("Load.Throttle.Disable", "contradicts Load.Throttle.On: the throttle is off unless On is set")
	case l.Throttle.Disable && l.Pace:
		return invalidPolicy("Load.Throttle.Disable", "contradicts Load.Pace: the pace is off unless Pace is set")
	case l.MaxWait != 0 && l.RateLimit == 0 && l.MaxQueued == 0 && !p.adaptive && !p.pace && l.SlowStart == 0:
		return invalidPolicy("Load.MaxWait "+l.MaxWait.String(),
			"needs a Load.RateLimit, a Load.MaxQueued, a learnt limit, Load.SlowStart or Load.Pace: without them no attempt waits (a bulkhead without a queue refuses at once)")
	case l.MaxQueued > 0 && l.MaxWait < 0:
		return invalidPolicy(fmt.Sprint("Load.MaxQueued ", l.MaxQueued),
			"needs a Load.MaxWait that lets an attempt wait: with Load.MaxWait "+l.MaxWait.String()+" none waits in the queue")
	case p.adaptive && l.MaxInFlight > 0 && l.MinInFlight > l.MaxInFlight:
		return invalidPolicy(fmt.Sprint("Load.MinInFlight ", l.MinInFlight),
			fmt.Sprint("must not be above Load.MaxInFlight ", l.MaxInFlight, ": the floor of the learnt limit would be above its ceiling"))
	}
	return nil
}

// checkAcross refuses a setting of one policy that a setting of another
// leaves without effect (see checkTogether).
func (t *Transport) checkAcross(p *policy) error {
	hedges := p.hedge.max > 0
	switch {
	case hedges && p.maxAttempts == 1:
		return invalidPolicy(fmt.Sprint("Hedge.Max ", p.hedge.max), "needs Retry.MaxAttempts of at least 2: a hedge counts as an attempt")
	case hedges && t.Load.MaxInFlight == 1:
		return invalidPolicy(fmt.Sprint("Hedge.Max ", p.hedge.max),
			"needs a Load.MaxInFlight of at least 2: a hedge takes a bulkhead slot beside its attempt's, and with one slot none is ever sent")
	case hedges && t.Retry.AttemptTimeout > 0 && t.Hedge.Delay >= t.Retry.AttemptTimeout:
		return invalidPolicy("Hedge.Delay "+t.Hedge.Delay.String(),
			"must be below Retry.AttemptTimeout "+t.Retry.AttemptTimeout.String()+": an attempt times out before its hedge is due")
	case t.Scope.Max != 0 && t.Retry.Budget != nil && !p.keepsScopes():
		return invalidPolicy(fmt.Sprint("Scope.Max ", t.Scope.Max),
			"has nothing to bound: with a Retry.Budget, without an in-flight limit, a rate limit, hedging, a breaker, the throttle or the pace, and with a negative Keys.HonourMemory, nothing is kept per scope")
	case t.Load.SlowStart != 0 && p.breaker == nil && !p.adaptive:
		return invalidPolicy("Load.SlowStart "+t.Load.SlowStart.String(),
			"needs a Brake or a learnt limit (Load.Adaptive): it ramps admission up after a breaker closes or a learnt limit rises from its floor")
	}
	return nil
}

// checkTimeoutCost refuses a TimeoutCost that cannot change when a call
// stops: when even attempts that all time out cost less than MaxCallCost
// by the last attempt at which the cost brake may stop the call. The
// failure streak is asked first, and every attempt of a call but its
// last has failed (a success ends it): the cost brake decides only
// after attempts the streak has not stopped, at most MaxFailureStreak-1.
// A call of one attempt has no retry to brake, and is let be (see
// checkTogether).
func (t *Transport) checkTimeoutCost(p *policy) error {
	if t.Retry.TimeoutCost == 0 || t.Retry.TimeoutCost == 1 {
		return nil
	}
	streak := p.decision.FailureThreshold
	if min(p.maxAttempts, streak) <= 1 {
		return nil
	}
	attempts := min(p.maxAttempts, streak-1)
	most := float64(attempts) * max(1, p.timeoutCost)
	if p.decision.BudgetUnits <= most {
		return nil
	}
	return invalidPolicy(fmt.Sprint("Retry.TimeoutCost ", t.Retry.TimeoutCost), fmt.Sprintf(
		"has no effect with %s: Retry.MaxCallCost is never reached, as a call's attempts cost at most %g (%s at %g) before %s stops it",
		setting("Retry.MaxCallCost", p.decision.BudgetUnits, t.Retry.MaxCallCost == 0), most, counted(attempts, "attempt"), max(1, p.timeoutCost), stoppedBy(t, p)))
}

// stoppedBy names what stops a call's attempts: MaxAttempts, or the
// failure streak when that stops them first.
func stoppedBy(t *Transport, p *policy) string {
	if p.decision.FailureThreshold <= p.maxAttempts {
		return setting("Retry.MaxFailureStreak", p.decision.FailureThreshold, t.Retry.MaxFailureStreak == 0)
	}
	return setting("Retry.MaxAttempts", p.maxAttempts, t.Retry.MaxAttempts == 0)
}

// setting names a field and its value for an error message: "Retry.MaxAttempts
// 4", or "Retry.MaxAttempts (3, its default)" when the field was left zero.
func setting(field string, v any, byDefault bool) string {
	if byDefault {
		return fmt.Sprintf("%s (%v, its default)", field, v)
	}
	return fmt.Sprintf("%s %v", field, v)
}
