// Package backoff works out the wait before a retry from its inputs
// alone: capped exponential backoff with full jitter, and the server's
// Retry-After, parsed in both its forms, bounded, and combined with the
// jitter under the cap. The time and the randomness are arguments; nothing
// here reads a clock or holds state.
package backoff

import "time"

// Ceiling is the exponential ceiling before attempt number retry
// (1 for the first retry): initial·2^(retry-1), capped at max.
func Ceiling(initial, max time.Duration, retry int) time.Duration {
	d := initial
	for i := 1; i < retry; i++ {
		if d >= max/2 {
			return max
		}
		d *= 2
	}
	if d > max {
		return max
	}
	return d
}

// FullJitter draws a delay uniformly from [0, ceiling) ("full jitter"), so
// that clients that failed together do not retry together. randN returns a
// uniform int64 in [0, n).
func FullJitter(ceiling time.Duration, randN func(int64) int64) time.Duration {
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(randN(int64(ceiling)))
}
