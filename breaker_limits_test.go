package retryfuse

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBreakerConcurrentHalfOpenCallersGetMaxProbes(t *testing.T) {
	const callers, maxProbes = 64, 3
	b, c := newTestBreaker(t, BreakerSettings{FailureThreshold: 1, OpenTimeout: time.Second, MaxProbes: maxProbes})
	tk, _, _ := b.allow("api", c.Now())
	tk.done(observeFailure, errors.New("503"), c.Now())
	c.Advance(time.Second)

	var tickets, refused, halfOpened atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-start
			_, tr, err := b.allow("api", c.Now())
			if tr.To == BreakerHalfOpen {
				halfOpened.Add(1)
			}
			switch {
			case err == nil:
				tickets.Add(1)
			case errors.Is(err, ErrCircuitOpen):
				refused.Add(1)
			default:
				t.Errorf("allow: unexpected error %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := tickets.Load(); got != maxProbes {
		t.Errorf("%d concurrent callers, half-open: %d got a ticket, want %d", callers, got, maxProbes)
	}
	if got := refused.Load(); got != callers-maxProbes {
		t.Errorf("refused %d, want %d", got, callers-maxProbes)
	}
	if got := halfOpened.Load(); got != 1 {
		t.Errorf("open>half_open reported %d times, want 1", got)
	}
}

func remembered(b *Breaker) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	for name := range b.scopes {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func TestBreakerMaxScopes(t *testing.T) {
	b, clk := newTestBreaker(t, BreakerSettings{FailureThreshold: 1, MaxScopes: 3})
	busy, _, _ := b.allow("busy", clk.Now()) // least recently used, but a request is in flight
	tk, _, _ := b.allow("idle", clk.Now())
	tk.done(observeSuccess, nil, clk.Now())
	tk, _, _ = b.allow("down", clk.Now())
	tk.done(observeFailure, errors.New("503"), clk.Now())

	inFlight, _, _ := b.allow("new", clk.Now())
	if got, want := remembered(b), []string{"busy", "down", "new"}; !slices.Equal(got, want) {
		t.Fatalf("a 4th scope evicts the closed idle one: remembered %v, want %v", got, want)
	}
	if tr := busy.done(observeFailure, errors.New("503"), clk.Now()); tr.To != BreakerOpen {
		t.Fatalf("ticket of a scope kept: transition to %v, want open", tr.To)
	}

	tk, _, _ = b.allow("x", clk.Now()) // evicts "new", the only closed scope, in flight or not
	if got, want := remembered(b), []string{"busy", "down", "x"}; !slices.Equal(got, want) {
		t.Fatalf("remembered %v, want %v", got, want)
	}
	tk.done(observeFailure, errors.New("503"), clk.Now())
	if tr := inFlight.done(observeFailure, errors.New("503"), clk.Now()); tr.To != 0 {
		t.Fatalf("ticket of an evicted scope: transition to %v, want none", tr.To)
	}

	// Every remembered scope is open: a new one passes, unremembered.
	for range 3 {
		tk, tr, err := b.allow("y", clk.Now())
		if err != nil || tr.To != 0 {
			t.Fatalf("scope beyond the bound: transition to %v, error %v; want a ticket", tr.To, err)
		}
		if tr := tk.done(observeFailure, errors.New("503"), clk.Now()); tr.To != 0 {
			t.Fatalf("unremembered scope: transition to %v, want none", tr.To)
		}
	}
	if got := b.stateAt("y", clk.Now()); got != BreakerClosed {
		t.Errorf(`State("y") = %v, want closed`, got)
	}
	if got, want := remembered(b), []string{"busy", "down", "x"}; !slices.Equal(got, want) {
		t.Errorf("open scopes are never forgotten: remembered %v, want %v", got, want)
	}
	if _, _, err := b.allow("down", clk.Now()); !errors.Is(err, ErrCircuitOpen) {
		t.Errorf(`allow("down") = %v, want ErrCircuitOpen`, err)
	}
}

func TestBreakerMaxScopesEvictsLeastRecentlyUsed(t *testing.T) {
	b, clk := newTestBreaker(t, BreakerSettings{MaxScopes: 3})
	for _, scope := range []string{"a", "b", "c", "a", "b", "d"} {
		tk, _, _ := b.allow(scope, clk.Now())
		tk.done(observeSuccess, nil, clk.Now())
	}
	if got, want := remembered(b), []string{"a", "b", "d"}; !slices.Equal(got, want) {
		t.Errorf("after a, b, c, a, b, d (MaxScopes 3): remembered %v, want %v", got, want)
	}
}

func TestBreakerMaxScopesBoundHolds(t *testing.T) {
	b, clk := newTestBreaker(t, BreakerSettings{FailureThreshold: 2, MaxScopes: 16})
	var held []breakerTicket
	for i := range 10_000 {
		tk, _, err := b.allow("host-"+strconv.Itoa(i), clk.Now())
		if err != nil {
			t.Fatalf("allow: %v", err)
		}
		if i%3 == 0 {
			held = append(held, tk)
		} else {
			tk.done(observeFailure, errors.New("503"), clk.Now())
		}
		if n := len(remembered(b)); n > 16 {
			t.Fatalf("after %d scopes: %d remembered, want at most 16", i+1, n)
		}
	}
	for _, tk := range held {
		tk.done(observeFailure, errors.New("503"), clk.Now()) // evicted scopes: counted nowhere
	}
}

func TestNewBreakerInvalidSettings(t *testing.T) {
	tests := []struct {
		field string
		set   BreakerSettings
	}{
		{"FailureThreshold", BreakerSettings{FailureThreshold: -1}},
		{"MinObservations", BreakerSettings{MinObservations: -1}},
		{"OpenTimeout", BreakerSettings{OpenTimeout: -time.Second}},
		{"MaxProbes", BreakerSettings{MaxProbes: -2}},
		{"ProbeSuccesses", BreakerSettings{ProbeSuccesses: -1}},
		{"MaxScopes", BreakerSettings{MaxScopes: -1}},
	}
	for _, tt := range tests {
		b, err := NewBreaker(tt.set)
		if b != nil || !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("NewBreaker(%+v) = %v, %v; want nil, ErrInvalidPolicy", tt.set, b, err)
			continue
		}
		if !strings.Contains(err.Error(), "BreakerSettings."+tt.field) {
			t.Errorf("NewBreaker(%+v) error %q does not name the field %s", tt.set, err, tt.field)
		}
	}
}

func TestBreakerSettingsDefaults(t *testing.T) {
	want := BreakerSettings{FailureThreshold: 5, MinObservations: 5, OpenTimeout: 30 * time.Second, MaxProbes: 1, ProbeSuccesses: 1, MaxScopes: 1024, Version: 1}
	b, err := NewBreaker(BreakerSettings{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.settings(); got != want {
		t.Errorf("NewBreaker(zero).settings() = %+v, want %+v", got, want)
	}
	var zero Breaker
	if got := zero.settings(); got != want {
		t.Errorf("zero Breaker: Settings() = %+v, want %+v", got, want)
	}
	for range 5 {
		tk, _, _ := zero.allow("api", time.Now())
		tk.done(observeFailure, nil, time.Now())
	}
	if got := zero.stateAt("api", time.Now()); got != BreakerOpen {
		t.Errorf("zero Breaker after 5 failures: State = %v, want open", got)
	}
	b, _ = NewBreaker(BreakerSettings{FailureThreshold: 3, MinObservations: 8})
	if got := b.settings(); got.FailureThreshold != 3 || got.MinObservations != 8 {
		t.Errorf("Settings() = %+v, want FailureThreshold 3 and MinObservations 8", got)
	}
}

func TestBreakerTransitionAndErrorFields(t *testing.T) {
	b, c := newTestBreaker(t, BreakerSettings{FailureThreshold: 1, OpenTimeout: 10 * time.Second})
	set := b.settings()
	cause := errors.New("dial tcp: connection refused")
	opened := c.Now()
	tk, _, _ := b.allow("api.example", c.Now())
	got := tk.done(observeFailure, cause, c.Now())
	want := BreakerChangeInfo{Scope: "api.example", From: BreakerClosed, To: BreakerOpen, At: opened, Cause: cause, Settings: set}
	if got != want {
		t.Errorf("opening transition = %+v, want %+v", got, want)
	}

	c.Advance(4 * time.Second)
	_, _, err := b.allow("api.example", c.Now())
	var coe *CircuitOpenError
	if !errors.As(err, &coe) {
		t.Fatalf("allow while open: error %v, want *CircuitOpenError", err)
	}
	wantErr := CircuitOpenError{Scope: "api.example", OpenedAt: opened, ProbeAt: opened.Add(10 * time.Second), Cause: cause, Version: 1}
	if *coe != wantErr {
		t.Errorf("CircuitOpenError = %+v, want %+v", *coe, wantErr)
	}
	if !errors.Is(err, ErrCircuitOpen) || !errors.Is(err, cause) {
		t.Errorf("errors.Is(err, ErrCircuitOpen) = %v, errors.Is(err, cause) = %v; want both true", errors.Is(err, ErrCircuitOpen), errors.Is(err, cause))
	}

	c.Advance(6 * time.Second)
	probe, got, _ := b.allow("api.example", c.Now())
	want = BreakerChangeInfo{Scope: "api.example", From: BreakerOpen, To: BreakerHalfOpen, At: c.Now(), Settings: set}
	if got != want {
		t.Errorf("half-open transition = %+v, want %+v", got, want)
	}
	c.Advance(time.Second)
	got = probe.done(observeSuccess, nil, c.Now())
	want = BreakerChangeInfo{Scope: "api.example", From: BreakerHalfOpen, To: BreakerClosed, At: c.Now(), Settings: set}
	if got != want {
		t.Errorf("closing transition = %+v, want %+v", got, want)
	}
}

func TestBreakerStateString(t *testing.T) {
	for s, want := range map[BreakerState]string{
		BreakerClosed: "closed", BreakerOpen: "open", BreakerHalfOpen: "half_open", 0: "BreakerState(0)", 9: "BreakerState(9)",
	} {
		if got := s.String(); got != want {
			t.Errorf("BreakerState(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}
