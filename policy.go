package retryfuse

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/retryfuse/retryfuse/decide"
)

// This file resolves and validates a Transport's settings, once, at its
// first use. A call reads only the resolved policy (and Hooks, which are
// read live).

// The Transport's defaults, one per setting; each field's doc names it.
const (
	defaultMaxAttempts         = 3
	defaultInitialBackoff      = 100 * time.Millisecond
	defaultMaxBackoff          = 10 * time.Second
	defaultMaxRetryAfter       = 30 * time.Second
	defaultMaxFailureStreak    = 5
	defaultMaxCallCost         = 100.0
	defaultTimeoutCost         = 1.0
	defaultMaxFingerprintBytes = 1 << 20
	defaultMaxStoredBody       = 64 << 10
	defaultMaxScopes           = 1024
	defaultMaxDrainBytes       = 64 << 10
	defaultMaxLimitWait        = time.Second
	defaultSlowStart           = time.Second
	// defaultMaxDrainTime bounds how long a discarded response body is read
	// before it is closed. No field sets it.
	defaultMaxDrainTime = time.Second
)

// policy is the Transport's configuration with defaults resolved. Nothing
// in it changes after setup.
type policy struct {
	// Read by every call, first attempt included: together, so that a
	// call finds them in as few cache lines as it can.
	base           http.RoundTripper
	tracing        bool // base fires httptrace's GotConn
	generateKeys   bool
	attemptTimeout time.Duration
	decision       decide.Policy
	classifier     Classifier                 // nil means the default rules
	budget         Budget                     // shared by every scope; nil means per-scope budgets
	scope          func(*http.Request) string // nil means hostScope
	breaker        *Breaker
	breakerScope   func(*http.Request) string // nil: the breaker's scopes are scope's
	ledger         Ledger
	hedge          hedgePolicy
	maxInFlight    int  // with adaptive, the ceiling of the learnt limit, resolved
	adaptive       bool // the bulkhead's limit is learnt
	throttle       bool
	rateLimit      float64
	fallback       func(*http.Request, *http.Response, error) (*http.Response, error)
	clock          clock
	shareReads     bool

	maxAttempts    int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	maxRetryAfter  time.Duration
	timeoutCost    float64
	newBudget      func(scope string) (Budget, error) // never nil
	reconciler     Reconciler
	maxScopes      int
	redact         []string
	maxDrain       int64
	maxDrainTime   time.Duration
	maxFP          int64
	maxStored      int64
	maxQueued      int
	rateBurst      int
	maxLimitWait   time.Duration // negative: no waiting
	honoursKeys    bool          // every scope's server honours Idempotency-Key
	honourMemory   time.Duration // how long a scope's marker is remembered; 0: never learnt
	minInFlight    int           // the floor of the learnt limit
	learntWait     time.Duration // MaxLimitWait as set: zero means a learnt limit's own
	throttleRatio  float64
	throttleWindow time.Duration
	slowStart      time.Duration
	randN          func(n int64) int64        // a uniform draw from [0, n)
	shareKey       func(*http.Request) string // nil: defaultShareKey
	maxSharedBody  int64
}

// env is what a Transport takes from its surroundings.
type env struct {
	clock        clock
	randN        func(n int64) int64
	maxDrainTime time.Duration
}

// environment returns the env that t runs on: the real one. The package's
// tests replace it (export_test.go), as net/http's tests replace its
// testHook variables.
var environment = func(*Transport) env {
	return env{clock: realClock{}, randN: rand.Int64N, maxDrainTime: defaultMaxDrainTime}
}

// Validate reports the first invalid setting, as an error wrapping
// ErrInvalidPolicy; nil when the Transport is usable. It resolves the
// settings, as the first RoundTrip does: a setting changed afterwards is
// not seen (but for Hooks).
func (t *Transport) Validate() error {
	t.setup()
	return t.initErr
}

