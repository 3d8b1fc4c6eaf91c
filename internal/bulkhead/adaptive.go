package bulkhead

import (
	"math"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse/internal/latency"
)

// This file is the limit a scope learns (LoadPolicy.Adaptive): the attempts
// in flight that the dependency takes without queueing, between a floor
// and a ceiling. The bulkhead (bulkhead.go) enforces it; this decides it.
//
// It is written here rather than taken from a library: the core depends
// on go-cleanhttp and golang.org/x only, and none there learns a limit.
// It borrows from TCP (slow start, then additive increase), Vegas and
// Netflix's concurrency-limits (the limit follows the latency's rise over
// its unloaded level), and AIMD, and differs where the workloads of
// BENCHMARKS.md showed it must:
//
//   - Queueing is read in the low tail. A FIFO queue in front of the
//     dependency delays every request alike, so the fastest tenth of a
//     window's answers (its p10) rises with the queue, while noise
//     spreads the answers but leaves the fast ones fast. The latency
//     without queueing is the lowest p10 of the recent windows. A median
//     against the minimum (Vegas) reads noise as queueing and locks the
//     limit at its floor; an average against a moving average (Gradient2)
//     forgets the unloaded latency during a long overload and drifts up.
//   - It starts low and doubles each window while the p10 stays near that
//     level (TCP's slow start): a limit that starts above the dependency's
//     capacity meets a queue in its first window, and would take the
//     queued latency for the unloaded one. The first cut ends the
//     doubling; after it, the limit grows by one a window, or by its
//     square root while even the median answer shows no queue.
//   - With the p10 within growTolerance of the unloaded latency, it
//     grows (while in use); up to cutTolerance it holds; beyond, it is
//     cut in proportion, to where the p10 would be growTolerance again.
//   - A cut that does not bring the p10 down (the next window's is still
//     above cutHelped of it) shows that the latency is not this client's
//     queue: noise, or a dependency that got slower. The unloaded latency
//     is learnt anew from there, and the limit holds: noise never locks
//     it at its floor, and a slower dependency keeps the limit that
//     keeps its workers busy.
//   - Overload signals (429, 503, a timeout, a connection lost) cut it by
//     a tenth, but only when they come from the attempts sent with more in
//     flight than those answered: a dependency that sheds or times out
//     load says so, while one that refuses a rate (a 429 of a quota,
//     whatever the concurrency) is the throttle's to answer (throttle.go),
//     and cutting on it would drive the limit to its floor for nothing. A
//     window without answers holds the limit: a dependency that answers
//     nothing is down, which the breaker and the throttle answer, and the
//     limit is kept for its return.
//   - A limit not in use (less than half of it in flight at the peak of a
//     window) neither grows nor shrinks: a latency that rises while little
//     is sent is not this client's queue.
//   - At its floor, it starts over: it doubles again from there (and the
//     bulkhead ramps admission up, slowstart.go).
//
// It decides once per window: at least adaptiveMinWindow and twice the
// unloaded latency (while doubling, a fifth of that and three unloaded
// latencies), with at least adaptiveMinSamples latencies of attempts sent
// once the window had run for the last window's median (one sent before
// tells of the limit before); or adaptiveMaxWindow (ten times that
// median) with any latency, or twice that with any outcome. A clock that
// went back by more than adaptiveMaxWindow starts a new window.

// The learnt limit's defaults: its floor without a MinInFlight, its
// ceiling without a MaxInFlight, and where it starts.
const (
	DefaultFloor   = 2
	DefaultCeiling = 1000
	initialLimit   = 4
)

// The learnt limit's constants. None is a setting: the floor and the
// ceiling are (MinInFlight, MaxInFlight).
const (
	growTolerance      = 1.1
	cutTolerance       = 1.2
	latencySlack       = 500 * time.Microsecond // queueing below it is not worth a limit
	overloadCut        = 0.9
	adaptiveMinWindow  = 100 * time.Millisecond
	adaptiveMaxWindow  = time.Second
	adaptiveMinSamples = 10
	adaptiveMemory     = 64  // windows whose p10 the unloaded latency is the lowest of
	cutHelped          = 0.9 // a cut helped when the next p10 is below this share of the last
	// The window's histogram: eighth-octave buckets from 50µs up to
	// about 90s (the last takes everything above).
	adaptiveBuckets   = 168
	adaptivePerOctave = 8
)

