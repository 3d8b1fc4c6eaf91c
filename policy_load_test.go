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
		{"negative MinInFlight", &Transport{AdaptiveInFlight: true, MinInFlight: -1}, []string{"MinInFlight"}},
		{"MinInFlight above MaxInFlight: the floor above the ceiling",
			&Transport{AdaptiveInFlight: true, MinInFlight: 10, MaxInFlight: 5}, []string{"MinInFlight 10", "MaxInFlight 5", "floor", "ceiling"}},
		{"MinInFlight without AdaptiveInFlight", &Transport{MinInFlight: 4}, []string{"MinInFlight 4", "AdaptiveInFlight"}},
		{"MaxQueued without MaxInFlight or AdaptiveInFlight", &Transport{MaxQueued: 4}, []string{"MaxQueued", "AdaptiveInFlight"}},
		{"ThrottleRatio below 1", &Transport{ThrottleRatio: 0.5}, []string{"ThrottleRatio 0.5", "at least 1"}},
		{"negative ThrottleRatio", &Transport{ThrottleRatio: -2}, []string{"ThrottleRatio -2"}},
		{"NaN ThrottleRatio", &Transport{ThrottleRatio: math.NaN()}, []string{"ThrottleRatio NaN"}},
		{"infinite ThrottleRatio", &Transport{ThrottleRatio: math.Inf(1)}, []string{"ThrottleRatio +Inf"}},
		{"negative ThrottleWindow", &Transport{ThrottleWindow: -time.Second}, []string{"ThrottleWindow -1s"}},
		{"a ThrottleWindow too short to divide", &Transport{ThrottleWindow: 19}, []string{"ThrottleWindow 19ns"}},
		{"ThrottleRatio with DisableThrottle", &Transport{DisableThrottle: true, ThrottleRatio: 2}, []string{"ThrottleRatio 2", "DisableThrottle"}},
		{"ThrottleWindow with DisableThrottle", &Transport{DisableThrottle: true, ThrottleWindow: time.Second}, []string{"ThrottleWindow 1s", "DisableThrottle"}},
		{"negative SlowStart", &Transport{Breaker: breaker, SlowStart: -time.Second}, []string{"SlowStart -1s"}},
		{"SlowStart without a Breaker or AdaptiveInFlight", &Transport{SlowStart: time.Second}, []string{"SlowStart 1s", "Breaker", "AdaptiveInFlight"}},
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
		"AdaptiveInFlight alone":                           {AdaptiveInFlight: true},
		"AdaptiveInFlight within bounds":                   {AdaptiveInFlight: true, MinInFlight: 4, MaxInFlight: 64},
		"a floor at the ceiling: a fixed limit":            {AdaptiveInFlight: true, MinInFlight: 8, MaxInFlight: 8},
		"AdaptiveInFlight with a queue and a wait":         {AdaptiveInFlight: true, MaxQueued: 16, MaxLimitWait: 50 * time.Millisecond},
		"AdaptiveInFlight with a MaxLimitWait":             {AdaptiveInFlight: true, MaxLimitWait: 10 * time.Millisecond},
		"a ThrottleRatio of 1 and a window":                {ThrottleRatio: 1, ThrottleWindow: 20},
		"DisableThrottle":                                  {DisableThrottle: true},
		"SlowStart with a Breaker":                         {Breaker: breaker, SlowStart: 5 * time.Second},
		"SlowStart with AdaptiveInFlight":                  {AdaptiveInFlight: true, SlowStart: time.Millisecond},
		"MaxInFlight 1 with AdaptiveInFlight: the floor 1": {AdaptiveInFlight: true, MaxInFlight: 1},
	} {
		t.Run(name, func(t *testing.T) {
			tr.Base = newLoadBase()
			if err := tr.Validate(); err != nil {
				t.Fatalf("Validate: got %v, want nil", err)
			}
		})
	}
}
