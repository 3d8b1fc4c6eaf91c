package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
)

// Settings checked together: one that the others leave without effect is
// refused, naming both fields and saying why; one that the others only
// bound, or that stays idle beside the switch that turns its feature off,
// is accepted, and does what it says. policy_combos.go's checkTogether gives the
// reasoning of each.

func TestSettingsLeftWithoutEffectAreRefused(t *testing.T) {
	newBudget := func(string) (budget.Budget, error) { return &budget.Ratio{}, nil }
	tests := []struct {
		name   string
		tr     *Transport
		fields []string // named by the error
	}{
		{"Hedge.Max with Retry.MaxAttempts 1: the hedge would be a second attempt",
			&Transport{Retry: RetryPolicy{MaxAttempts: 1}, Hedge: HedgePolicy{Max: 1, Delay: 10 * time.Millisecond}}, []string{"Hedge.Max 1", "Retry.MaxAttempts"}},
		{"Hedge.Max with Load.MaxInFlight 1: a hedge never gets a slot beside its attempt's",
			&Transport{Hedge: HedgePolicy{Max: 1, Delay: 10 * time.Millisecond}, Load: LoadPolicy{MaxInFlight: 1}}, []string{"Hedge.Max 1", "Load.MaxInFlight"}},
		{"Hedge.Max with Load.Adaptive under a ceiling of 1: the learnt limit never passes 1",
			&Transport{Hedge: HedgePolicy{Max: 2, Delay: 10 * time.Millisecond}, Load: LoadPolicy{MaxInFlight: 1, Adaptive: true}}, []string{"Hedge.Max 2", "Load.MaxInFlight"}},
		{"Hedge.Delay at Retry.AttemptTimeout: the attempt times out as its hedge is due",
			&Transport{Hedge: HedgePolicy{Max: 1, Delay: time.Second}, Retry: RetryPolicy{AttemptTimeout: time.Second}}, []string{"Hedge.Delay 1s", "Retry.AttemptTimeout 1s"}},
		{"Hedge.Delay beyond Retry.AttemptTimeout with Hedge.Quantile: before an estimate, and as its cap, the delay outlasts the attempt",
			&Transport{Hedge: HedgePolicy{Max: 1, Delay: 2 * time.Second, Quantile: 0.9}, Retry: RetryPolicy{AttemptTimeout: time.Second}}, []string{"Hedge.Delay 2s", "Retry.AttemptTimeout 1s"}},
		{"Budget and Retry.NewBudget: Retry.NewBudget is never called",
			&Transport{Retry: RetryPolicy{Budget: budget.Unlimited(), NewBudget: newBudget}}, []string{"Retry.NewBudget", "Budget"}},
		{"Scope.Max beside a budget.Budget, with nothing kept per scope: nothing to bound",
			&Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}, Keys: KeyPolicy{HonourMemory: -1}, Scope: ScopePolicy{Max: 64}}, []string{"Scope.Max 64", "Budget", "the throttle or the pace", "Keys.HonourMemory"}},
		{"Keys.MaxStoredBody without a Ledger: nothing stores results",
			&Transport{Keys: KeyPolicy{MaxStoredBody: 1 << 20}}, []string{"Keys.MaxStoredBody 1048576", "Ledger"}},
		{"Keys.MaxFingerprintBytes without a Ledger: nothing fingerprints bodies",
			&Transport{Keys: KeyPolicy{MaxFingerprintBytes: 4 << 20}}, []string{"Keys.MaxFingerprintBytes 4194304", "Ledger"}},
		{"Load.MaxWait without a limiter or a bulkhead: nothing waits",
			&Transport{Load: LoadPolicy{MaxWait: 2 * time.Second}}, []string{"Load.MaxWait 2s", "Load.RateLimit", "Load.MaxQueued", "Load.Pace"}},
		{"Load.MaxWait beside the throttle alone: the throttle refuses, it never waits",
			&Transport{Load: LoadPolicy{MaxWait: 2 * time.Second, Throttle: ThrottlePolicy{On: true}}}, []string{"Load.MaxWait 2s", "Load.Pace"}},
		{"Load.Throttle.Disable beside Load.Throttle.On: a contradiction",
			&Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{On: true, Disable: true}}}, []string{"Load.Throttle.Disable", "Load.Throttle.On"}},
		{"Load.Throttle.Disable beside Load.Pace: a contradiction",
			&Transport{Load: LoadPolicy{Pace: true, Throttle: ThrottlePolicy{Disable: true}}}, []string{"Load.Throttle.Disable", "Load.Pace"}},
		{"Load.MaxWait beside a bulkhead without a queue: a full bulkhead refuses at once",
			&Transport{Load: LoadPolicy{MaxInFlight: 4, MaxWait: 2 * time.Second, Throttle: ThrottlePolicy{Disable: true}}}, []string{"Load.MaxWait 2s", "Load.MaxQueued"}},
		{"negative Load.MaxWait without a limiter or a queue: there is no wait to forbid",
			&Transport{Load: LoadPolicy{MaxWait: -1, Throttle: ThrottlePolicy{Disable: true}}}, []string{"Load.MaxWait -1ns", "Load.RateLimit"}},
		{"Load.MaxQueued with a negative Load.MaxWait: no attempt waits in the queue",
			&Transport{Load: LoadPolicy{MaxInFlight: 1, MaxQueued: 4, MaxWait: -1}}, []string{"Load.MaxQueued 4", "Load.MaxWait -1ns"}},
		{"Retry.TimeoutCost beside the default Retry.MaxCallCost: 3 attempts never cost 100",
			&Transport{Retry: RetryPolicy{TimeoutCost: 2}}, []string{"Retry.TimeoutCost 2", "Retry.MaxCallCost (100, its default)", "Retry.MaxAttempts (3, its default)"}},
		{"Retry.TimeoutCost beside a Retry.MaxCallCost the attempts cannot reach",
			&Transport{Retry: RetryPolicy{MaxAttempts: 4, MaxCallCost: 10, TimeoutCost: 2}}, []string{"Retry.TimeoutCost 2", "Retry.MaxCallCost 10", "Retry.MaxAttempts 4"}},
		{"Retry.TimeoutCost when Retry.MaxFailureStreak stops the call before the cost brake is asked",
			&Transport{Retry: RetryPolicy{MaxAttempts: 5, MaxFailureStreak: 2, MaxCallCost: 6, TimeoutCost: 3}}, []string{"Retry.TimeoutCost 3", "Retry.MaxCallCost 6", "Retry.MaxFailureStreak 2"}},
		{"a cheaper Retry.TimeoutCost beside a Retry.MaxCallCost no call reaches",
			&Transport{Retry: RetryPolicy{MaxAttempts: 4, MaxCallCost: 5, TimeoutCost: 0.5}}, []string{"Retry.TimeoutCost 0.5", "Retry.MaxCallCost 5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent atomic.Int32
			tt.tr.Base = roundTripFunc(func(*http.Request) (*http.Response, error) {
				sent.Add(1)
				return nil, errors.New("sent")
			})
			err := tt.tr.Validate()
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("Validate: got %v, want an error wrapping ErrInvalidPolicy", err)
			}
			if errors.Is(err, ErrDeclined) {
				t.Errorf("errors.Is(%v, ErrDeclined) = true, want false: invalid settings are not a refusal", err)
			}
			for _, f := range tt.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("Validate: got %q, want it to name %q", err, f)
				}
			}
			if why := strings.TrimPrefix(err.Error(), ErrInvalidPolicy.Error()+": "); !strings.Contains(why, ": ") {
				t.Errorf("Validate: got %q, want the reason after a colon", err)
			}
			_, err = tt.tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("RoundTrip: got %v, want an error wrapping ErrInvalidPolicy", err)
			}
			if n := sent.Load(); n != 0 {
				t.Errorf("attempts sent: got %d, want 0", n)
			}
		})
	}
}

