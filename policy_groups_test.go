package retryfuse

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/internal/bulkhead"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A policy group's zero fields mean its defaults once any of its fields is
// set, so that a setting beside its neighbours always means something:
// these pin what each such combination resolves to.
func TestPolicyGroupFieldAloneTurnsItsPolicyOn(t *testing.T) {
	resolved := func(t *testing.T, tr *Transport) policy {
		t.Helper()
		require.NoError(t, tr.Validate())
		return tr.p
	}
	t.Run("the zero HedgePolicy hedges nothing", func(t *testing.T) {
		assert.Zero(t, resolved(t, &Transport{}).hedge.max)
	})
	t.Run("a Hedge.Delay alone sends one hedge after it", func(t *testing.T) {
		h := resolved(t, &Transport{Hedge: HedgePolicy{Delay: 10 * time.Millisecond}}).hedge
		assert.Equal(t, hedgePolicy{max: 1, delay: 10 * time.Millisecond, methods: defaultHedgeMethods}, h)
	})
	t.Run("a Hedge.Quantile alone sends one hedge at the learnt delay", func(t *testing.T) {
		h := resolved(t, &Transport{Hedge: HedgePolicy{Quantile: 0.9}}).hedge
		assert.Equal(t, hedgePolicy{max: 1, quantile: 0.9, methods: defaultHedgeMethods}, h)
	})
	t.Run("a Hedge.Max alone learns its delay at the 95th percentile", func(t *testing.T) {
		h := resolved(t, &Transport{Hedge: HedgePolicy{Max: 2}}).hedge
		assert.Equal(t, hedgePolicy{max: 2, quantile: 0.95, methods: defaultHedgeMethods}, h)
	})
	t.Run("Hedge.Methods alone hedges those methods", func(t *testing.T) {
		h := resolved(t, &Transport{Hedge: HedgePolicy{Methods: []string{http.MethodPut}}}).hedge
		assert.Equal(t, hedgePolicy{max: 1, quantile: 0.95, methods: []string{http.MethodPut}}, h)
	})
	t.Run("an empty, non-nil Hedge.Methods hedges no method", func(t *testing.T) {
		h := resolved(t, &Transport{Hedge: HedgePolicy{Methods: []string{}}}).hedge
		assert.Empty(t, h.methods)
	})
	t.Run("a Hedge with Retry.MaxAttempts 1 is still refused: a hedge is an attempt", func(t *testing.T) {
		err := (&Transport{Retry: RetryPolicy{MaxAttempts: 1}, Hedge: HedgePolicy{Delay: time.Millisecond}}).Validate()
		assert.ErrorIs(t, err, ErrInvalidPolicy)
		assert.ErrorContains(t, err, "Hedge.Max 1 needs Retry.MaxAttempts")
	})
	t.Run("a Reads.ShareKey or Reads.MaxSharedBody alone shares reads", func(t *testing.T) {
		assert.False(t, resolved(t, &Transport{}).shareReads)
		assert.True(t, resolved(t, &Transport{Reads: ReadPolicy{ShareKey: func(*http.Request) string { return "k" }}}).shareReads)
		p := resolved(t, &Transport{Reads: ReadPolicy{MaxSharedBody: 1}})
		assert.True(t, p.shareReads)
		assert.EqualValues(t, 1, p.maxSharedBody)
	})
	t.Run("a Load.MinInFlight alone learns the in-flight limit", func(t *testing.T) {
		p := resolved(t, &Transport{Load: LoadPolicy{MinInFlight: 4}})
		assert.True(t, p.adaptive)
		assert.Equal(t, 4, p.minInFlight)
		assert.Equal(t, bulkhead.DefaultCeiling, p.maxInFlight)
	})
	t.Run("a Load.MaxQueued beside a Load.MinInFlight queues for the learnt limit", func(t *testing.T) {
		assert.Equal(t, 8, resolved(t, &Transport{Load: LoadPolicy{MinInFlight: 2, MaxQueued: 8}}).maxQueued)
	})
	t.Run("a Load.RateLimit alone has a burst of 1", func(t *testing.T) {
		p := resolved(t, &Transport{Load: LoadPolicy{RateLimit: 10}})
		assert.Equal(t, 1, p.rateBurst)
		assert.Equal(t, 3, resolved(t, &Transport{Load: LoadPolicy{RateLimit: 10, RateBurst: 3}}).rateBurst)
	})
	t.Run("Load.Throttle settings beside Disable stay idle", func(t *testing.T) {
		p := resolved(t, &Transport{Load: LoadPolicy{Throttle: ThrottlePolicy{Disable: true, Ratio: 3, Window: time.Second}}})
		assert.False(t, p.throttle)
		assert.False(t, p.pace)
	})
	t.Run("the zero LoadPolicy: no throttle, no pace, no slow start", func(t *testing.T) {
		p := resolved(t, &Transport{})
		assert.False(t, p.throttle)
		assert.False(t, p.pace)
		assert.Zero(t, p.slowStart)
	})
	t.Run("a Load.Throttle.Ratio or Window alone turns the throttle on, not the pace", func(t *testing.T) {
		for _, th := range []ThrottlePolicy{{On: true}, {Ratio: 3}, {Window: time.Second}} {
			p := resolved(t, &Transport{Load: LoadPolicy{Throttle: th}})
			assert.True(t, p.throttle, "%+v", th)
			assert.False(t, p.pace, "%+v", th)
		}
	})
	t.Run("Load.Pace alone turns the pace on, not the throttle", func(t *testing.T) {
		p := resolved(t, &Transport{Load: LoadPolicy{Pace: true}})
		assert.True(t, p.pace)
		assert.False(t, p.throttle)
	})
}

// A BrakePolicy with a Route and no Breaker brakes with a Breaker of the
// default settings, its own: five failures in a row open the route.
func TestBrakeRouteAloneBrakesWithADefaultBreaker(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	var opened []string
	tr := &Transport{
		Base:  srv.Client().Transport,
		Retry: RetryPolicy{MaxAttempts: 1},
		Brake: BrakePolicy{Route: byPath},
		Hooks: Hooks{BreakerChange: func(i breaker.Change) {
			if i.To == breaker.Open {
				opened = append(opened, i.Scope)
			}
		}},
	}
	require.NoError(t, tr.Validate())
	require.NotNil(t, tr.p.breaker)
	client := &http.Client{Transport: tr}
	for range 5 {
		resp, err := client.Get(srv.URL + "/a")
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.Equal(t, []string{srv.URL + " /a"}, opened)
	_, err := client.Get(srv.URL + "/a")
	assert.ErrorIs(t, err, ErrCircuitOpen)
	resp, err := client.Get(srv.URL + "/b")
	require.NoError(t, err, "another route is braked apart")
	resp.Body.Close()
}
