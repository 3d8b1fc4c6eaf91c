package retryfuse

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
)

// The settings of the controls of load: the learnt limit, the throttle
// and slow start. Out of range, or left without effect, they are refused
// by Validate (and every RoundTrip, which sends nothing), naming the
// fields.

func TestInvalidLoadSettings(t *testing.T) {
	brk, err := breaker.New(breaker.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		tr     *Transport
		fields []string
	}{
		{"negative Load.MinInFlight", &Transport{Load: LoadPolicy{Adaptive: true, MinInFlight: -1}}, []string{"Load.MinInFlight"}},
		{"Load.MinInFlight above Load.MaxInFlight: the floor above the ceiling",
			&Transport{Load: LoadPolicy{Adaptive: true, MinInFlight: 10, MaxInFlight: 5}}, []string{"Load.MinInFlight 10", "Load.MaxInFlight 5", "floor", "ceiling"}},
		{"Load.MaxQueued without Load.MaxInFlight or Load.Adaptive", &Transport{Load: LoadPolicy{MaxQueued: 4}}, []string{"Load.MaxQueued", "Load.Adaptive"}},
		{"Load.Throttle.Ratio below 1", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: 0.5}}}, []string{"Load.Throttle.Ratio 0.5", "at least 1"}},
		{"negative Load.Throttle.Ratio", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: -2}}}, []string{"Load.Throttle.Ratio -2"}},
		{"NaN Load.Throttle.Ratio", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: math.NaN()}}}, []string{"Load.Throttle.Ratio NaN"}},
		{"infinite Load.Throttle.Ratio", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: math.Inf(1)}}}, []string{"Load.Throttle.Ratio +Inf"}},
		{"negative Load.Throttle.Window", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Window: -time.Second}}}, []string{"Load.Throttle.Window -1s"}},
		{"a Load.Throttle.Window too short to divide", &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Window: 19}}}, []string{"Load.Throttle.Window 19ns"}},
		{"negative Load.SlowStart", &Transport{Brake: BrakePolicy{Breaker: brk}, Load: LoadPolicy{SlowStart: -time.Second}}, []string{"Load.SlowStart -1s"}},
		{"Load.SlowStart without a breaker.Breaker or Load.Adaptive", &Transport{Load: LoadPolicy{SlowStart: time.Second}}, []string{"Load.SlowStart 1s", "Brake", "Load.Adaptive"}},
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
	brk, err := breaker.New(breaker.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	for name, tr := range map[string]*Transport{
		"Load.Adaptive alone":                                {Load: LoadPolicy{Adaptive: true}},
		"Load.Adaptive within bounds":                        {Load: LoadPolicy{Adaptive: true, MinInFlight: 4, MaxInFlight: 64}},
		"a floor at the ceiling: a fixed limit":              {Load: LoadPolicy{Adaptive: true, MinInFlight: 8, MaxInFlight: 8}},
		"Load.Adaptive with a queue and a wait":              {Load: LoadPolicy{Adaptive: true, MaxQueued: 16, MaxWait: 50 * time.Millisecond}},
		"Load.Adaptive with a Load.MaxWait":                  {Load: LoadPolicy{Adaptive: true, MaxWait: 10 * time.Millisecond}},
		"a Load.Throttle.Ratio of 1 and a window":            {Load: LoadPolicy{Throttle: ThrottlePolicy{Ratio: 1, Window: 20}}},
		"Load.Throttle.Disable":                              {Load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true}}},
		"Load.SlowStart with a breaker.Breaker":              {Brake: BrakePolicy{Breaker: brk}, Load: LoadPolicy{SlowStart: 5 * time.Second}},
		"Load.SlowStart with Load.Adaptive":                  {Load: LoadPolicy{Adaptive: true, SlowStart: time.Millisecond}},
		"Load.MaxInFlight 1 with Load.Adaptive: the floor 1": {Load: LoadPolicy{Adaptive: true, MaxInFlight: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			tr.Base = newLoadBase()
			if err := tr.Validate(); err != nil {
				t.Fatalf("Validate: got %v, want nil", err)
			}
		})
	}
}
