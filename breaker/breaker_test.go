package breaker

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// newTestBreaker returns a Breaker with settings s on a fake clock of its
// own, which starts at a fixed time.
func newTestBreaker(t testing.TB, s Settings) (*Breaker, *fakeClock) {
	t.Helper()
	b, err := New(s)
	if err != nil {
		t.Fatalf("New(%+v): %v", s, err)
	}
	c := newFakeClockAt(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))

	return b, c
}

// step is one step of a state-machine table.
//
//	ok, fail, ignore                Allow, then done at once with that outcome
//	take                            Allow and hold the ticket
//	ok-held, fail-held, ignore-held done of the oldest held ticket
//	refused                         Allow must fail with ErrOpen
//	wait                            advance the clock by d
type breakerStep struct {
	op    string
	d     time.Duration
	tr    string // transitions of the step, "from>to" joined by ","
	state State  // State after the step
}

func repeat(n int, s breakerStep) []breakerStep {
	out := make([]breakerStep, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func steps(parts ...any) []breakerStep {
	var out []breakerStep
	for _, p := range parts {
		switch p := p.(type) {
		case breakerStep:
			out = append(out, p)
		case []breakerStep:
			out = append(out, p...)
		}
	}
	return out
}

var observations = map[string]Outcome{"ok": Success, "fail": Failure, "ignore": Ignore}

func runBreakerSteps(t *testing.T, b *Breaker, c *fakeClock, scope string, table []breakerStep) {
	t.Helper()
	var held []Ticket
	for i, st := range table {
		var trs []string
		note := func(tr Change) {
			if tr.To != 0 {
				trs = append(trs, tr.From.String()+">"+tr.To.String())
			}
		}
		switch op, isHeld := strings.CutSuffix(st.op, "-held"); {
		case st.op == "wait":
			c.Advance(st.d)
		case st.op == "refused":
			_, tr, err := b.Allow(scope, c.Now())
			note(tr)
			if !errors.Is(err, ErrOpen) {
				t.Fatalf("step %d (%s): allow error = %v, want ErrOpen", i, st.op, err)
			}
		case st.op == "take" || (!isHeld && observations[op] != 0):
			tk, tr, err := b.Allow(scope, c.Now())
			note(tr)
			if err != nil {
				t.Fatalf("step %d (%s): allow error = %v, want a ticket", i, st.op, err)
			}
			if st.op == "take" {
				held = append(held, tk)
			} else {
				note(tk.Done(observations[op], errors.New(scope+" failed"), c.Now()))
			}
		case isHeld && observations[op] != 0:
			if len(held) == 0 {
				t.Fatalf("step %d (%s): no ticket held", i, st.op)
			}
			note(held[0].Done(observations[op], errors.New(scope+" failed"), c.Now()))
			held = held[1:]
		default:
			t.Fatalf("step %d: unknown op %q", i, st.op)
		}
		if got := strings.Join(trs, ","); got != st.tr {
			t.Errorf("step %d (%s): transitions %q, want %q", i, st.op, got, st.tr)
		}
		if got := b.StateAt(scope, c.Now()); got != st.state {
			t.Errorf("step %d (%s): State = %v, want %v", i, st.op, got, st.state)
		}
	}
}

const (
	closed   = Closed
	open     = Open
	halfOpen = HalfOpen
)

func TestBreakerStateMachine(t *testing.T) {
	tests := []struct {
		name  string
		set   Settings
		steps []breakerStep
	}{{
		name: "consecutive failures open, a probe closes",
		set:  Settings{FailureThreshold: 3, OpenTimeout: 10 * time.Second},
		steps: steps(
			breakerStep{op: "fail", state: closed},
			breakerStep{op: "fail", state: closed},
			breakerStep{op: "ok", state: closed}, // resets the streak
			breakerStep{op: "fail", state: closed},
			breakerStep{op: "fail", state: closed},
			breakerStep{op: "fail", tr: "closed>open", state: open},
			breakerStep{op: "refused", state: open},
			breakerStep{op: "wait", d: 9 * time.Second, state: open},
			breakerStep{op: "refused", state: open},
			breakerStep{op: "wait", d: time.Second, state: halfOpen},
			breakerStep{op: "ok", tr: "open>half_open,half_open>closed", state: closed},
		),
	}, {
		name: "a failed probe reopens with a new opening time",
		set:  Settings{FailureThreshold: 1, OpenTimeout: 10 * time.Second},
		steps: steps(
			breakerStep{op: "fail", tr: "closed>open", state: open},
			breakerStep{op: "wait", d: 10 * time.Second, state: halfOpen},
			breakerStep{op: "fail", tr: "open>half_open,half_open>open", state: open},
			breakerStep{op: "wait", d: 9 * time.Second, state: open},
			breakerStep{op: "refused", state: open},
			breakerStep{op: "wait", d: time.Second, state: halfOpen},
			breakerStep{op: "ok", tr: "open>half_open,half_open>closed", state: closed},
		),
	}, {
		name: "ignore neither counts nor resets the streak",
		set:  Settings{FailureThreshold: 2},
		steps: steps(
			breakerStep{op: "fail", state: closed},
			repeat(3, breakerStep{op: "ignore", state: closed}),
			breakerStep{op: "fail", tr: "closed>open", state: open},
		),
	}, {
		name: "probe slots are bounded and freed by any done",
		set:  Settings{FailureThreshold: 1, OpenTimeout: time.Minute, MaxProbes: 2},
		steps: steps(
			breakerStep{op: "fail", tr: "closed>open", state: open},
			breakerStep{op: "wait", d: time.Minute, state: halfOpen},
			breakerStep{op: "take", tr: "open>half_open", state: halfOpen},
			breakerStep{op: "take", state: halfOpen},
			breakerStep{op: "refused", state: halfOpen},
			breakerStep{op: "ignore-held", state: halfOpen},
			breakerStep{op: "take", state: halfOpen},
			breakerStep{op: "refused", state: halfOpen},
			breakerStep{op: "ok-held", tr: "half_open>closed", state: closed},
			breakerStep{op: "fail-held", state: closed}, // a probe of the old generation
		),
	}, {
		name: "ProbeSuccesses consecutive probes close",
		set:  Settings{FailureThreshold: 1, OpenTimeout: time.Minute, ProbeSuccesses: 3},
		steps: steps(
			breakerStep{op: "fail", tr: "closed>open", state: open},
			breakerStep{op: "wait", d: time.Minute, state: halfOpen},
			breakerStep{op: "ok", tr: "open>half_open", state: halfOpen},
			breakerStep{op: "ignore", state: halfOpen},
			breakerStep{op: "ok", state: halfOpen},
			breakerStep{op: "ok", tr: "half_open>closed", state: closed},
		),
	}, {
		name: "MinObservations: 5 failures in the first 5 outcomes do not open, the 10th outcome does",
		set:  Settings{FailureThreshold: 5, MinObservations: 10},
		steps: steps(
			repeat(9, breakerStep{op: "fail", state: closed}),
			breakerStep{op: "fail", tr: "closed>open", state: open},
		),
	}, {
		name: "MinObservations: successes count as observations",
		set:  Settings{FailureThreshold: 5, MinObservations: 10},
		steps: steps(
			repeat(5, breakerStep{op: "ok", state: closed}),
			repeat(4, breakerStep{op: "fail", state: closed}),
			breakerStep{op: "fail", tr: "closed>open", state: open},
		),
	}, {
		name: "MinObservations counts again from the last closing",
		set:  Settings{FailureThreshold: 2, MinObservations: 4, OpenTimeout: time.Second},
		steps: steps(
			repeat(3, breakerStep{op: "fail", state: closed}),
			breakerStep{op: "fail", tr: "closed>open", state: open},
			breakerStep{op: "wait", d: time.Second, state: halfOpen},
			breakerStep{op: "ok", tr: "open>half_open,half_open>closed", state: closed},
			repeat(3, breakerStep{op: "fail", state: closed}),
			breakerStep{op: "fail", tr: "closed>open", state: open},
		),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newTestBreaker(t, tt.set)
			runBreakerSteps(t, b, c, "api", tt.steps)
		})
	}
}

// A small sample must not open a scope even when every outcome failed.
func TestBreakerTinySampleDoesNotOpen(t *testing.T) {
	b, clk := newTestBreaker(t, Settings{FailureThreshold: 5, MinObservations: 10})
	for i := range 5 {
		tk, _, err := b.Allow("api", clk.Now())
		if err != nil {
			t.Fatalf("allow %d: %v", i, err)
		}
		if tr := tk.Done(Failure, errors.New("503"), clk.Now()); tr.To != 0 {
			t.Fatalf("failure %d of 5 observations: transition %v>%v, want none", i+1, tr.From, tr.To)
		}
	}
	if got := b.StateAt("api", clk.Now()); got != Closed {
		t.Errorf("after 5 failures out of 5 observations (MinObservations 10): State = %v, want closed", got)
	}
}

// Time alone does not confirm recovery: once the open interval is over the
// scope is half-open until a probe succeeds, however long nobody asks.
func TestBreakerTimerElapsedStaysUnconfirmed(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 1, OpenTimeout: time.Second})
	tk, _, _ := b.Allow("api", c.Now())
	tk.Done(Failure, errors.New("reset"), c.Now())
	for _, d := range []time.Duration{time.Second, time.Hour, 1000 * time.Hour} {
		c.Advance(d)
		if got := b.StateAt("api", c.Now()); got != HalfOpen {
			t.Fatalf("%v after opening, no probe: State = %v, want half_open", d, got)
		}
	}
	_, tr, err := b.Allow("api", c.Now())
	if err != nil || tr.From != Open || tr.To != HalfOpen {
		t.Fatalf("first allow after the timeout: transition %v>%v, error %v; want open>half_open and a probe", tr.From, tr.To, err)
	}
	if got := b.StateAt("api", c.Now()); got != HalfOpen {
		t.Errorf("probe out, not done: State = %v, want half_open", got)
	}
}

