// Package alarm is a timer on a Transport's clock, for the waits that
// race a timeout against other events (a hedge's delay, a wait in the
// bulkhead's queue): on the wall clock, a time.Timer; on another clock (a
// test's), a goroutine asleep on it.
package alarm

import (
	"context"
	"time"
)

// Clock tells the time and waits. A Transport's clock satisfies it.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx is done, and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// timers is a Clock whose timers are the runtime's (the wall clock): an
// alarm on it is a time.Timer, without a goroutine in between.
type timers interface {
	NewTimer(d time.Duration) *time.Timer
}

// Alarm receives on C once its clock has slept a while; Stop ends the
// sleep early, and no goroutine outlives it. The zero Alarm never fires.
type Alarm struct {
	C      <-chan time.Time
	timer  *time.Timer        // on the runtime's timers
	cancel context.CancelFunc // on another clock, with done
	done   chan struct{}
}

// After returns an alarm that fires once clk has slept d.
func After(clk Clock, d time.Duration) Alarm {
	if tc, ok := clk.(timers); ok {
		t := tc.NewTimer(d)
		return Alarm{C: t.C, timer: t}
	}
	ctx, cancel := context.WithCancel(context.Background())
	fired := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if clk.Sleep(ctx, d) == nil && ctx.Err() == nil {
			fired <- clk.Now()
		}
	}()
	return Alarm{C: fired, cancel: cancel, done: done}
}

// Stop stops the alarm; it may be called more than once.
func (a *Alarm) Stop() {
	switch {
	case a.timer != nil:
		a.timer.Stop()
	case a.cancel != nil:
		a.cancel()
		<-a.done
	}
}
