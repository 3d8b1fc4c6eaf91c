package testclock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestClockMovesOnlyWhenMoved(t *testing.T) {
	start := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	c := At(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want %v", got, start)
	}
	c.Advance(time.Minute)
	if got, want := c.Now(), start.Add(time.Minute); !got.Equal(want) {
		t.Errorf("after Advance(1m): Now() = %v, want %v", got, want)
	}
	if err := c.Sleep(context.Background(), time.Hour); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if got, want := c.Now(), start.Add(time.Hour+time.Minute); !got.Equal(want) {
		t.Errorf("after Sleep(1h): Now() = %v, want %v", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep with a done context: got %v, want context.Canceled", err)
	}
	if got, want := c.Now(), start.Add(time.Hour+time.Minute); !got.Equal(want) {
		t.Errorf("a cancelled Sleep moved the clock: Now() = %v, want %v", got, want)
	}
}
