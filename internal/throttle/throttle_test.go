package throttle

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The throttle (throttle.go) on a simulated clock: what it admits of new
// calls to a dependency as it accepts or rejects what it is sent.

// lowestDraw draws the lowest number: the throttle refuses every call it may.
func lowestDraw(int64) int64 { return 0 }

// seeded draws from a seeded generator.
func seeded(seed uint64) func(int64) int64 {
	rnd := rand.New(rand.NewPCG(seed, seed))
	return rnd.Int64N
}

func TestThrottleNeverRefusesAHealthyDependency(t *testing.T) {
	th := New(DefaultRatio, DefaultWindow)
	clk := newFakeClockAt(fixedStart)
	for i := range 10000 {
		if p := th.Admit(clk.Now(), lowestDraw, nil); p != 0 {
			t.Fatalf("call %d refused (share %v): the dependency accepted every request", i, p)
		}
		th.Record(clk.Now(), true, true)
		clk.Advance(time.Millisecond)
	}
}

func TestThrottleFewRejectionsDoNotThrottle(t *testing.T) {
	th := New(DefaultRatio, DefaultWindow)
	clk := newFakeClockAt(fixedStart)
	for range minRejects - 1 {
		th.Record(clk.Now(), true, false)
	}
	if p := th.Admit(clk.Now(), lowestDraw, nil); p != 0 {
		t.Errorf("after %d rejections alone: refused (share %v), want admitted", minRejects-1, p)
	}
	th.Record(clk.Now(), true, false)
	if p := th.Admit(clk.Now(), lowestDraw, nil); p == 0 {
		t.Errorf("after %d rejections alone: admitted, want refused", minRejects)
	}
}

// quota simulates a dependency that accepts at most perTick requests a
// tick of 10ms and rejects the rest, offered calls a tick through th for
// ticks; one rejected call in ten is retried once (as a RatioBudget's 10%
// allows). It returns the attempts sent and accepted.
func quota(th *Throttle, clk *fakeClock, randN func(int64) int64, perTick, calls, ticks int) (sent, accepted int) {
	rejected := 0
	for range ticks {
		free := perTick
		send := func(first bool) bool {
			sent++
			ok := free > 0
			if ok {
				free--
				accepted++
			}
			th.Record(clk.Now(), first, ok)
			return ok
		}
		for range calls {
			if th.Admit(clk.Now(), randN, nil) != 0 {
				continue
			}
			if !send(true) {
				if rejected++; rejected%10 == 0 {
					send(false)
				}
			}
		}
		clk.Advance(10 * time.Millisecond)
	}
	return sent, accepted
}

func TestThrottleSendsABoundedMultipleOfWhatIsAccepted(t *testing.T) {
	th := New(DefaultRatio, DefaultWindow)
	clk := newFakeClockAt(fixedStart)
	quota(th, clk, seeded(1), 10, 20, 200) // the window fills
	sent, accepted := quota(th, clk, seeded(2), 10, 20, 500)
	if got := float64(sent) / float64(accepted); got > DefaultRatio+0.05 {
		t.Errorf("attempts sent per accepted, retries included: got %.3f (%d of %d), want at most %.2f", got, sent, accepted, DefaultRatio+0.05)
	}
	if accepted < 4900 {
		t.Errorf("accepted: got %d of the 5000 the dependency takes, want it kept busy (at least 4900)", accepted)
	}
}

func TestThrottleLetsWorkThroughOnceAccepted(t *testing.T) {
	th := New(DefaultRatio, DefaultWindow)
	clk := newFakeClockAt(fixedStart)
	randN := seeded(1)
	quota(th, clk, randN, 10, 30, 200)
	if p := th.Admit(clk.Now(), lowestDraw, nil); p == 0 {
		t.Fatal("not throttling after two seconds at three times the quota")
	}
	// The load falls below the quota: what is sent is accepted. Within a
	// bucket's width and throttleFresh acceptances, nothing is refused.
	refusedAfter := time.Duration(-1)
	began := clk.Now()
	for range 100 {
		for range 5 {
			if th.Admit(clk.Now(), randN, nil) != 0 {
				refusedAfter = clk.Now().Sub(began)
			} else {
				th.Record(clk.Now(), true, true)
			}
		}
		clk.Advance(10 * time.Millisecond)
	}
	if limit := DefaultWindow / Buckets; refusedAfter < 0 || refusedAfter > limit {
		t.Errorf("last refusal %v after the dependency accepted again, want some, and none after %v", refusedAfter, limit)
	}
}