// The reasons a learnt limit changes (Change.Why, reported as
// PolicyInfo.Why).
const (
	whyLatency  = "latency"
	whyOverload = "overload"
	whyGrowth   = "growth"
)

// Learnt is a scope's learnt limit. This type is concurrency safe.
type Learnt struct {
	mu             sync.Mutex
	floor, ceiling float64
	limit          float64
	threshold      float64 // below it, the limit doubles (TCP's ssthresh)

	// The window being gathered.
	began    time.Time
	hist     [adaptiveBuckets]uint32 // the latencies of the answers
	n        uint32
	peak     int // the most attempts in flight at once
	ok, shed int // answers, and overload signals
	okLoad   int // the attempts in flight as each answer went out, summed
	shedLoad int // ... and as each overload signal did

	lows     [adaptiveMemory]time.Duration // the p10 of the last windows, a ring
	nlows    int
	unloaded time.Duration // the lowest of lows
	settle   time.Duration // the median of the last window
	cutRatio float64       // the p10's ratio that made the last window cut, else 0
}

// NewLearnt returns a learnt limit between floor and ceiling, starting at
// initialLimit (within them), doubling.
func NewLearnt(floor, ceiling int) *Learnt {
	return &Learnt{
		floor:     float64(floor),
		ceiling:   float64(ceiling),
		limit:     float64(min(max(initialLimit, floor), ceiling)),
		threshold: float64(ceiling),
	}
}

// Change is a change of the learnt limit, to report.
type Change struct {
	From, To  int
	Why       string // whyLatency, whyOverload or whyGrowth
	FromFloor bool   // it rose from its floor
}

// Current is the limit now.
func (l *Learnt) Current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// UnloadedLatency is the scope's latency without queueing: the lowest
// p10 of the recent windows; zero before the first window has decided.
// doubling says that the limit has not met a queue since it started, or
// since it was at its floor.
func (l *Learnt) UnloadedLatency() (unloaded time.Duration, doubling bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unloaded, l.limit < l.threshold
}

// Observe takes the outcome of one attempt that went out at sent with
// inFlight attempts in flight (its own included) and ended at now: an
// answer (shed false), or an overload signal (shed true). An answer's
// latency counts when it went out once the window had run for an
// unloaded latency: one sent before tells of the limit before, and the
// fastest of a window would otherwise be those sent as a rise began,
// before the queue it builds. At the end of a window it decides the limit,
// and returns the change, if any.
func (l *Learnt) Observe(now, sent time.Time, inFlight int, shed bool) (Change, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.began.IsZero() || now.Before(l.began.Add(-adaptiveMaxWindow)) {
		// The first attempt, or a clock that went back (a time read just
		// before another goroutine's began the window is not that).
		l.resetWindow(now)
	}
	l.peak = max(l.peak, inFlight)
	switch {
	case shed:
		l.shed++
		l.shedLoad += inFlight
	default:
		l.ok++
		l.okLoad += inFlight
		// A latency counts when the attempt went out once the window had
		// run for the last window's median latency (see the file's
		// comment), and is no latency when it ended before it went out
		// (a clock that went back).
		if !sent.Before(l.began.Add(l.settle)) && !now.Before(sent) {
			l.hist[adaptiveBucketOf(now.Sub(sent))]++
			l.n++
		}
	}
	el, minWindow := now.Sub(l.began), max(adaptiveMinWindow, 2*l.unloaded)
	if l.limit < l.threshold {
		minWindow = max(adaptiveMinWindow/5, 3*l.unloaded) // doubling: a queue shows within a few latencies
	}
	switch {
	case el >= minWindow && int(l.n) >= adaptiveMinSamples:
	case el >= max(adaptiveMaxWindow, 10*l.settle) && (l.n > 0 || el >= 2*adaptiveMaxWindow && l.ok+l.shed > 0):
	default:
		return Change{}, false
	}
	old, atFloor := int(l.limit), l.atFloor()
	why := l.decide()
	l.resetWindow(now)
	if now := int(l.limit); now != old {
		return Change{From: old, To: now, Why: why, FromFloor: atFloor && now > old}, true
	}
	return Change{}, false
}

