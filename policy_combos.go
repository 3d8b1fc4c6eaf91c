package retryfuse

import "fmt"

// This file is the settings checked together: a setting that the others
// leave without effect is refused, naming both. policy.go checks each
// setting alone and resolves the defaults.

// checkTogether refuses a setting that the others leave without effect,
// naming both: a setting that reads as active but does nothing is a
// mistake waiting to be found in production, as a setting out of range
// is. p holds the settings resolved, defaults included.
//
// Refused, each for the reason its error gives:
//   - HedgeDelay, HedgeQuantile or HedgeMethods (not empty) without
//     MaxHedges: nothing is hedged.
//   - MaxHedges with MaxAttempts 1: a hedge counts as an attempt, and the
//     first attempt takes the only one.
//   - MaxHedges with MaxInFlight 1 (a ceiling of 1 for AdaptiveInFlight
//     too): a hedge needs a bulkhead slot beside its attempt's, and never
//     gets one.
//   - MaxHedges with a HedgeDelay at or above AttemptTimeout: every
//     attempt times out before its hedge is due (with HedgeQuantile too:
//     HedgeDelay is then both the delay before an estimate and its cap).
//   - BreakerScope without a Breaker: nothing is braked.
//   - ShareKey or MaxSharedBody without ShareReads: nothing is shared.
//   - NewBudget beside a Budget: it is never called.
//   - MaxScopes beside a Budget when nothing is kept per scope: no
//     MaxInFlight, AdaptiveInFlight, RateLimit, MaxHedges or Breaker
//     (whose closes start a scope's slow start), DisableThrottle, and a
//     negative HonourMemory (see keepsScopes).
//   - MaxStoredBody or MaxFingerprintBytes without a Ledger: only the
//     Ledger fingerprints bodies and stores results.
//   - MaxLimitWait without RateLimit, MaxQueued, AdaptiveInFlight or the
//     throttle (whose pace makes new calls wait): no attempt waits (a
//     bulkhead without a queue refuses at once);
//     MaxQueued with a negative MaxLimitWait: no attempt waits in the
//     queue.
//   - The settings of the learnt limit, the throttle and slow start
//     without the feature they shape (see checkLoad).
//   - TimeoutCost (other than 1) when no call can reach MaxCallCost: the
//     brake it weighs never stops a call.
//
// Accepted on purpose:
//   - The settings that shape retries (InitialBackoff, MaxBackoff,
//     MaxRetryAfter, MaxDrainBytes, MaxFailureStreak, MaxCallCost,
//     TimeoutCost, GenerateIdempotencyKeys, Budget, NewBudget) with
//     MaxAttempts 1, or a MaxFailureStreak of 1: that is the documented
//     way to turn retries off, often from configuration or in a test;
//     the settings stay idle in plain sight and apply again when retries
//     do. Refusing them would turn one switch into an edit of six fields.
//   - A MaxFailureStreak or MaxCallCost that a call cannot reach before
//     MaxAttempts stops it (or a MaxAttempts beyond MaxFailureStreak):
//     each is a ceiling, and the lowest binds, as the defaults do (a
//     streak of 5 and a cost of 100 beside 3 attempts).
//   - MaxHedges of MaxAttempts or more, MaxAttempts 2 or more: hedges
//     are sent while attempts remain, and the refusal of the next is
//     reported (Hooks.Policy). MaxHedges is a ceiling per attempt.
//   - TimeoutCost without AttemptTimeout: the Base's own timeouts (dial,
//     TLS handshake, response headers) cost it too.
//   - Scope, or a Reconciler, with nothing else: the Transport's memory
//     of uncertain keys is per scope, and any uncertain write asks the
//     Reconciler.
//   - GenerateIdempotencyKeys with a Ledger: the keys it generates bypass
//     the Ledger (no earlier call can hold one); the callers' keys use it.
//   - An empty, non-nil HedgeMethods: it says that no method is hedged,
//     and none is.
func (t *Transport) checkTogether(p *policy) error {
	switch {
	case t.Hedge.Delay != 0 && t.Hedge.Max == 0:
		return invalidPolicy("HedgeDelay "+t.Hedge.Delay.String(), "needs MaxHedges: without it nothing is hedged")
	case t.Hedge.Quantile != 0 && t.Hedge.Max == 0:
		return invalidPolicy(fmt.Sprint("HedgeQuantile ", t.Hedge.Quantile), "needs MaxHedges: without it nothing is hedged")
	case len(t.Hedge.Methods) > 0 && t.Hedge.Max == 0:
		return invalidPolicy("HedgeMethods", "needs MaxHedges: without it nothing is hedged")
	case t.Hedge.Max > 0 && p.maxAttempts == 1:
		return invalidPolicy(fmt.Sprint("MaxHedges ", t.Hedge.Max), "needs MaxAttempts of at least 2: a hedge counts as an attempt")
	case t.Hedge.Max > 0 && t.Load.MaxInFlight == 1:
		return invalidPolicy(fmt.Sprint("MaxHedges ", t.Hedge.Max),
			"needs a MaxInFlight of at least 2: a hedge takes a bulkhead slot beside its attempt's, and with one slot none is ever sent")
	case t.Hedge.Max > 0 && t.Retry.AttemptTimeout > 0 && t.Hedge.Delay >= t.Retry.AttemptTimeout:
		return invalidPolicy("HedgeDelay "+t.Hedge.Delay.String(),
			"must be below AttemptTimeout "+t.Retry.AttemptTimeout.String()+": an attempt times out before its hedge is due")
	case t.Reads.ShareKey != nil && !t.Reads.Share:
		return invalidPolicy("ShareKey", "needs ShareReads: without it no read is shared")
	case t.Reads.MaxSharedBody != 0 && !t.Reads.Share:
		return invalidPolicy(fmt.Sprint("MaxSharedBody ", t.Reads.MaxSharedBody), "needs ShareReads: without it no body is shared")
	case t.Brake.Route != nil && t.Brake.Breaker == nil:
		return invalidPolicy("BreakerScope", "needs a Breaker: without it nothing is braked per scope")
	case t.Retry.Budget != nil && t.Retry.NewBudget != nil:
		return invalidPolicy("NewBudget", "must be nil with a Budget: Budget is the budget of every scope, and NewBudget is never called")
	case t.Scope.Max != 0 && t.Retry.Budget != nil && !p.keepsScopes():
		return invalidPolicy(fmt.Sprint("MaxScopes ", t.Scope.Max),
			"has nothing to bound: with a Budget and DisableThrottle, without MaxInFlight, AdaptiveInFlight, RateLimit, MaxHedges or a Breaker, and with a negative HonourMemory, nothing is kept per scope")
	case t.Keys.MaxStoredBody != 0 && t.Keys.Ledger == nil:
		return invalidPolicy(fmt.Sprint("MaxStoredBody ", t.Keys.MaxStoredBody), "needs a Ledger: only a Ledger stores results")
	case t.Keys.MaxFingerprintBytes != 0 && t.Keys.Ledger == nil:
		return invalidPolicy(fmt.Sprint("MaxFingerprintBytes ", t.Keys.MaxFingerprintBytes), "needs a Ledger: only a Ledger fingerprints bodies")
	case t.Load.MaxWait != 0 && t.Load.RateLimit == 0 && t.Load.MaxQueued == 0 && !t.Load.Adaptive && t.Load.Throttle.Disable:
		return invalidPolicy("MaxLimitWait "+t.Load.MaxWait.String(),
			"needs a RateLimit, a MaxQueued, AdaptiveInFlight or the throttle (DisableThrottle is set): without them no attempt waits (a bulkhead without a queue refuses at once)")
	case t.Load.MaxQueued > 0 && t.Load.MaxWait < 0:
		return invalidPolicy(fmt.Sprint("MaxQueued ", t.Load.MaxQueued),
			"needs a MaxLimitWait that lets an attempt wait: with MaxLimitWait "+t.Load.MaxWait.String()+" none waits in the queue")
	}
	if err := t.checkLoad(); err != nil {
		return err
	}
	return t.checkTimeoutCost(p)
}