func TestThrottleClockJumps(t *testing.T) {
	fill := func() (*Throttle, *fakeClock) {
		th := New(DefaultRatio, DefaultWindow)
		clk := newFakeClockAt(fixedStart)
		for range 50 {
			th.Record(clk.Now(), true, false)
			clk.Advance(time.Millisecond)
		}
		if th.Admit(clk.Now(), lowestDraw, nil) == 0 {
			t.Fatal("not throttling after 50 rejections")
		}
		return th, clk
	}
	t.Run("back: what the window holds cannot be dated, and is forgotten", func(t *testing.T) {
		th, clk := fill()
		clk.Advance(-time.Hour)
		if p := th.Admit(clk.Now(), lowestDraw, nil); p != 0 {
			t.Errorf("refused (share %v) after the clock went back an hour, want admitted", p)
		}
		// Counting goes on from there.
		for range 50 {
			th.Record(clk.Now(), true, false)
		}
		if th.Admit(clk.Now(), lowestDraw, nil) == 0 {
			t.Error("not throttling after 50 rejections since the clock went back")
		}
	})
	t.Run("forward past the window: it has expired", func(t *testing.T) {
		th, clk := fill()
		clk.Advance(time.Hour)
		if p := th.Admit(clk.Now(), lowestDraw, nil); p != 0 {
			t.Errorf("refused (share %v) an hour later, want admitted", p)
		}
	})
}

func TestThrottleOneFailingRequestAMinuteIsNeverRefused(t *testing.T) {
	th := New(DefaultRatio, DefaultWindow)
	clk := newFakeClockAt(fixedStart)
	for i := range 120 {
		if p := th.Admit(clk.Now(), lowestDraw, nil); p != 0 {
			t.Fatalf("call %d refused (share %v): a window never holds more than one", i, p)
		}
		th.Record(clk.Now(), true, false)
		clk.Advance(time.Minute)
	}
}

func TestThrottleShareIsBounded(t *testing.T) {
	th := New(DefaultRatio, DefaultWindow)
	clk := newFakeClockAt(fixedStart)
	for range 1000 {
		th.Record(clk.Now(), true, false)
	}
	if p := th.Admit(clk.Now(), lowestDraw, nil); p != throttleMaxShare {
		t.Errorf("share with every request rejected: got %v, want %v, so that a few calls still go and tell when it accepts again", p, throttleMaxShare)
	}
	// The share is drawn: with a draw above it, the call goes.
	if p := th.Admit(clk.Now(), func(n int64) int64 { return n - 1 }, nil); p != 0 {
		t.Errorf("a draw above the share: refused (share %v), want admitted", p)
	}
}

func TestThrottleCountsATimeReadJustBeforeTheWindowMovedOn(t *testing.T) {
	// Concurrent calls read the clock before they take the throttle's
	// lock: one may come with a time just before the bucket another has
	// opened. That is not a clock that went back.
	th := New(DefaultRatio, DefaultWindow)
	clk := newFakeClockAt(fixedStart)
	for range 50 {
		th.Record(clk.Now(), true, false)
	}
	clk.Advance(DefaultWindow / Buckets)
	th.Record(clk.Now(), true, false) // the next bucket
	th.Record(clk.Now().Add(-time.Microsecond), true, false)
	if p := th.Admit(clk.Now(), lowestDraw, nil); p == 0 {
		t.Error("the window was forgotten on a time read a microsecond before the newest bucket")
	}
}

// Accepted attempts counted without the lock, from many goroutines at
// once and beside rejections counted with it, are all in the window.
func TestThrottleCountsConcurrentAttemptsWithoutLoss(t *testing.T) {
	th := New(DefaultRatio, DefaultWindow)
	clk := newFakeClockAt(fixedStart)
	now := clk.Now()
	th.Record(now, true, true) // opens the bucket: the rest take the path without the lock
	const goroutines, each = 8, 5000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				th.Record(now, i%2 == 0, g != 0 || i%100 != 0) // goroutine 0 rejects one in a hundred
			}
		}()
	}
	wg.Wait()
	th.mu.Lock()
	w := th.windowLocked()
	th.mu.Unlock()
	want := throttleCounts{calls: 1 + goroutines*each/2, requests: 1 + goroutines*each, rejects: each / 100}
	want.accepts = want.requests - want.rejects
	if w != want {
		t.Errorf("window counts %+v, want %+v", w, want)
	}
}
