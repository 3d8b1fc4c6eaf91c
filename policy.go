package retryfuse

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/bulkhead"
	"github.com/retryfuse/retryfuse/internal/fingerprint"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/internal/redact"
	"github.com/retryfuse/retryfuse/internal/share"
	"github.com/retryfuse/retryfuse/internal/throttle"
	"github.com/retryfuse/retryfuse/ledger"
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
	defaultHedgeQuantile       = 0.95
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
	budget         budget.Budget              // shared by every scope; nil means per-scope budgets
	scope          func(*http.Request) string // nil means hostScope
	breaker        *breaker.Breaker
	breakerScope   func(*http.Request) string // nil: the breaker's scopes are scope's
	ledger         ledger.Ledger
	hedge          hedgePolicy
	maxInFlight    int  // with adaptive, the ceiling of the learnt limit, resolved
	adaptive       bool // the bulkhead's limit is learnt
	throttle       bool // the throttle of new calls (Load.Throttle)
	pace           bool // the pace learnt from 429s (Load.Pace)
	rateLimit      float64
	fallback       func(*http.Request, *http.Response, error) (*http.Response, error)
	clock          clock
	shareReads     bool

	maxAttempts    int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	maxRetryAfter  time.Duration
	timeoutCost    float64
	newBudget      func(scope string) (budget.Budget, error) // never nil
	reconciler     Reconciler
	maxScopes      int
	redact         []string
	maxDrain       int64
	maxDrainTime   time.Duration
	maxFP          int64
	creds          *fingerprint.Credentials // with a ledger, the credentials bound into its fingerprints
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
	shareKey       func(*http.Request) string // nil: share.KeyOf's default key
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
		maxAttempts:    orDefault(t.Retry.MaxAttempts, defaultMaxAttempts),
		initialBackoff: orDefault(t.Retry.InitialBackoff, defaultInitialBackoff),
		maxBackoff:     orDefault(t.Retry.MaxBackoff, max(defaultMaxBackoff, t.Retry.InitialBackoff)),
		attemptTimeout: t.Retry.AttemptTimeout,
		maxRetryAfter:  orDefault(t.Retry.MaxRetryAfter, defaultMaxRetryAfter),
		decision: decide.Policy{
			// A zero threshold never cuts MaxAttempts short.
			FailureThreshold: orDefault(t.Retry.MaxFailureStreak, max(defaultMaxFailureStreak, orDefault(t.Retry.MaxAttempts, defaultMaxAttempts))),
			BudgetUnits:      orDefault(t.Retry.MaxCallCost, defaultMaxCallCost),
		},
		timeoutCost:   orDefault(t.Retry.TimeoutCost, defaultTimeoutCost),
		classifier:    t.Retry.Classifier,
		generateKeys:  t.Keys.Generate,
		budget:        t.Retry.Budget, // on the Transport's clock, below
		newBudget:     t.Retry.NewBudget,
		breaker:       t.Brake.breaker(),
		breakerScope:  t.Brake.Route,
		ledger:        ledgerOn(t.Keys.Ledger, e.clock),
		reconciler:    t.Keys.Reconciler,
		scope:         t.Scope.Of,
		maxScopes:     orDefault(t.Scope.Max, defaultMaxScopes),
		redact:        t.RedactQueryParams,
		maxDrain:      orDefault(t.Retry.MaxDrainBytes, defaultMaxDrainBytes),
		maxDrainTime:  e.maxDrainTime,
		maxFP:         orDefault(t.Keys.MaxFingerprintBytes, defaultMaxFingerprintBytes),
		maxStored:     orDefault(t.Keys.MaxStoredBody, defaultMaxStoredBody),
		hedge:         t.Hedge.resolve(),
		maxInFlight:   t.Load.MaxInFlight,
		maxQueued:     t.Load.MaxQueued,
		rateLimit:     t.Load.RateLimit,
		rateBurst:     t.Load.rateBurst(),
		maxLimitWait:  orDefault(t.Load.MaxWait, defaultMaxLimitWait),
		honoursKeys:   t.Keys.ServerHonours,
		honourMemory:  max(0, orDefault(t.Keys.HonourMemory, honour.DefaultMemory)), // negative: never learnt
		fallback:      t.Fallback,
		shareReads:    t.Reads.on(),
		shareKey:      t.Reads.ShareKey,
		maxSharedBody: orDefault(t.Reads.MaxSharedBody, share.DefaultMaxBody),
		clock:         e.clock,
		randN:         e.randN,

		adaptive:       t.Load.Adaptive || t.Load.MinInFlight > 0,
		minInFlight:    t.Load.MinInFlight,
		learntWait:     t.Load.MaxWait,
		throttle:       t.Load.Throttle.on() && !t.Load.Throttle.Disable,
		pace:           t.Load.Pace && !t.Load.Throttle.Disable,
		throttleRatio:  orDefault(t.Load.Throttle.Ratio, throttle.DefaultRatio),
		throttleWindow: orDefault(t.Load.Throttle.Window, throttle.DefaultWindow),
		slowStart:      t.Load.SlowStart, // zero: none
	}
	if p.adaptive {
		p.maxInFlight = orDefault(p.maxInFlight, bulkhead.DefaultCeiling)
		p.minInFlight = orDefault(p.minInFlight, min(bulkhead.DefaultFloor, p.maxInFlight))
	}
	if p.budget != nil {
		p.budget = budgetOn(p.budget, p.clock)
	}
	if p.redact == nil {
		p.redact = redact.DefaultQueryParams()
	}
	if p.newBudget == nil {
		p.newBudget = newDefaultBudget
	}
	if err := t.checkCollaborators(); err != nil {
		return p, err
	}
	switch {
	case t.Retry.MaxAttempts < 0:
		return p, invalidPolicy("Retry.MaxAttempts", "must not be negative")
	case t.Retry.InitialBackoff < 0:
		return p, invalidPolicy("Retry.InitialBackoff", "must not be negative")
	case t.Retry.MaxBackoff < 0:
		return p, invalidPolicy("Retry.MaxBackoff", "must not be negative")
	case p.maxBackoff < p.initialBackoff: // only a MaxBackoff set can be: a zero one follows InitialBackoff
		return p, invalidPolicy("Retry.MaxBackoff "+t.Retry.MaxBackoff.String(),
			"must not be below "+setting("Retry.InitialBackoff", p.initialBackoff, t.Retry.InitialBackoff == 0))
	case t.Retry.AttemptTimeout < 0:
		return p, invalidPolicy("Retry.AttemptTimeout", "must not be negative")
	case t.Retry.MaxRetryAfter < 0:
		return p, invalidPolicy("Retry.MaxRetryAfter", "must not be negative")
	case t.Retry.MaxFailureStreak < 0:
		return p, invalidPolicy("Retry.MaxFailureStreak", "must not be negative")
	case t.Retry.MaxCallCost < 0 || math.IsNaN(t.Retry.MaxCallCost) || math.IsInf(t.Retry.MaxCallCost, 0):
		return p, invalidPolicy("Retry.MaxCallCost", "must be a finite, non-negative number")
	case t.Retry.TimeoutCost < 0 || math.IsNaN(t.Retry.TimeoutCost) || math.IsInf(t.Retry.TimeoutCost, 0):
		return p, invalidPolicy("Retry.TimeoutCost", "must be a finite, non-negative number")
	case t.Keys.MaxFingerprintBytes < 0:
		return p, invalidPolicy("Keys.MaxFingerprintBytes", "must not be negative")
	case t.Keys.MaxStoredBody < 0:
		return p, invalidPolicy("Keys.MaxStoredBody", "must not be negative")
	case t.Scope.Max < 0:
		return p, invalidPolicy("Scope.Max", "must not be negative")
	case t.Retry.MaxDrainBytes < 0:
		return p, invalidPolicy("Retry.MaxDrainBytes", "must not be negative")
	case t.Hedge.Max < 0:
		return p, invalidPolicy("Hedge.Max", "must not be negative")
	case t.Hedge.Delay < 0:
		return p, invalidPolicy("Hedge.Delay", "must not be negative")
	case t.Hedge.Quantile != 0 && !(t.Hedge.Quantile > 0 && t.Hedge.Quantile < 1):
		return p, invalidPolicy("Hedge.Quantile", "must be above 0 and below 1")
	case t.Load.MaxInFlight < 0:
		return p, invalidPolicy("Load.MaxInFlight", "must not be negative")
	case t.Load.MaxQueued < 0:
		return p, invalidPolicy("Load.MaxQueued", "must not be negative")
	case t.Load.RateLimit < 0 || math.IsNaN(t.Load.RateLimit) || math.IsInf(t.Load.RateLimit, 0):
		return p, invalidPolicy("Load.RateLimit", "must be a finite, non-negative number")
	case t.Load.RateBurst < 0:
		return p, invalidPolicy("Load.RateBurst", "must not be negative")
	case t.Reads.MaxSharedBody < 0:
		return p, invalidPolicy("Reads.MaxSharedBody", "must not be negative")
	case t.Load.MinInFlight < 0:
		return p, invalidPolicy("Load.MinInFlight", "must not be negative")
	case math.IsNaN(t.Load.Throttle.Ratio) || math.IsInf(t.Load.Throttle.Ratio, 0) || t.Load.Throttle.Ratio != 0 && t.Load.Throttle.Ratio < 1:
		return p, invalidPolicy(fmt.Sprint("Load.Throttle.Ratio ", t.Load.Throttle.Ratio),
			"must be a finite number of at least 1: it is the attempts sent per attempt accepted, and below 1 a dependency that accepts every request would be throttled")
	case t.Load.Throttle.Window < 0:
		return p, invalidPolicy("Load.Throttle.Window "+t.Load.Throttle.Window.String(), "must not be negative")
	case t.Load.Throttle.Window > 0 && t.Load.Throttle.Window < throttle.Buckets:
		return p, invalidPolicy("Load.Throttle.Window "+t.Load.Throttle.Window.String(), "is shorter than 20ns, the least that divides into its 20 buckets")
	case t.Load.SlowStart < 0:
		return p, invalidPolicy("Load.SlowStart "+t.Load.SlowStart.String(), "must not be negative")
	}
	for _, m := range t.Hedge.Methods {
		if !validMethod(m) {
			return p, invalidPolicy("Hedge.Methods", "holds an invalid method "+strconv.Quote(m))
		}
	}
	if err := t.checkTogether(&p); err != nil {
		return p, err
	}
	if ml, ok := t.Keys.Ledger.(*ledger.Memory); ok {
		if err := ml.Validate(); err != nil {
			return p, err
		}
	}
	if t.Keys.Ledger != nil {
		var err error
		if p.creds, err = t.Keys.Credentials.binding("Keys.Credentials"); err != nil {
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

// checkCollaborators refuses a typed nil in an interface field: a nil
// pointer (or func) that is not the nil interface, which would panic at
// its first use. The nil interface means the field's default.
func (t *Transport) checkCollaborators() error {
	for _, f := range [...]struct {
		name string
		v    any
	}{
		{"Base", t.Base},
		{"Retry.Budget", t.Retry.Budget},
		{"Keys.Ledger", t.Keys.Ledger},
	} {
		if typedNil(f.v) {
			return invalidPolicy(f.name, fmt.Sprintf("is a nil %T: leave the field nil for its default, or set a usable one", f.v))
		}
	}
	return nil
}

// typedNil reports whether v, not nil itself, holds a nil pointer or func.
func typedNil(v any) bool {
	if v == nil {
		return false
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func:
		return rv.IsNil()
	}
	return false
}

// resolve returns the hedging h sets. A HedgePolicy with any field set
// hedges: Max zero means one hedge, and without a Delay or a Quantile the
// delay is learnt at defaultHedgeQuantile. The zero HedgePolicy hedges
// nothing.
func (h HedgePolicy) resolve() hedgePolicy {
	if h.Max == 0 && h.Delay == 0 && h.Quantile == 0 && h.Methods == nil {
		return hedgePolicy{}
	}
	r := hedgePolicy{max: orDefault(h.Max, 1), delay: h.Delay, quantile: h.Quantile, methods: slices.Clone(h.Methods)}
	if r.delay == 0 && r.quantile == 0 {
		r.quantile = defaultHedgeQuantile
	}
	if r.methods == nil {
		r.methods = defaultHedgeMethods
	}
	return r
}

// on reports whether r shares reads: a ReadPolicy with any field set does.
func (r ReadPolicy) on() bool { return r.Share || r.ShareKey != nil || r.MaxSharedBody != 0 }

// rateBurst is the burst of l's rate limit: RateBurst, or 1 when it is
// left zero beside a RateLimit.
func (l LoadPolicy) rateBurst() int {
	if l.RateLimit > 0 {
		return orDefault(l.RateBurst, 1)
	}
	return l.RateBurst
}

// breaker is the Breaker that b brakes with: Breaker, or one of the
// default breaker.Settings of the Transport's own when only Route is set.
func (b BrakePolicy) breaker() *breaker.Breaker {
	if b.Breaker == nil && b.Route != nil {
		return &breaker.Breaker{}
	}
	return b.Breaker
}

// newDefaultBudget is the budget of a scope when NewBudget is nil.
func newDefaultBudget(string) (budget.Budget, error) { return &budget.Ratio{}, nil }

// orDefault returns v, or def when v is zero: the one way a setting's zero
// value means its default.
func orDefault[T int | int64 | float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
