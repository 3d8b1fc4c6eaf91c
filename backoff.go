package retryfuse

import "time"

// backoffCeiling is the exponential ceiling before attempt number retry
// (1 for the first retry): initial·2^(retry-1), capped at max.
func backoffCeiling(initial, max time.Duration, retry int) time.Duration {
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

// fullJitter draws a delay uniformly from [0, ceiling) ("full jitter"), so
// that clients that failed together do not retry together. randN returns a
// uniform int64 in [0, n).
func fullJitter(ceiling time.Duration, randN func(int64) int64) time.Duration {
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(randN(int64(ceiling)))
}
