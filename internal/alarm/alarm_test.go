package alarm

import (
	"context"
	"sync"
	"testing"
	"time"
)

// An alarm on each of its two paths: a time.Timer on a clock with the
// runtime's timers, a goroutine asleep on any other clock.

// fixedStart is the fixed start of the tests' virtual clocks.
var fixedStart = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// wallClock is the wall clock with the runtime's timers, as a Transport's.
type wallClock struct{}

func (wallClock) Now() time.Time                       { return time.Now() }
func (wallClock) NewTimer(d time.Duration) *time.Timer { return time.NewTimer(d) }
func (wallClock) Sleep(context.Context, time.Duration) error {
	panic("a clock with timers is not slept on")
}

// sleeper is a virtual clock without timers: each Sleep announces itself
// on slept with its context and duration, and then waits until the test
// wakes it (its time moved on by the duration, nil returned) or its
// context is done (ctx.Err() returned). It is safe for concurrent use.
type sleeper struct {
	slept chan sleep
	wake  chan struct{}

	mu sync.Mutex
	t  time.Time
}

// sleep is one Sleep of a sleeper, as it begins.
type sleep struct {
	ctx context.Context
	d   time.Duration
}

func newSleeper() *sleeper {
	return &sleeper{slept: make(chan sleep, 1), wake: make(chan struct{}), t: fixedStart}
}

func (c *sleeper) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *sleeper) Sleep(ctx context.Context, d time.Duration) error {
	c.slept <- sleep{ctx, d}
	select {
	case <-c.wake:
		c.mu.Lock()
		c.t = c.t.Add(d)
		c.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stubborn is a virtual clock without timers whose Sleep ignores its
// context: it returns nil once released, as a sleep that ends in the same
// instant as its cancellation may. It is safe for concurrent use.
type stubborn struct {
	slept   chan context.Context
	release chan struct{}
}

func (c *stubborn) Now() time.Time { return fixedStart }

func (c *stubborn) Sleep(ctx context.Context, _ time.Duration) error {
	c.slept <- ctx
	<-c.release
	return nil
}

// patience bounds every wait of these tests on a real timer or goroutine.
const patience = 10 * time.Second

// receive waits for the alarm, up to patience.
func receive(t *testing.T, a *Alarm) time.Time {
	t.Helper()
	bound := time.NewTimer(patience)
	defer bound.Stop()
	select {
	case at := <-a.C:
		return at
	case <-bound.C:
		t.Fatalf("the alarm did not fire within %v", patience)
		return time.Time{}
	}
}

// silent reports whether the alarm has nothing to receive now.
func silent(a *Alarm) bool {
	select {
	case <-a.C:
		return false
	default:
		return true
	}
}

func TestAfterFiresOnTheRuntimesTimers(t *testing.T) {
	const d = 5 * time.Millisecond
	start := time.Now()
	a := After(wallClock{}, d)
	defer a.Stop()
	if a.timer == nil || a.cancel != nil {
		t.Fatalf("alarm on a clock with timers: timer %v, goroutine %v; want a timer and no goroutine", a.timer != nil, a.cancel != nil)
	}
	at := receive(t, &a)
	if got := at.Sub(start); got < d {
		t.Errorf("fired after %v, want at least %v", got, d)
	}
	if !silent(&a) {
		t.Error("the alarm fired twice")
	}
}

func TestAfterFiresOnAClockWithoutTimers(t *testing.T) {
	for _, d := range []time.Duration{0, time.Nanosecond, 250 * time.Millisecond, time.Hour} {
		clk := newSleeper()
		a := After(clk, d)
		s := <-clk.slept
		if s.d != d {
			t.Errorf("After(%v): slept %v, want %v", d, s.d, d)
		}
		if !silent(&a) {
			t.Errorf("After(%v): fired before its clock had slept", d)
		}
		clk.wake <- struct{}{}
		if got, want := receive(t, &a), fixedStart.Add(d); !got.Equal(want) {
			t.Errorf("After(%v): fired at %v, want the clock's time after the sleep, %v", d, got, want)
		}
		a.Stop() // waits for the sleeper's goroutine: goleak checks it ended
		if !silent(&a) {
			t.Errorf("After(%v): fired twice", d)
		}
	}
}

func TestStopBeforeItFiresReleasesEverything(t *testing.T) {
	t.Run("timers", func(t *testing.T) {
		a := After(wallClock{}, time.Hour)
		a.Stop()
		if !silent(&a) {
			t.Error("a stopped alarm fired")
		}
	})
	t.Run("goroutine", func(t *testing.T) {
		clk := newSleeper()
		a := After(clk, time.Hour)
		s := <-clk.slept
		a.Stop()
		// Stop returns once the goroutine has: its sleep is over, cancelled.
		if err := s.ctx.Err(); err != context.Canceled {
			t.Errorf("the sleep's context after Stop: got %v, want %v", err, context.Canceled)
		}
		if !silent(&a) {
			t.Error("a stopped alarm fired")
		}
	})
}

func TestStopRacingTheEndOfTheSleepDoesNotFire(t *testing.T) {
	clk := &stubborn{slept: make(chan context.Context, 1), release: make(chan struct{})}
	a := After(clk, time.Second)
	ctx := <-clk.slept
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		a.Stop()
	}()
	<-ctx.Done() // Stop has cancelled the sleep, which has not yet returned
	select {
	case <-stopped:
		t.Fatal("Stop returned before the sleeper's goroutine ended")
	default:
	}
	close(clk.release) // the sleep ends as if its time were up
	<-stopped
	if !silent(&a) {
		t.Error("an alarm stopped before its sleep ended fired")
	}
}

func TestStopAfterItFiredIsHarmless(t *testing.T) {
	tests := []struct {
		name string
		fire func(t *testing.T) Alarm
	}{
		{"timers", func(t *testing.T) Alarm {
			a := After(wallClock{}, time.Nanosecond)
			receive(t, &a)
			return a
		}},
		{"timers, due but not received", func(t *testing.T) Alarm {
			// On Go 1.23 and later, Stop discards a value not yet received.
			return After(wallClock{}, 0)
		}},
		{"goroutine", func(t *testing.T) Alarm {
			clk := newSleeper()
			a := After(clk, time.Minute)
			<-clk.slept
			clk.wake <- struct{}{}
			receive(t, &a)
			return a
		}},
		{"goroutine, woken but not received", func(t *testing.T) Alarm {
			// Stop may come before or after the goroutine fires: either
			// way it returns once the goroutine has ended.
			clk := newSleeper()
			a := After(clk, time.Minute)
			<-clk.slept
			clk.wake <- struct{}{}
			return a
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.fire(t)
			a.Stop()
			a.Stop() // and again
			if !silent(&a) && a.timer != nil {
				t.Error("a stopped timer delivered a value")
			}
		})
	}
}

func TestZeroAlarmNeverFires(t *testing.T) {
	var a Alarm
	if a.C != nil {
		t.Fatalf("zero alarm: got channel %v, want nil", a.C)
	}
	a.Stop()
	a.Stop()
	select {
	case <-a.C:
		t.Error("the zero alarm fired")
	default:
	}
}
