package retryfuse

import (
	"math"
	"sync"
	"time"
)

// latencies is a small histogram of a scope's attempt latencies (the time
// to response headers), for the hedge delay: logarithmic buckets, a
// quarter of an octave wide, from 50µs up to about a minute. It weighs
// recent observations most: once it holds latencyWindow of them, every
// count is halved.
type latencies struct {
	mu      sync.Mutex
	buckets [latencyBuckets]uint32
	n       uint32
}

const (
	latencyBuckets = 84 // the last, bound 50µs · 2^(83/4) ≈ 88s, takes everything above 74s
	latencyBase    = 50 * time.Microsecond
	latencyWindow  = 1024
	// latencyMinimum is how many observations a quantile needs.
	latencyMinimum = 20
)

// bucketOf returns the bucket of d: the smallest i with
// d <= latencyBase·2^(i/4).
func bucketOf(d time.Duration) int {
	if d <= latencyBase {
		return 0
	}
	i := int(math.Ceil(4 * math.Log2(float64(d)/float64(latencyBase))))
	return min(i, latencyBuckets-1)
}

// upperBound is the longest latency bucket i holds.
func upperBound(i int) time.Duration {
	return time.Duration(float64(latencyBase) * math.Exp2(float64(i)/4))
}

// observe adds one latency.
func (l *latencies) observe(d time.Duration) {
	i := bucketOf(d)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets[i]++
	l.n++
	if l.n >= latencyWindow {
		l.n = 0
		for j := range l.buckets {
			l.buckets[j] /= 2
			l.n += l.buckets[j]
		}
	}
}

// quantile returns the upper bound of the bucket that holds quantile q,
// and false while there are fewer than latencyMinimum observations.
func (l *latencies) quantile(q float64) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n < latencyMinimum {
		return 0, false
	}
	// The rank never reaches the largest observation: one outlier among
	// few observations does not make the estimate.
	rank := min(uint32(math.Ceil(q*float64(l.n))), l.n-1)
	var seen uint32
	for i, c := range l.buckets {
		seen += c
		if seen >= rank && c > 0 {
			return upperBound(i), true
		}
	}
	return upperBound(latencyBuckets - 1), true
}