func (t *Transport) resolve() (policy, error) {
	e := environment(t)
	p := policy{
		base:           t.Base,
		maxAttempts:    orDefault(t.MaxAttempts, defaultMaxAttempts),
		initialBackoff: orDefault(t.InitialBackoff, defaultInitialBackoff),
		maxBackoff:     orDefault(t.MaxBackoff, max(defaultMaxBackoff, t.InitialBackoff)),
		attemptTimeout: t.AttemptTimeout,
		maxRetryAfter:  orDefault(t.MaxRetryAfter, defaultMaxRetryAfter),
		decision: decide.Policy{
			// A zero threshold never cuts MaxAttempts short.
			FailureThreshold: orDefault(t.MaxFailureStreak, max(defaultMaxFailureStreak, orDefault(t.MaxAttempts, defaultMaxAttempts))),
			BudgetUnits:      orDefault(t.MaxCallCost, defaultMaxCallCost),
		},
		timeoutCost:  orDefault(t.TimeoutCost, defaultTimeoutCost),
		classifier:   t.Classifier,
		generateKeys: t.GenerateIdempotencyKeys,
		budget:       t.Budget, // on the Transport's clock, below
		newBudget:    t.NewBudget,
		breaker:      t.Breaker,
		breakerScope: t.BreakerScope,
		ledger:       ledgerOn(t.Ledger, e.clock),
		reconciler:   t.Reconciler,
		scope:        t.Scope,
		maxScopes:    orDefault(t.MaxScopes, defaultMaxScopes),
		redact:       t.RedactQueryParams,
		maxDrain:     orDefault(t.MaxDrainBytes, defaultMaxDrainBytes),
		maxDrainTime: e.maxDrainTime,
		maxFP:        orDefault(t.MaxFingerprintBytes, defaultMaxFingerprintBytes),
		maxStored:    orDefault(t.MaxStoredBody, defaultMaxStoredBody),
		hedge: hedgePolicy{
			max:      t.MaxHedges,
			delay:    t.HedgeDelay,
			quantile: t.HedgeQuantile,
			methods:  slices.Clone(t.HedgeMethods),
		},
		maxInFlight:   t.MaxInFlight,
		maxQueued:     t.MaxQueued,
		rateLimit:     t.RateLimit,
		rateBurst:     t.RateBurst,
		maxLimitWait:  orDefault(t.MaxLimitWait, defaultMaxLimitWait),
		honoursKeys:   t.ServerHonoursKeys,
		honourMemory:  max(0, orDefault(t.HonourMemory, defaultHonourMemory)), // negative: never learnt
		fallback:      t.Fallback,
		shareReads:    t.ShareReads,
		shareKey:      t.ShareKey,
		maxSharedBody: orDefault(t.MaxSharedBody, defaultMaxSharedBody),
		clock:         e.clock,
		randN:         e.randN,

		adaptive:       t.AdaptiveInFlight,
		minInFlight:    t.MinInFlight,
		learntWait:     t.MaxLimitWait,
		throttle:       !t.DisableThrottle,
		throttleRatio:  orDefault(t.ThrottleRatio, defaultThrottleRatio),
		throttleWindow: orDefault(t.ThrottleWindow, defaultThrottleWindow),
		slowStart:      orDefault(t.SlowStart, defaultSlowStart),
	}
	if p.adaptive {
		p.maxInFlight = orDefault(p.maxInFlight, defaultMaxInFlightLimit)
		p.minInFlight = orDefault(p.minInFlight, min(defaultMinInFlight, p.maxInFlight))
	}
	if p.hedge.methods == nil {
		p.hedge.methods = defaultHedgeMethods
	}
	if p.budget != nil {
		p.budget = budgetOn(p.budget, p.clock)
	}
	if p.redact == nil {
		p.redact = defaultRedactedQueryParams
	}
	if p.newBudget == nil {
		p.newBudget = newDefaultBudget
	}
	switch {
	case t.MaxAttempts < 0:
		return p, invalidPolicy("MaxAttempts", "must not be negative")
	case t.InitialBackoff < 0:
		return p, invalidPolicy("InitialBackoff", "must not be negative")
	case t.MaxBackoff < 0:
		return p, invalidPolicy("MaxBackoff", "must not be negative")
	case p.maxBackoff < p.initialBackoff: // only a MaxBackoff set can be: a zero one follows InitialBackoff
		return p, invalidPolicy("MaxBackoff "+t.MaxBackoff.String(),
			"must not be below "+setting("InitialBackoff", p.initialBackoff, t.InitialBackoff == 0))
	case t.AttemptTimeout < 0:
		return p, invalidPolicy("AttemptTimeout", "must not be negative")
	case t.MaxRetryAfter < 0:
		return p, invalidPolicy("MaxRetryAfter", "must not be negative")
	case t.MaxFailureStreak < 0:
		return p, invalidPolicy("MaxFailureStreak", "must not be negative")
	case t.MaxCallCost < 0 || math.IsNaN(t.MaxCallCost) || math.IsInf(t.MaxCallCost, 0):
		return p, invalidPolicy("MaxCallCost", "must be a finite, non-negative number")
	case t.TimeoutCost < 0 || math.IsNaN(t.TimeoutCost) || math.IsInf(t.TimeoutCost, 0):
		return p, invalidPolicy("TimeoutCost", "must be a finite, non-negative number")
	case t.MaxFingerprintBytes < 0:
		return p, invalidPolicy("MaxFingerprintBytes", "must not be negative")
	case t.MaxStoredBody < 0:
		return p, invalidPolicy("MaxStoredBody", "must not be negative")
	case t.MaxScopes < 0:
		return p, invalidPolicy("MaxScopes", "must not be negative")
	case t.MaxDrainBytes < 0:
		return p, invalidPolicy("MaxDrainBytes", "must not be negative")
	case t.MaxHedges < 0:
		return p, invalidPolicy("MaxHedges", "must not be negative")
	case t.HedgeDelay < 0:
		return p, invalidPolicy("HedgeDelay", "must not be negative")
	case t.HedgeQuantile != 0 && !(t.HedgeQuantile > 0 && t.HedgeQuantile < 1):
		return p, invalidPolicy("HedgeQuantile", "must be above 0 and below 1")
	case t.MaxHedges > 0 && t.HedgeDelay == 0 && t.HedgeQuantile == 0:
		return p, invalidPolicy("HedgeDelay", "must be set with MaxHedges, unless HedgeQuantile derives it")
	case t.MaxInFlight < 0:
		return p, invalidPolicy("MaxInFlight", "must not be negative")
	case t.MaxQueued < 0:
		return p, invalidPolicy("MaxQueued", "must not be negative")
	case t.MaxQueued > 0 && t.MaxInFlight == 0 && !t.AdaptiveInFlight:
		return p, invalidPolicy("MaxQueued", "needs a MaxInFlight or AdaptiveInFlight to queue for")
	case t.RateLimit < 0 || math.IsNaN(t.RateLimit) || math.IsInf(t.RateLimit, 0):
		return p, invalidPolicy("RateLimit", "must be a finite, non-negative number")
	case t.RateBurst < 0:
		return p, invalidPolicy("RateBurst", "must not be negative")
	case t.RateLimit > 0 && t.RateBurst == 0:
		return p, invalidPolicy("RateBurst", "must be at least 1 with a RateLimit")
	case t.RateBurst > 0 && t.RateLimit == 0:
		return p, invalidPolicy("RateBurst", "needs a RateLimit")
	case t.MaxSharedBody < 0:
		return p, invalidPolicy("MaxSharedBody", "must not be negative")
	case t.MinInFlight < 0:
		return p, invalidPolicy("MinInFlight", "must not be negative")
	case math.IsNaN(t.ThrottleRatio) || math.IsInf(t.ThrottleRatio, 0) || t.ThrottleRatio != 0 && t.ThrottleRatio < 1:
		return p, invalidPolicy(fmt.Sprint("ThrottleRatio ", t.ThrottleRatio),
			"must be a finite number of at least 1: it is the attempts sent per attempt accepted, and below 1 a dependency that accepts every request would be throttled")
	case t.ThrottleWindow < 0:
		return p, invalidPolicy("ThrottleWindow "+t.ThrottleWindow.String(), "must not be negative")
	case t.ThrottleWindow > 0 && t.ThrottleWindow < throttleBuckets:
		return p, invalidPolicy("ThrottleWindow "+t.ThrottleWindow.String(), "is shorter than 20ns, the least that divides into its 20 buckets")
	case t.SlowStart < 0:
		return p, invalidPolicy("SlowStart "+t.SlowStart.String(), "must not be negative")
	}
	for _, m := range t.HedgeMethods {
		if !validMethod(m) {
			return p, invalidPolicy("HedgeMethods", "holds an invalid method "+strconv.Quote(m))
		}
	}
	if err := t.checkTogether(&p); err != nil {
		return p, err
	}
	if ml, ok := t.Ledger.(*MemoryLedger); ok {
		if err := ml.validate(); err != nil {
			return p, err
		}
	}
	if p.base == nil {
		p.base = cleanhttp.DefaultPooledTransport()
	}
	if p.base == http.RoundTripper(t) {
		p.base = nil // never sent through, nor closed: it would recurse
		return p, invalidPolicy("Base", "must not be the Transport itself")
	}
	var cycle bool
	if p.tracing, cycle = baseTraces(t, p.base); cycle {
		p.base = nil
		return p, invalidPolicy("Base", "must not lead back to the Transport itself")
	}
	return p, nil
}

