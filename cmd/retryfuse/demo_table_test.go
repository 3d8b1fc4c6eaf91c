package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A loopback answer takes tens of microseconds: the table prints them,
// not a rounded 0s.
func TestDurPrintsMicrosecondsBelowAMillisecond(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{800 * time.Nanosecond, "800ns"},
		{time.Microsecond, "1µs"},
		{42*time.Microsecond + 400*time.Nanosecond, "42µs"},
		{85 * time.Microsecond, "85µs"},
		{463*time.Microsecond + 700*time.Nanosecond, "464µs"},
		{999 * time.Microsecond, "999µs"},
		{time.Millisecond, "1ms"},
		{1640 * time.Microsecond, "1.6ms"},
		{9949 * time.Microsecond, "9.9ms"},
		{24*time.Millisecond + 400*time.Microsecond, "24ms"},
		{203 * time.Millisecond, "203ms"},
		{999 * time.Millisecond, "999ms"},
		{time.Second, "1.00s"},
		{2003 * time.Millisecond, "2.00s"},
	} {
		assert.Equal(t, c.want, dur(c.d), "dur(%v)", int64(c.d))
	}
}

func TestAtPrintsNeverForZeroAndAnOffsetOtherwise(t *testing.T) {
	assert.Equal(t, "never", at(0))
	assert.Equal(t, "+85µs", at(85*time.Microsecond))
	assert.Equal(t, "+501ms", at(501*time.Millisecond))
}