// failingBase counts the attempts it is sent, and answers each with a
// 503, or with a timeout of its own (as a dial or TLS handshake timeout
// of the Base is).
type failingBase struct {
	sent    atomic.Int32
	timeout bool
}

func (b *failingBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.sent.Add(1)
	if b.timeout {
		return nil, timeoutErr{}
	}
	return always503().RoundTrip(req)
}

func TestSettingsAcceptedTogetherDoWhatTheySay(t *testing.T) {
	ledger, err := newMemoryLedger(&ledger.Memory{})
	if err != nil {
		t.Fatal(err)
	}
	brk, err := breaker.New(breaker.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	reconciler := func(context.Context, *ReconcileRequiredError) (*http.Response, bool, error) { return nil, false, nil }
	type call struct {
		sent   int32
		sleeps int
		reason error // the GiveUp reason, nil when none is given
	}
	tests := []struct {
		name string
		tr   *Transport
		base *failingBase
		want *call // nil: Validate only, the effect is pinned where the feature is tested
	}{
		{"the retry settings beside Retry.MaxAttempts 1 stay idle: one attempt, no wait",
			&Transport{
				Retry: RetryPolicy{
					MaxAttempts:      1,
					InitialBackoff:   time.Second,
					MaxBackoff:       time.Minute,
					MaxRetryAfter:    time.Minute,
					MaxDrainBytes:    1,
					MaxFailureStreak: 3,
					MaxCallCost:      10,
					TimeoutCost:      5,
				},
				Keys: KeyPolicy{
					Generate: true,
				},
			},
			&failingBase{}, &call{sent: 1, sleeps: 0, reason: ErrAttemptsExhausted}},
		{"Retry.TimeoutCost beside Retry.MaxFailureStreak 1: one attempt, the streak stops the call",
			&Transport{Retry: RetryPolicy{MaxFailureStreak: 1, TimeoutCost: 5}},
			&failingBase{}, &call{sent: 1, reason: ErrFailureStreak}},
		{"Retry.MaxFailureStreak above Retry.MaxAttempts is a ceiling: Retry.MaxAttempts stops the call",
			&Transport{Retry: RetryPolicy{MaxAttempts: 2, MaxFailureStreak: 10}},
			&failingBase{}, &call{sent: 2, sleeps: 1, reason: ErrAttemptsExhausted}},
		{"Retry.MaxCallCost above what the attempts cost is a ceiling: Retry.MaxAttempts stops the call",
			&Transport{Retry: RetryPolicy{MaxAttempts: 2, MaxCallCost: 50}},
			&failingBase{}, &call{sent: 2, sleeps: 1, reason: ErrAttemptsExhausted}},
		{"Retry.TimeoutCost without Retry.AttemptTimeout: the Base's own timeouts cost it",
			&Transport{Retry: RetryPolicy{MaxAttempts: 5, MaxCallCost: 4, TimeoutCost: 2}},
			&failingBase{timeout: true}, &call{sent: 2, sleeps: 1, reason: ErrCallCost}},
		{"Retry.TimeoutCost of 1 beside the default Retry.MaxCallCost: it is the default", &Transport{Retry: RetryPolicy{TimeoutCost: 1}}, nil, nil},
		{"Hedge.Max of Retry.MaxAttempts: the hedges the attempts allow are sent",
			&Transport{Retry: RetryPolicy{MaxAttempts: 2}, Hedge: HedgePolicy{Max: 3, Delay: time.Millisecond}}, nil, nil},
		{"Hedge.Max with Load.MaxInFlight 2: a hedge may take the second slot",
			&Transport{Hedge: HedgePolicy{Max: 1, Delay: 10 * time.Millisecond}, Load: LoadPolicy{MaxInFlight: 2}}, nil, nil},
		{"Hedge.Delay below Retry.AttemptTimeout",
			&Transport{Hedge: HedgePolicy{Max: 1, Delay: 10 * time.Millisecond}, Retry: RetryPolicy{AttemptTimeout: time.Second}}, nil, nil},
		{"an empty, non-nil Hedge.Methods without Hedge.Max: none hedged, as it says",
			&Transport{Hedge: HedgePolicy{Methods: []string{}}}, nil, nil},
		{"Scope.Max beside a budget.Budget bounds the limits kept per scope",
			&Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}, Scope: ScopePolicy{Max: 8}, Load: LoadPolicy{MaxInFlight: 4}}, nil, nil},
		{"Scope.Max beside a budget.Budget bounds the throttles kept per scope",
			&Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}, Load: LoadPolicy{Throttle: ThrottlePolicy{On: true}}, Keys: KeyPolicy{HonourMemory: -1}, Scope: ScopePolicy{Max: 8}}, nil, nil},
		{"Scope.Max beside a budget.Budget bounds the paces kept per scope",
			&Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}, Load: LoadPolicy{Pace: true}, Keys: KeyPolicy{HonourMemory: -1}, Scope: ScopePolicy{Max: 8}}, nil, nil},
		{"Scope.Max beside a budget.Budget bounds the records that learn whether a server honours keys",
			&Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}, Load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true}}, Scope: ScopePolicy{Max: 8}}, nil, nil},
		{"Scope.Max beside a budget.Budget and a breaker.Breaker bounds the records of the breaker's scopes (their names, their slow starts)",
			&Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}, Brake: BrakePolicy{Breaker: brk}, Load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true}}, Keys: KeyPolicy{HonourMemory: -1}, Scope: ScopePolicy{Max: 8}}, nil, nil},
		{"Load.MaxWait with a Load.RateLimit", &Transport{Load: LoadPolicy{RateLimit: 5, RateBurst: 1, MaxWait: time.Second}}, nil, nil},
		{"Load.MaxWait with a queue", &Transport{Load: LoadPolicy{MaxInFlight: 4, MaxQueued: 8, MaxWait: time.Second}}, nil, nil},
		{"Keys.MaxStoredBody and Keys.MaxFingerprintBytes with a Ledger",
			&Transport{Keys: KeyPolicy{Ledger: ledger, MaxStoredBody: 1 << 20, MaxFingerprintBytes: 4 << 20}}, nil, nil},
		{"GenerateIdempotencyKeys with a Ledger: the callers' keys use it",
			&Transport{Keys: KeyPolicy{Ledger: ledger, Generate: true}}, nil, nil},
		{"a Scope alone: the memory of uncertain keys is per scope",
			&Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}, Scope: ScopePolicy{Of: func(*http.Request) string { return "dep" }}}, nil, nil},
		{"a Reconciler alone: any uncertain write asks it", &Transport{Keys: KeyPolicy{Reconciler: reconciler}}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			var gu giveUpLog
			if tt.base != nil {
				tt.tr.Base = tt.base
			}
			tt.tr.Hooks.GiveUp = gu.hook
			tr := newTransport(t, clk, tt.tr)
			if err := tr.Validate(); err != nil {
				t.Fatalf("Validate: got %v, want nil", err)
			}
			if tt.want == nil {
				return
			}
			resp, err := tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if err == nil {
				_ = resp.Body.Close()
			}
			if got := tt.base.sent.Load(); got != tt.want.sent {
				t.Errorf("attempts sent: got %d, want %d", got, tt.want.sent)
			}
			if got := len(clk.Sleeps()); got != tt.want.sleeps {
				t.Errorf("waits: got %d (%v), want %d", got, clk.Sleeps(), tt.want.sleeps)
			}
			gu.mu.Lock()
			defer gu.mu.Unlock()
			if len(gu.reasons) != 1 || !errors.Is(gu.reasons[0], tt.want.reason) {
				t.Errorf("GiveUp reasons: got %v, want [%v]", gu.reasons, tt.want.reason)
			}
		})
	}
}