func TestBreakerProbePassesThenFailsDoesNotClose(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 1, OpenTimeout: time.Second, ProbeSuccesses: 2})
	tk, _, _ := b.Allow("api", c.Now())
	tk.Done(Failure, errors.New("503"), c.Now())
	c.Advance(time.Second)

	tk, _, _ = b.Allow("api", c.Now())
	if tr := tk.Done(Success, nil, c.Now()); tr.To != 0 {
		t.Fatalf("first probe passed: transition %v>%v, want none (ProbeSuccesses 2)", tr.From, tr.To)
	}
	tk, _, err := b.Allow("api", c.Now())
	if err != nil {
		t.Fatalf("second probe: %v", err)
	}
	cause := errors.New("503 again")
	tr := tk.Done(Failure, cause, c.Now())
	if tr.From != HalfOpen || tr.To != Open || tr.Cause != cause {
		t.Errorf("second probe failed: transition %v>%v cause %v, want half_open>open cause %v", tr.From, tr.To, tr.Cause, cause)
	}
	if got := b.StateAt("api", c.Now()); got != Open {
		t.Errorf("State = %v, want open", got)
	}
}

// A budget refusal (or a cancellation) is no evidence about the dependency.
func TestBreakerIgnoreIsNotFailure(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 1, OpenTimeout: time.Second})
	for range 10 {
		tk, _, _ := b.Allow("api", c.Now())
		if tr := tk.Done(Ignore, errBudget, c.Now()); tr.To != 0 {
			t.Fatalf("budget refusal while closed: transition %v>%v, want none", tr.From, tr.To)
		}
	}
	if got := b.StateAt("api", c.Now()); got != Closed {
		t.Fatalf("after 10 budget refusals (FailureThreshold 1): State = %v, want closed", got)
	}

	tk, _, _ := b.Allow("api", c.Now())
	tk.Done(Failure, errors.New("dial refused"), c.Now())
	c.Advance(time.Second)
	for i := range 3 {
		tk, _, err := b.Allow("api", c.Now())
		if err != nil {
			t.Fatalf("probe %d after an ignored probe: %v, want a ticket (slot freed)", i, err)
		}
		if tr := tk.Done(Ignore, errBudget, c.Now()); tr.To != 0 {
			t.Fatalf("ignored probe: transition %v>%v, want none", tr.From, tr.To)
		}
	}
	if got := b.StateAt("api", c.Now()); got != HalfOpen {
		t.Errorf("after ignored probes: State = %v, want half_open", got)
	}
}

