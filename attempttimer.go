package retryfuse

import (
	"context"
	"sync"
	"time"
)

// attemptTimer strikes an attempt's timeout: it cancels the attempt's
// context when AttemptTimeout passes before the response's headers come.
//
// Timers are kept in a pool and re-armed rather than made for each
// attempt: making one (time.AfterFunc) allocates it and costs about twice
// as long as re-arming one (BenchmarkAttemptTimer). Only a timer that was
// stopped before it struck goes back to the pool, so its function has
// never run and never will for an earlier attempt: a timer that struck is
// left to the garbage collector.
type attemptTimer struct {
	t      *time.Timer
	mu     sync.Mutex
	cancel context.CancelFunc // the current attempt's
}

var attemptTimers sync.Pool // of *attemptTimer, each stopped

// startAttemptTimer calls cancel after d, unless the timer's stop comes
// first.
func startAttemptTimer(d time.Duration, cancel context.CancelFunc) *attemptTimer {
	at, _ := attemptTimers.Get().(*attemptTimer)
	if at == nil {
		at = &attemptTimer{cancel: cancel}
		at.t = time.AfterFunc(d, at.strike)
		return at
	}
	at.mu.Lock()
	at.cancel = cancel
	at.mu.Unlock()
	at.t.Reset(d)
	return at
}

// strike cancels the attempt: the timeout passed.
func (at *attemptTimer) strike() {
	at.mu.Lock()
	cancel := at.cancel
	at.mu.Unlock()
	cancel()
}

// stop stops the timer and reports whether it did so before it struck.
// The timer must not be used again.
func (at *attemptTimer) stop() bool {
	if !at.t.Stop() {
		return false // struck, or striking: its function has started
	}
	at.mu.Lock()
	at.cancel = nil
	at.mu.Unlock()
	attemptTimers.Put(at)
	return true
}