// MaxLimitWait bounds the wait for the pace and for slow start: beside
// either it has an effect, and is accepted.
func TestMaxLimitWaitAcceptedBesideThePaceAndSlowStart(t *testing.T) {
	brk, err := breaker.New(breaker.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{-1, 2 * time.Second} {
		if err := (&Transport{Load: LoadPolicy{MaxWait: d, Pace: true}}).Validate(); err != nil {
			t.Errorf("Load.MaxWait %v beside Load.Pace: %v, want accepted", d, err)
		}
		if err := (&Transport{Brake: BrakePolicy{Breaker: brk}, Load: LoadPolicy{MaxWait: d, SlowStart: time.Second}}).Validate(); err != nil {
			t.Errorf("Load.MaxWait %v beside Load.SlowStart: %v, want accepted", d, err)
		}
	}
}

// Validate reports the first problem it finds, in one order: a setting
// alone, then each policy's own settings together (the retry's, the
// keys', the load's), then the settings across policies.
func TestValidateReportsProblemsInTheOrderOfItsChecks(t *testing.T) {
	noBudget := func(string) (budget.Budget, error) { return budget.Unlimited(), nil }
	tests := []struct {
		name string
		tr   *Transport
		want string
	}{
		{"a setting alone before a policy's own combination",
			&Transport{Load: LoadPolicy{RateLimit: -1, MaxQueued: 5}}, "Load.RateLimit"},
		{"a policy's own combination before one across policies",
			&Transport{Retry: RetryPolicy{MaxAttempts: 1, Budget: budget.Unlimited(), NewBudget: noBudget}, Hedge: HedgePolicy{Max: 1}}, "Retry.NewBudget"},
		{"the retry's own before the keys'",
			&Transport{Retry: RetryPolicy{Budget: budget.Unlimited(), NewBudget: noBudget}, Keys: KeyPolicy{MaxStoredBody: 10}}, "Retry.NewBudget"},
		{"the keys' own before the load's",
			&Transport{Keys: KeyPolicy{MaxStoredBody: 10}, Load: LoadPolicy{RateBurst: 2}}, "Keys.MaxStoredBody"},
		{"the load's own before one across policies",
			&Transport{Load: LoadPolicy{MaxInFlight: 1, RateBurst: 2}, Hedge: HedgePolicy{Max: 1}}, "Load.RateBurst"},
	}
	for _, tt := range tests {
		err := tt.tr.Validate()
		if !errors.Is(err, ErrInvalidPolicy) || !strings.HasPrefix(strings.TrimPrefix(err.Error(), ErrInvalidPolicy.Error()+": "), tt.want) {
			t.Errorf("%s: Validate() = %v, want an invalid policy naming %s first", tt.name, err, tt.want)
		}
	}
}