func TestBreakerScopesAreIndependent(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 2, OpenTimeout: time.Second})
	runBreakerSteps(t, b, c, "a", steps(
		breakerStep{op: "fail", state: closed},
		breakerStep{op: "fail", tr: "closed>open", state: open},
	))
	runBreakerSteps(t, b, c, "b", steps(
		breakerStep{op: "fail", state: closed},
		breakerStep{op: "ok", state: closed},
		breakerStep{op: "fail", state: closed},
	))
	if got := b.StateAt("a", c.Now()); got != Open {
		t.Errorf(`State("a") = %v, want open`, got)
	}
	runBreakerSteps(t, b, c, "b", steps(breakerStep{op: "fail", tr: "closed>open", state: open}))
	c.Advance(time.Second)
	runBreakerSteps(t, b, c, "a", steps(breakerStep{op: "ok", tr: "open>half_open,half_open>closed", state: closed}))
	if got := b.StateAt("b", c.Now()); got != HalfOpen {
		t.Errorf(`State("b") = %v, want half_open`, got)
	}
}

// A slow request sent while the scope was closed must not decide a
// half-open scope, nor count in the next closed period.
func TestBreakerLateDoneFromOldGenerationIsDropped(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 1, OpenTimeout: time.Second})
	slow, _, _ := b.Allow("api", c.Now())
	slow2, _, _ := b.Allow("api", c.Now())
	fast, _, _ := b.Allow("api", c.Now())
	fast.Done(Failure, errors.New("503"), c.Now())
	c.Advance(time.Second)
	probe, _, _ := b.Allow("api", c.Now()) // half-open now

	if tr := slow.Done(Success, nil, c.Now()); tr.To != 0 {
		t.Fatalf("late success from the closed generation: transition %v>%v, want none", tr.From, tr.To)
	}
	if got := b.StateAt("api", c.Now()); got != HalfOpen {
		t.Fatalf("after a late success: State = %v, want half_open", got)
	}
	probe.Done(Success, nil, c.Now())
	if tr := slow2.Done(Failure, errors.New("late"), c.Now()); tr.To != 0 {
		t.Fatalf("late failure from an old generation: transition %v>%v, want none", tr.From, tr.To)
	}
	if got := b.StateAt("api", c.Now()); got != Closed {
		t.Errorf("after a late failure (FailureThreshold 1): State = %v, want closed", got)
	}
}

