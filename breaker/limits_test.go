package breaker

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

func TestBreakerConcurrentHalfOpenCallersGetMaxProbes(t *testing.T) {
	const callers, maxProbes = 64, 3
	b, c := newTestBreaker(t, Settings{FailureThreshold: 1, OpenTimeout: time.Second, MaxProbes: maxProbes})
	tk, _, _ := b.Allow("api", c.Now())
	tk.Done(Failure, errors.New("503"), c.Now())
	c.Advance(time.Second)

	var tickets, refused, halfOpened atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-start
			_, tr, err := b.Allow("api", c.Now())
			if tr.To == HalfOpen {
				halfOpened.Add(1)
			}
			switch {
			case err == nil:
				tickets.Add(1)
			case errors.Is(err, ErrOpen):
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
	b, clk := newTestBreaker(t, Settings{FailureThreshold: 1, MaxScopes: 3})
	busy, _, _ := b.Allow("busy", clk.Now()) // least recently used, but a request is in flight
	tk, _, _ := b.Allow("idle", clk.Now())
	tk.Done(Success, nil, clk.Now())
	tk, _, _ = b.Allow("down", clk.Now())
	tk.Done(Failure, errors.New("503"), clk.Now())

	inFlight, _, _ := b.Allow("new", clk.Now())
	if got, want := remembered(b), []string{"busy", "down", "new"}; !slices.Equal(got, want) {
		t.Fatalf("a 4th scope evicts the closed idle one: remembered %v, want %v", got, want)
	}
	if tr := busy.Done(Failure, errors.New("503"), clk.Now()); tr.To != Open {
		t.Fatalf("ticket of a scope kept: transition to %v, want open", tr.To)
	}

	tk, _, _ = b.Allow("x", clk.Now()) // evicts "new", the only closed scope, in flight or not
	if got, want := remembered(b), []string{"busy", "down", "x"}; !slices.Equal(got, want) {
		t.Fatalf("remembered %v, want %v", got, want)
	}
	tk.Done(Failure, errors.New("503"), clk.Now())
	if tr := inFlight.Done(Failure, errors.New("503"), clk.Now()); tr.To != 0 {
		t.Fatalf("ticket of an evicted scope: transition to %v, want none", tr.To)
	}

	// Every remembered scope is open: a new one passes, unremembered.
	for range 3 {
		tk, tr, err := b.Allow("y", clk.Now())
		if err != nil || tr.To != 0 {
			t.Fatalf("scope beyond the bound: transition to %v, error %v; want a ticket", tr.To, err)
		}
		if tr := tk.Done(Failure, errors.New("503"), clk.Now()); tr.To != 0 {
			t.Fatalf("unremembered scope: transition to %v, want none", tr.To)
		}
	}
	if got := b.StateAt("y", clk.Now()); got != Closed {
		t.Errorf(`State("y") = %v, want closed`, got)
	}
	if got, want := remembered(b), []string{"busy", "down", "x"}; !slices.Equal(got, want) {
		t.Errorf("open scopes are never forgotten: remembered %v, want %v", got, want)
	}
	if _, _, err := b.Allow("down", clk.Now()); !errors.Is(err, ErrOpen) {
		t.Errorf(`allow("down") = %v, want ErrOpen`, err)
	}
}

func TestBreakerMaxScopesEvictsLeastRecentlyUsed(t *testing.T) {
	b, clk := newTestBreaker(t, Settings{MaxScopes: 3})
	for _, scope := range []string{"a", "b", "c", "a", "b", "d"} {
		tk, _, _ := b.Allow(scope, clk.Now())
		tk.Done(Success, nil, clk.Now())
	}
	if got, want := remembered(b), []string{"a", "b", "d"}; !slices.Equal(got, want) {
		t.Errorf("after a, b, c, a, b, d (MaxScopes 3): remembered %v, want %v", got, want)
	}
}

func TestBreakerMaxScopesBoundHolds(t *testing.T) {
	b, clk := newTestBreaker(t, Settings{FailureThreshold: 2, MaxScopes: 16})
	var held []Ticket
	for i := range 10_000 {
		tk, _, err := b.Allow("host-"+strconv.Itoa(i), clk.Now())
		if err != nil {
			t.Fatalf("allow: %v", err)
		}
		if i%3 == 0 {
			held = append(held, tk)
		} else {
			tk.Done(Failure, errors.New("503"), clk.Now())
		}
		if n := len(remembered(b)); n > 16 {
			t.Fatalf("after %d scopes: %d remembered, want at most 16", i+1, n)
		}
	}
	for _, tk := range held {
		tk.Done(Failure, errors.New("503"), clk.Now()) // evicted scopes: counted nowhere
	}
}

func TestNewBreakerInvalidSettings(t *testing.T) {
	tests := []struct {
		field string
		set   Settings
	}{
		{"FailureThreshold", Settings{FailureThreshold: -1}},
		{"MinObservations", Settings{MinObservations: -1}},
		{"OpenTimeout", Settings{OpenTimeout: -time.Second}},
		{"MaxProbes", Settings{MaxProbes: -2}},
		{"ProbeSuccesses", Settings{ProbeSuccesses: -1}},
		{"MaxScopes", Settings{MaxScopes: -1}},
	}
	for _, tt := range tests {
		b, err := New(tt.set)
		if b != nil || !errors.Is(err, sentinel.ErrInvalidPolicy) {
			t.Errorf("New(%+v) = %v, %v; want nil, sentinel.ErrInvalidPolicy", tt.set, b, err)
			continue
		}
		if !strings.Contains(err.Error(), "breaker.Settings."+tt.field) {
			t.Errorf("New(%+v) error %q does not name the field %s", tt.set, err, tt.field)
		}
	}
}

func TestBreakerSettingsDefaults(t *testing.T) {
	want := Settings{FailureThreshold: 5, MinObservations: 5, OpenTimeout: 30 * time.Second, MaxProbes: 1, ProbeSuccesses: 1, MaxScopes: 1024, Version: 1}
	b, err := New(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.settings(); got != want {
		t.Errorf("New(zero).settings() = %+v, want %+v", got, want)
	}
	var zero Breaker
	if got := zero.settings(); got != want {
		t.Errorf("zero Breaker: Settings() = %+v, want %+v", got, want)
	}
	for range 5 {
		tk, _, _ := zero.Allow("api", time.Now())
		tk.Done(Failure, nil, time.Now())
	}
	if got := zero.StateAt("api", time.Now()); got != Open {
		t.Errorf("zero Breaker after 5 failures: State = %v, want open", got)
	}
	b, _ = New(Settings{FailureThreshold: 3, MinObservations: 8})
	if got := b.settings(); got.FailureThreshold != 3 || got.MinObservations != 8 {
		t.Errorf("Settings() = %+v, want FailureThreshold 3 and MinObservations 8", got)
	}
}

func TestBreakerTransitionAndErrorFields(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 1, OpenTimeout: 10 * time.Second})
	set := b.settings()
	cause := errors.New("dial tcp: connection refused")
	opened := c.Now()
	tk, _, _ := b.Allow("api.example", c.Now())
	got := tk.Done(Failure, cause, c.Now())
	want := Change{Scope: "api.example", From: Closed, To: Open, At: opened, Cause: cause, Settings: set}
	if got != want {
		t.Errorf("opening transition = %+v, want %+v", got, want)
	}

	c.Advance(4 * time.Second)
	_, _, err := b.Allow("api.example", c.Now())
	var coe *OpenError
	if !errors.As(err, &coe) {
		t.Fatalf("allow while open: error %v, want *OpenError", err)
	}
	wantErr := OpenError{Scope: "api.example", OpenedAt: opened, ProbeAt: opened.Add(10 * time.Second), Cause: cause, Version: 1}
	if *coe != wantErr {
		t.Errorf("OpenError = %+v, want %+v", *coe, wantErr)
	}
	if !errors.Is(err, ErrOpen) || !errors.Is(err, cause) {
		t.Errorf("errors.Is(err, ErrOpen) = %v, errors.Is(err, cause) = %v; want both true", errors.Is(err, ErrOpen), errors.Is(err, cause))
	}

	c.Advance(6 * time.Second)
	probe, got, _ := b.Allow("api.example", c.Now())
	want = Change{Scope: "api.example", From: Open, To: HalfOpen, At: c.Now(), Settings: set}
	if got != want {
		t.Errorf("half-open transition = %+v, want %+v", got, want)
	}
	c.Advance(time.Second)
	got = probe.Done(Success, nil, c.Now())
	want = Change{Scope: "api.example", From: HalfOpen, To: Closed, At: c.Now(), Settings: set}
	if got != want {
		t.Errorf("closing transition = %+v, want %+v", got, want)
	}
}

func TestBreakerStateString(t *testing.T) {
	for s, want := range map[State]string{
		Closed: "closed", Open: "open", HalfOpen: "half_open", 0: "State(0)", 9: "State(9)",
	} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}