// newDefaultBudget is the budget of a scope when NewBudget is nil.
func newDefaultBudget(string) (Budget, error) { return &RatioBudget{}, nil }

// orDefault returns v, or def when v is zero: the one way a setting's zero
// value means its default.
func orDefault[T int | int64 | float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

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
//   - MaxLimitWait without RateLimit, MaxQueued or AdaptiveInFlight: no
//     attempt waits (a bulkhead without a queue refuses at once);
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
	case t.HedgeDelay != 0 && t.MaxHedges == 0:
		return invalidPolicy("HedgeDelay "+t.HedgeDelay.String(), "needs MaxHedges: without it nothing is hedged")
	case t.HedgeQuantile != 0 && t.MaxHedges == 0:
		return invalidPolicy(fmt.Sprint("HedgeQuantile ", t.HedgeQuantile), "needs MaxHedges: without it nothing is hedged")
	case len(t.HedgeMethods) > 0 && t.MaxHedges == 0:
		return invalidPolicy("HedgeMethods", "needs MaxHedges: without it nothing is hedged")
	case t.MaxHedges > 0 && p.maxAttempts == 1:
		return invalidPolicy(fmt.Sprint("MaxHedges ", t.MaxHedges), "needs MaxAttempts of at least 2: a hedge counts as an attempt")
	case t.MaxHedges > 0 && t.AttemptTimeout > 0 && t.HedgeDelay >= t.AttemptTimeout:
		return invalidPolicy("HedgeDelay "+t.HedgeDelay.String(),
			"must be below AttemptTimeout "+t.AttemptTimeout.String()+": an attempt times out before its hedge is due")
	case t.ShareKey != nil && !t.ShareReads:
		return invalidPolicy("ShareKey", "needs ShareReads: without it no read is shared")
	case t.MaxSharedBody != 0 && !t.ShareReads:
		return invalidPolicy(fmt.Sprint("MaxSharedBody ", t.MaxSharedBody), "needs ShareReads: without it no body is shared")
	case t.BreakerScope != nil && t.Breaker == nil:
		return invalidPolicy("BreakerScope", "needs a Breaker: without it nothing is braked per scope")
	case t.Budget != nil && t.NewBudget != nil:
		return invalidPolicy("NewBudget", "must be nil with a Budget: Budget is the budget of every scope, and NewBudget is never called")
	case t.MaxScopes != 0 && t.Budget != nil && !p.keepsScopes():
		return invalidPolicy(fmt.Sprint("MaxScopes ", t.MaxScopes),
			"has nothing to bound: with a Budget and DisableThrottle, without MaxInFlight, AdaptiveInFlight, RateLimit, MaxHedges or a Breaker, and with a negative HonourMemory, nothing is kept per scope")
	case t.MaxStoredBody != 0 && t.Ledger == nil:
		return invalidPolicy(fmt.Sprint("MaxStoredBody ", t.MaxStoredBody), "needs a Ledger: only a Ledger stores results")
	case t.MaxFingerprintBytes != 0 && t.Ledger == nil:
		return invalidPolicy(fmt.Sprint("MaxFingerprintBytes ", t.MaxFingerprintBytes), "needs a Ledger: only a Ledger fingerprints bodies")
	case t.MaxLimitWait != 0 && t.RateLimit == 0 && t.MaxQueued == 0 && !t.AdaptiveInFlight:
		return invalidPolicy("MaxLimitWait "+t.MaxLimitWait.String(),
			"needs a RateLimit, a MaxQueued or AdaptiveInFlight: without them no attempt waits (a bulkhead without a queue refuses at once)")
	case t.MaxQueued > 0 && t.MaxLimitWait < 0:
		return invalidPolicy(fmt.Sprint("MaxQueued ", t.MaxQueued),
			"needs a MaxLimitWait that lets an attempt wait: with MaxLimitWait "+t.MaxLimitWait.String()+" none waits in the queue")
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
	case t.MinInFlight != 0 && !t.AdaptiveInFlight:
		return invalidPolicy(fmt.Sprint("MinInFlight ", t.MinInFlight), "needs AdaptiveInFlight: it is the floor of the learnt limit")
	case t.AdaptiveInFlight && t.MaxInFlight > 0 && t.MinInFlight > t.MaxInFlight:
		return invalidPolicy(fmt.Sprint("MinInFlight ", t.MinInFlight),
			fmt.Sprint("must not be above MaxInFlight ", t.MaxInFlight, ": the floor of the learnt limit would be above its ceiling"))
	case t.DisableThrottle && t.ThrottleRatio != 0:
		return invalidPolicy(fmt.Sprint("ThrottleRatio ", t.ThrottleRatio), "has no effect with DisableThrottle")
	case t.DisableThrottle && t.ThrottleWindow != 0:
		return invalidPolicy("ThrottleWindow "+t.ThrottleWindow.String(), "has no effect with DisableThrottle")
	case t.SlowStart != 0 && t.Breaker == nil && !t.AdaptiveInFlight:
		return invalidPolicy("SlowStart "+t.SlowStart.String(),
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
	if t.TimeoutCost == 0 || t.TimeoutCost == 1 {
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
	return invalidPolicy(fmt.Sprint("TimeoutCost ", t.TimeoutCost), fmt.Sprintf(
		"has no effect with %s: MaxCallCost is never reached, as a call's attempts cost at most %g (%s at %g) before %s stops it",
		setting("MaxCallCost", p.decision.BudgetUnits, t.MaxCallCost == 0), most, counted(attempts, "attempt"), max(1, p.timeoutCost), stoppedBy(t, p)))
}

// stoppedBy names what stops a call's attempts: MaxAttempts, or the
// failure streak when that stops them first.
func stoppedBy(t *Transport, p *policy) string {
	if p.decision.FailureThreshold <= p.maxAttempts {
		return setting("MaxFailureStreak", p.decision.FailureThreshold, t.MaxFailureStreak == 0)
	}
	return setting("MaxAttempts", p.maxAttempts, t.MaxAttempts == 0)
}

// setting names a field and its value for an error message: "MaxAttempts
// 4", or "MaxAttempts (3, its default)" when the field was left zero.
func setting(field string, v any, byDefault bool) string {
	if byDefault {
		return fmt.Sprintf("%s (%v, its default)", field, v)
	}
	return fmt.Sprintf("%s %v", field, v)
}
