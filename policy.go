package retryfuse

import (
	"math"
	"net/http"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse/decide"
)

// This file resolves and validates a Transport's settings, once, at its
// first use.

// policy is the Transport's configuration with defaults resolved.
type policy struct {
	base           http.RoundTripper
	tracing        bool
	maxAttempts    int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	maxRetryAfter  time.Duration
	decision       decide.Policy
	timeoutCost    float64
	redact         []string
	maxDrain       int64
	maxFP          int64
	maxStored      int64
}

// Validate reports the first invalid setting, as an error wrapping
// ErrInvalidPolicy; nil when the Transport is usable.
func (t *Transport) Validate() error {
	t.setup()
	return t.initErr
}

func (t *Transport) setup() {
	t.once.Do(func() { t.p, t.initErr = t.resolve() })
}

func (t *Transport) resolve() (policy, error) {
	p := policy{
		base:           t.Base,
		maxAttempts:    orDefault(t.MaxAttempts, defaultMaxAttempts),
		initialBackoff: orDefault(t.InitialBackoff, defaultInitialBackoff),
		maxBackoff:     orDefault(t.MaxBackoff, max(defaultMaxBackoff, t.InitialBackoff)),
		attemptTimeout: t.AttemptTimeout,
		maxRetryAfter:  orDefault(t.MaxRetryAfter, defaultMaxRetryAfter),
		decision: decide.Policy{
			FailureThreshold: orDefault(t.FailureThreshold, 5),
			BudgetUnits:      orDefault(t.BudgetUnits, 100),
		},
		timeoutCost: orDefault(t.TimeoutCost, 1),
		redact:      t.RedactQueryParams,
		maxDrain:    orDefault(t.MaxDrainBytes, defaultMaxDrainBytes),
		maxFP:       orDefault(t.MaxFingerprintBytes, defaultMaxFingerprintBytes),
		maxStored:   orDefault(t.MaxStoredBody, defaultMaxStoredBody),
	}
	if p.redact == nil {
		p.redact = defaultRedactedQueryParams
	}
	switch {
	case t.MaxAttempts < 0:
		return p, invalidPolicy("MaxAttempts", "must not be negative")
	case t.InitialBackoff < 0:
		return p, invalidPolicy("InitialBackoff", "must not be negative")
	case t.MaxBackoff < 0:
		return p, invalidPolicy("MaxBackoff", "must not be negative")
	case p.maxBackoff < p.initialBackoff:
		return p, invalidPolicy("MaxBackoff", "must not be below InitialBackoff")
	case t.AttemptTimeout < 0:
		return p, invalidPolicy("AttemptTimeout", "must not be negative")
	case t.MaxRetryAfter < 0:
		return p, invalidPolicy("MaxRetryAfter", "must not be negative")
	case t.FailureThreshold < 0:
		return p, invalidPolicy("FailureThreshold", "must not be negative")
	case t.BudgetUnits < 0 || math.IsNaN(t.BudgetUnits) || math.IsInf(t.BudgetUnits, 0):
		return p, invalidPolicy("BudgetUnits", "must be a finite, non-negative number")
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
	}
	if p.base == nil {
		p.base = cleanhttp.DefaultPooledTransport()
	}
	if p.base == http.RoundTripper(t) {
		return p, invalidPolicy("Base", "must not be the Transport itself")
	}
	var cycle bool
	if p.tracing, cycle = baseTraces(t, p.base); cycle {
		return p, invalidPolicy("Base", "must not lead back to the Transport itself")
	}
	t.budgets.max = orDefault(t.MaxScopes, defaultMaxScopes)
	return p, nil
}

func orDefault[T int | int64 | float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
