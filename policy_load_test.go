package retryfuse

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The settings of the controls of load: the learnt limit, the throttle
// and slow start. Out of range, or left without effect, they are refused
// by Validate (and every RoundTrip, which sends nothing), naming the
// fields.

func TestInvalidLoadSettings(t *testing.T) {
	breaker, err := NewBreaker(BreakerSettings{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		tr     *Transport
		fields []string
	}{
		{"negative MinInFlight", &Transport{Load: LoadPolicy{Adaptive: true, MinInFlight: -1}}, []string{"MinInFlight"}},
		{"MinInFlight above MaxInFlight: the floor above the ceiling",
			&Transport{Load: LoadPolicy{Adaptive: true, MinInFlight: 10, MaxInFlight: 5}}, []string{"MinInFlight 10", "MaxInFlight 5", "floor", "ceiling"}},
		{"MinInFlight without AdaptiveInFlight", &Transport{Load: LoadPolicy{MinInFlight: 4}}, []string{"MinInFlight 4", "AdaptiveInFlight"}},
		{"MaxQueued without MaxInFlight or AdaptiveInFlight", &Transport{Load: LoadPolicy{MaxQueued: 4}}, []string{"MaxQueued", "AdaptiveInFlight"}},
		{"ThrottleRatio below 1", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: 0.5}}}, []string{"ThrottleRatio 0.5", "at least 1"}},
		{"negative ThrottleRatio", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: -2}}}, []string{"ThrottleRatio -2"}},
		{"NaN ThrottleRatio", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: math.NaN()}}}, []string{"ThrottleRatio NaN"}},
		{"infinite ThrottleRatio", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: math.Inf(1)}}}, []string{"ThrottleRatio +Inf"}},
		{"negative ThrottleWindow", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Window: -time.Second}}}, []string{"ThrottleWindow -1s"}},
		{"a ThrottleWindow too short to divide", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Window: 19}}}, []string{"ThrottleWindow 19ns"}},
		{"ThrottleRatio with DisableThrottle", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true, Ratio: 2}}}, []string{"ThrottleRatio 2", "DisableThrottle"}},
		{"ThrottleWindow with DisableThrottle", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true, Window: time.Second}}}, []string{"ThrottleWindow 1s", "DisableThrottle"}},
		{"negative SlowStart", &Transport{Brake: BrakePolicy{Breaker: breaker}, Load: LoadPolicy{SlowStart: -time.Second}}, []string{"SlowStart -1s"}},
		{"SlowStart without a Breaker or AdaptiveInFlight", &Transport{Load: LoadPolicy{SlowStart: time.Second}}, []string{"SlowStart 1s", "Breaker", "AdaptiveInFlight"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := newLoadBase()
			tt.tr.Base = base
			err := tt.tr.Validate()
			if !errors.Is(err, ErrInvalidPolicy) || errors.Is(err, ErrDeclined) {
				t.Fatalf("Validate: got %v, want an error wrapping ErrInvalidPolicy, and not ErrDeclined", err)
			}
			for _, f := range tt.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("Validate: got %q, want it to name %q", err, f)
				}
			}
			if _, _, err := do(tt.tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")); !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("RoundTrip: got %v, want an error wrapping ErrInvalidPolicy", err)
			}
			if n := base.sent.Load(); n != 0 {
				t.Errorf("requests sent: got %d, want 0", n)
			}
		})
	}
}

func TestValidLoadSettings(t *testing.T) {
	breaker, err := NewBreaker(BreakerSettings{})
	if err != nil {
		t.Fatal(err)
	}
	for name, tr := range map[string]*Transport{
		"AdaptiveInFlight alone":                           {Load: LoadPolicy{Adaptive: true}},
		"AdaptiveInFlight within bounds":                   {Load: LoadPolicy{Adaptive: true, MinInFlight: 4, MaxInFlight: 64}},
		"a floor at the ceiling: a fixed limit":            {Load: LoadPolicy{Adaptive: true, MinInFlight: 8, MaxInFlight: 8}},
		"AdaptiveInFlight with a queue and a wait":         {Load: LoadPolicy{Adaptive: true, MaxQueued: 16, MaxWait: 50 * time.Millisecond}},
		"AdaptiveInFlight with a MaxLimitWait":             {Load: LoadPolicy{Adaptive: true, MaxWait: 10 * time.Millisecond}},
		"a ThrottleRatio of 1 and a window":                {Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: 1, Window: 20}}},
		"DisableThrottle":                                  {Load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true}}},
		"SlowStart with a Breaker":                         {Brake: BrakePolicy{Breaker: breaker}, Load: LoadPolicy{SlowStart: 5 * time.Second}},
		"SlowStart with AdaptiveInFlight":                  {Load: LoadPolicy{Adaptive: true, SlowStart: time.Millisecond}},
		"MaxInFlight 1 with AdaptiveInFlight: the floor 1": {Load: LoadPolicy{Adaptive: true, MaxInFlight: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			tr.Base = newLoadBase()
			if err := tr.Validate(); err != nil {
				t.Fatalf("Validate: got %v, want nil", err)
			}
		})
	}
}