func TestBreakerDoneTwiceIsHarmless(t *testing.T) {
	b, c := newTestBreaker(t, Settings{FailureThreshold: 2, OpenTimeout: time.Second, ProbeSuccesses: 2, MaxProbes: 2})
	tk, _, _ := b.Allow("api", c.Now())
	tk.Done(Failure, errors.New("503"), c.Now())
	if tr := tk.Done(Failure, errors.New("503"), c.Now()); tr.To != 0 {
		t.Fatalf("second done of one ticket: transition %v>%v, want none", tr.From, tr.To)
	}
	if got := b.StateAt("api", c.Now()); got != Closed {
		t.Fatalf("one failure reported twice (FailureThreshold 2): State = %v, want closed", got)
	}

	Ticket{}.Done(Failure, nil, c.Now()) // the zero ticket does nothing
	tk, _, _ = b.Allow("api", c.Now())
	tk.Done(Failure, errors.New("503"), c.Now())
	c.Advance(time.Second)
	p1, _, _ := b.Allow("api", c.Now())
	p1.Done(Success, nil, c.Now())
	p1.Done(Success, nil, c.Now())
	if got := b.StateAt("api", c.Now()); got != HalfOpen {
		t.Fatalf("one probe success reported twice (ProbeSuccesses 2): State = %v, want half_open", got)
	}
	p2, _, _ := b.Allow("api", c.Now())
	p2.Done(Ignore, nil, c.Now())
	p2.Done(Ignore, nil, c.Now()) // must not free a second slot
	p3, _, err3 := b.Allow("api", c.Now())
	_, _, err4 := b.Allow("api", c.Now())
	_, _, err5 := b.Allow("api", c.Now())
	if err3 != nil || err4 != nil || !errors.Is(err5, ErrOpen) {
		t.Errorf("after a double done of a probe: allow errors %v, %v, %v; want nil, nil, ErrOpen (MaxProbes 2)", err3, err4, err5)
	}
	p3.Done(Success, nil, c.Now())
}

// OpenUntil tells whether an attempt at a given time would be refused,
// without moving the scope.
func TestBreakerOpenUntil(t *testing.T) {
	b, clk := newTestBreaker(t, Settings{FailureThreshold: 1, OpenTimeout: time.Second})
	if err := b.OpenUntil("unknown", clk.Now()); err != nil {
		t.Errorf("unknown scope: got %v, want nil", err)
	}
	ticket, _, err := b.Allow("s", clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	ticket.Done(Failure, errors.New("down"), clk.Now())
	if err := b.OpenUntil("s", clk.Now().Add(999*time.Millisecond)); !errors.Is(err, ErrOpen) {
		t.Errorf("before the open interval ends: got %v, want ErrOpen", err)
	}
	if err := b.OpenUntil("s", clk.Now().Add(time.Second)); err != nil {
		t.Errorf("once a probe may run: got %v, want nil", err)
	}
	if got := b.StateAt("s", clk.Now()); got != Open {
		t.Errorf("state after openUntil: got %v, want open (unchanged)", got)
	}
}
