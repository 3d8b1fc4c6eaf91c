// Package latency is the small histogram of a scope's attempt latencies
// (the time to response headers) that derives the hedge delay, and the
// bounds of its buckets, which the learnt limit's finer histogram
// (internal/bulkhead) starts from too.
package latency

import (
	"math"
	"sync"
	"time"
)

// Histogram is a small histogram of a scope's attempt latencies, for the
// hedge delay: logarithmic buckets, a quarter of an octave wide, from 50µs
// up to about a minute. It weighs recent observations most: once it holds
// window (1024) of them, every count is halved. The zero value is an empty
// histogram. This type is concurrency safe.
type Histogram struct {
	mu      sync.Mutex
	buckets [numBuckets]uint32
	n       uint32
}

const (
	// numBuckets is the number of buckets: the last, bound 50µs · 2^(83/4) ≈
	// 88s, takes everything above 74s.
	numBuckets = 84
	// Base is the bound of the first bucket: every latency at or below it.
	Base = 50 * time.Microsecond
	// window is how many observations the histogram holds before every
	// count is halved.
	window = 1024
	// minimum is how many observations a quantile needs.
	minimum = 20
)

// bucketOf returns the bucket of d: the smallest i with
// d <= Base·2^(i/4).
func bucketOf(d time.Duration) int {
	if d <= Base {
		return 0
	}
	i := int(math.Ceil(4 * math.Log2(float64(d)/float64(Base))))
	return min(i, numBuckets-1)
}

// upperBound is the longest latency bucket i holds.
func upperBound(i int) time.Duration {
	return time.Duration(float64(Base) * math.Exp2(float64(i)/4))
}

// Observe adds one latency.
func (l *Histogram) Observe(d time.Duration) {
	i := bucketOf(d)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets[i]++
	l.n++
	if l.n >= window {
		l.n = 0
		for j := range l.buckets {
			l.buckets[j] /= 2
			l.n += l.buckets[j]
		}
	}
}

// Quantile returns the upper bound of the bucket that holds quantile q,
// and false while there are fewer than minimum observations.
func (l *Histogram) Quantile(q float64) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n < minimum {
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
	return upperBound(numBuckets - 1), true
}
