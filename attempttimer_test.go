package retryfuse

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAttemptTimerCancelsOnlyTheAttemptItStruck starts and stops timers
// whose timeouts race their stops, as attempts' do, and checks each
// attempt's cancel: an attempt whose timer was stopped in time is never
// cancelled, even when its pooled timer is re-armed for a later attempt
// that times out; an attempt whose timer struck is cancelled once.
func TestAttemptTimerCancelsOnlyTheAttemptItStruck(t *testing.T) {
	const n = 2000
	var cancels [n]atomic.Int32
	stopped := make([]bool, n)
	for i := range n {
		d := time.Duration(i%7) * 20 * time.Microsecond // 0 to 120µs: some strike before the stop
		at := startAttemptTimer(d, func() { cancels[i].Add(1) })
		if i%3 == 0 {
			time.Sleep(time.Duration(i%5) * 10 * time.Microsecond)
		}
		stopped[i] = at.stop()
	}
	struck := 0
	for i := range n {
		if stopped[i] {
			continue
		}
		struck++
		require.Eventually(t, func() bool { return cancels[i].Load() == 1 }, 10*time.Second, time.Millisecond,
			"attempt %d: its timer struck, but it was not cancelled", i)
	}
	time.Sleep(5 * time.Millisecond) // strikes still on their way would show now
	for i := range n {
		want := int32(0)
		if !stopped[i] {
			want = 1
		}
		assert.Equal(t, want, cancels[i].Load(), "attempt %d (stopped in time: %v)", i, stopped[i])
	}
	assert.Positive(t, struck, "no timer struck before its stop: the test did not race them")
	assert.Less(t, struck, n, "every timer struck: the test did not re-arm a pooled timer")
}

// BenchmarkAttemptTimer is the cost of arming and stopping one attempt's
// timer before it strikes, as a successful attempt with AttemptTimeout
// does.
func BenchmarkAttemptTimer(b *testing.B) {
	cancel := func() {}
	b.Run("pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			startAttemptTimer(300*time.Millisecond, cancel).stop()
		}
	})
	b.Run("AfterFunc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			time.AfterFunc(300*time.Millisecond, cancel).Stop()
		}
	})
}