// checkLoad refuses the settings of the learnt limit, the throttle and
// slow start that the others leave without effect (see checkTogether):
// MinInFlight without AdaptiveInFlight (nothing is learnt) or above
// MaxInFlight (the floor of the learnt limit above its ceiling);
// ThrottleRatio or ThrottleWindow with DisableThrottle; SlowStart with
// neither a Breaker nor AdaptiveInFlight (nothing ramps).
func (t *Transport) checkLoad() error {
	switch {
	case t.Load.MinInFlight != 0 && !t.Load.Adaptive:
		return invalidPolicy(fmt.Sprint("MinInFlight ", t.Load.MinInFlight), "needs AdaptiveInFlight: it is the floor of the learnt limit")
	case t.Load.Adaptive && t.Load.MaxInFlight > 0 && t.Load.MinInFlight > t.Load.MaxInFlight:
		return invalidPolicy(fmt.Sprint("MinInFlight ", t.Load.MinInFlight),
			fmt.Sprint("must not be above MaxInFlight ", t.Load.MaxInFlight, ": the floor of the learnt limit would be above its ceiling"))
	case t.Load.Throttle.Disable && t.Load.Throttle.Ratio != 0:
		return invalidPolicy(fmt.Sprint("ThrottleRatio ", t.Load.Throttle.Ratio), "has no effect with DisableThrottle")
	case t.Load.Throttle.Disable && t.Load.Throttle.Window != 0:
		return invalidPolicy("ThrottleWindow "+t.Load.Throttle.Window.String(), "has no effect with DisableThrottle")
	case t.Load.SlowStart != 0 && t.Brake.Breaker == nil && !t.Load.Adaptive:
		return invalidPolicy("SlowStart "+t.Load.SlowStart.String(),
			"needs a Breaker or AdaptiveInFlight: it ramps admission up after a Breaker closes or a learnt limit rises from its floor")
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
	return invalidPolicy(fmt.Sprint("TimeoutCost ", t.Retry.TimeoutCost), fmt.Sprintf(
		"has no effect with %s: MaxCallCost is never reached, as a call's attempts cost at most %g (%s at %g) before %s stops it",
		setting("MaxCallCost", p.decision.BudgetUnits, t.Retry.MaxCallCost == 0), most, counted(attempts, "attempt"), max(1, p.timeoutCost), stoppedBy(t, p)))
}

// stoppedBy names what stops a call's attempts: MaxAttempts, or the
// failure streak when that stops them first.
func stoppedBy(t *Transport, p *policy) string {
	if p.decision.FailureThreshold <= p.maxAttempts {
		return setting("MaxFailureStreak", p.decision.FailureThreshold, t.Retry.MaxFailureStreak == 0)
	}
	return setting("MaxAttempts", p.maxAttempts, t.Retry.MaxAttempts == 0)
}

// setting names a field and its value for an error message: "MaxAttempts
// 4", or "MaxAttempts (3, its default)" when the field was left zero.
func setting(field string, v any, byDefault bool) string {
	if byDefault {
		return fmt.Sprintf("%s (%v, its default)", field, v)
	}
	return fmt.Sprintf("%s %v", field, v)
}
