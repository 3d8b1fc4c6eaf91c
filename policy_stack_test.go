package retryfuse

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The settings of the hedge, the bulkhead and the rate limiter: each
// invalid one is an error wrapping ErrInvalidPolicy that names the field,
// and a Transport holding it sends nothing.

func TestInvalidStackSettingsNameTheField(t *testing.T) {
	tests := []struct {
		name  string
		tr    *Transport
		field string
	}{
		{"negative Hedge.Max", &Transport{Hedge: HedgePolicy{Max: -1}}, "Hedge.Max"},
		{"negative Hedge.Delay", &Transport{Hedge: HedgePolicy{Delay: -time.Millisecond}}, "Hedge.Delay"},
		{"negative Hedge.Quantile", &Transport{Hedge: HedgePolicy{Quantile: -0.5}}, "Hedge.Quantile"},
		{"Hedge.Quantile of 1", &Transport{Hedge: HedgePolicy{Quantile: 1}}, "Hedge.Quantile"},
		{"Hedge.Quantile above 1", &Transport{Hedge: HedgePolicy{Quantile: 95}}, "Hedge.Quantile"},
		{"NaN Hedge.Quantile", &Transport{Hedge: HedgePolicy{Quantile: math.NaN()}}, "Hedge.Quantile"},
		{"empty Hedge.Methods token", &Transport{Hedge: HedgePolicy{Methods: []string{""}}}, "Hedge.Methods"},
		{"Hedge.Methods token with a space", &Transport{Hedge: HedgePolicy{Methods: []string{"GET POST"}}}, "Hedge.Methods"},
		{"Hedge.Methods token with a separator", &Transport{Hedge: HedgePolicy{Methods: []string{"GET,HEAD"}}}, "Hedge.Methods"},
		{"Hedge.Methods token with a control byte", &Transport{Hedge: HedgePolicy{Methods: []string{"GE\x00T"}}}, "Hedge.Methods"},
		{"Hedge.Methods token beyond ASCII", &Transport{Hedge: HedgePolicy{Methods: []string{"GÉT"}}}, "Hedge.Methods"},
		{"negative Load.MaxInFlight", &Transport{Load: LoadPolicy{MaxInFlight: -1}}, "Load.MaxInFlight"},
		{"negative Load.MaxQueued", &Transport{Load: LoadPolicy{MaxInFlight: 1, MaxQueued: -1}}, "Load.MaxQueued"},
		{"Load.MaxQueued without Load.MaxInFlight", &Transport{Load: LoadPolicy{MaxQueued: 4}}, "Load.MaxQueued"},
		{"NaN Load.RateLimit", &Transport{Load: LoadPolicy{RateLimit: math.NaN(), RateBurst: 1}}, "Load.RateLimit"},
		{"negative Load.RateLimit", &Transport{Load: LoadPolicy{RateLimit: -1, RateBurst: 1}}, "Load.RateLimit"},
		{"infinite Load.RateLimit", &Transport{Load: LoadPolicy{RateLimit: math.Inf(1), RateBurst: 1}}, "Load.RateLimit"},
		{"Load.RateBurst without Load.RateLimit", &Transport{Load: LoadPolicy{RateBurst: 10}}, "Load.RateBurst"},
		{"negative Load.RateBurst", &Transport{Load: LoadPolicy{RateLimit: 10, RateBurst: -1}}, "Load.RateBurst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := statusServer(t, http.StatusOK, "ok")
			err := tt.tr.Validate()
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("Validate: got %v, want an error wrapping ErrInvalidPolicy", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Validate: got %q, want it to name %s", err, tt.field)
			}
			if errors.Is(err, ErrDeclined) {
				t.Errorf("errors.Is(%v, ErrDeclined) = true, want false: invalid settings are not a refusal", err)
			}
			_, _, err = do(tt.tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("Do: got %v, want an error wrapping ErrInvalidPolicy", err)
			}
			if got := srv.count(); got != 0 {
				t.Errorf("requests seen by the server: got %d, want 0", got)
			}
		})
	}
}

func TestValidStackSettings(t *testing.T) {
	tests := []struct {
		name string
		tr   *Transport
	}{
		{"hedge with a delay", &Transport{Hedge: HedgePolicy{Max: 2, Delay: time.Millisecond}}},
		{"hedge with a quantile only", &Transport{Hedge: HedgePolicy{Max: 1, Quantile: 0.95}}},
		{"hedge with both", &Transport{Hedge: HedgePolicy{Max: 1, Delay: time.Millisecond, Quantile: 0.5}}},
		{"Hedge.Methods of tokens", &Transport{
			Hedge: HedgePolicy{
				Max:     1,
				Delay:   time.Millisecond,
				Methods: []string{"GET", "PUT", "POST", "PROPFIND", "x-custom!"},
			},
		}},
		{"empty, non-nil Hedge.Methods", &Transport{Hedge: HedgePolicy{Max: 1, Delay: time.Millisecond, Methods: []string{}}}},
		{"bulkhead without a queue", &Transport{Load: LoadPolicy{MaxInFlight: 1}}},
		{"bulkhead with a queue", &Transport{Load: LoadPolicy{MaxInFlight: 8, MaxQueued: 100}}},
		{"rate limit", &Transport{Load: LoadPolicy{RateLimit: 0.5, RateBurst: 1}}},
		{"no waiting", &Transport{Load: LoadPolicy{RateLimit: 5, RateBurst: 1, MaxInFlight: 1, MaxWait: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Cleanup(tt.tr.CloseIdleConnections)
			if err := tt.tr.Validate(); err != nil {
				t.Errorf("Validate: got %v, want nil", err)
			}
		})
	}
}