// decide sets the limit from the window, and returns why it moved.
// l.mu is held.
func (l *Learnt) decide() string {
	var low time.Duration
	if l.n > 0 {
		low = l.quantile(0.1)
		l.settle = l.quantile(0.5)
		l.remember(low)
	}
	cutBefore := l.cutRatio
	l.cutRatio = 0
	if 2*l.peak < int(l.limit) {
		return "" // not in use
	}
	// Overload signals from the attempts sent with more in flight than
	// those answered. Without answers to compare with, the dependency is
	// down rather than loaded by this client: the breaker and the
	// throttle answer that, and the limit is kept for its return.
	if l.shed > 0 && l.ok > 0 && l.shedLoad*l.ok > l.okLoad*l.shed {
		l.cut(l.limit * overloadCut)
		return whyOverload
	}
	if l.n == 0 {
		return ""
	}
	ratio := float64(low) / float64(l.unloaded+latencySlack)
	switch {
	case ratio > cutTolerance && cutBefore > 0 && ratio >= cutBefore*cutHelped:
		// The last cut did not bring the latency down: it is not this
		// client's queue (noise, or a dependency that got slower), and
		// this is the latency to measure queueing from now on.
		l.nlows = 0
		l.remember(low)
		return ""
	case ratio > cutTolerance:
		l.cut(l.limit * growTolerance / ratio)
		l.cutRatio = ratio
		return whyLatency
	case ratio > growTolerance || l.shed > 0:
		return ""
	case l.limit < l.threshold:
		l.set(2 * l.limit)
	case l.settle <= l.unloaded:
		// Even the median shows no queue: far from the dependency's
		// capacity, grow faster.
		l.set(l.limit + math.Sqrt(l.limit))
	default:
		l.set(l.limit + 1)
	}
	return whyGrowth
}

// remember adds a window's p10 to the memory, and finds the unloaded
// latency in it anew. l.mu is held.
func (l *Learnt) remember(low time.Duration) {
	l.lows[l.nlows%adaptiveMemory] = low
	l.nlows++
	l.unloaded = low
	for _, d := range l.lows[:min(l.nlows, adaptiveMemory)] {
		l.unloaded = min(l.unloaded, d)
	}
}

// cut lowers the limit to v, and ends the doubling there; at the floor,
// doubling starts over.
func (l *Learnt) cut(v float64) {
	l.set(v)
	l.threshold = l.limit
	if l.atFloor() {
		l.threshold = l.ceiling
	}
}

// atFloor reports whether the limit is at its floor, as it is reported
// (whole attempts). l.mu is held.
func (l *Learnt) atFloor() bool { return int(l.limit) <= int(l.floor) }

// set sets the limit to v within the floor and the ceiling.
func (l *Learnt) set(v float64) { l.limit = min(max(v, l.floor), l.ceiling) }

// resetWindow starts a window at now. l.mu is held.
func (l *Learnt) resetWindow(now time.Time) {
	l.began = now
	l.hist = [adaptiveBuckets]uint32{}
	l.n, l.peak, l.ok, l.shed, l.okLoad, l.shedLoad = 0, 0, 0, 0, 0, 0
}

// quantile returns the upper bound of the bucket of the window's
// latencies that holds quantile q. l.mu is held, and l.n > 0.
func (l *Learnt) quantile(q float64) time.Duration {
	rank := max(1, uint32(math.Ceil(q*float64(l.n))))
	var seen uint32
	for i, c := range l.hist {
		if seen += c; seen >= rank {
			return adaptiveUpperBound(i)
		}
	}
	return adaptiveUpperBound(adaptiveBuckets - 1)
}

// adaptiveBucketOf returns the bucket of d: the smallest i with
// d <= latency.Base·2^(i/8); a negative d (a clock that went back) is 0.
func adaptiveBucketOf(d time.Duration) int {
	if d <= latency.Base {
		return 0
	}
	i := int(math.Ceil(adaptivePerOctave * math.Log2(float64(d)/float64(latency.Base))))
	return min(i, adaptiveBuckets-1)
}

// adaptiveUpperBound is the longest latency bucket i holds.
func adaptiveUpperBound(i int) time.Duration {
	return time.Duration(float64(latency.Base) * math.Exp2(float64(i)/adaptivePerOctave))
}
