package budget

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// This file owns the Ratio. The Budget interface, and the habits the
// budgets share (one mutex, lazy update, time passed in), are in budget.go and token_bucket.go.

// ratioBuckets is the number of time buckets a Ratio divides its
// Window into. A deposit expires whole with its bucket, so it lives between
// (1-1/ratioBuckets)·Window and Window.
const ratioBuckets = 10

// Ratio allows retries in proportion to requests, in the manner of
// Finagle's RetryBudget and gRPC's retry throttling. It is the recommended
// budget. This type is concurrency safe.
//
// Each request deposits Ratio of a retry, and the deposit lives for Window.
// Each retry withdraws one whole retry, which is likewise counted for Window.
// On top of the deposits a fixed reserve of MinPerSecond·Window (in seconds)
// retries per window lets a service with little traffic retry at all. With
// Q requests recorded and G retries granted within the last Window, a retry
// is granted when the balance covers it:
//
//	G + 1 ≤ Ratio·Q + MinPerSecond·Window
//
// so over every window G ≤ Ratio·Q + reserve, and the attempts sent, first
// attempts included, are at most (1+Ratio)·Q + reserve. The bound holds for
// the total, however many callers share the budget and however many retries
// each would like: when a dependency fails for everyone, retries add at most
// Ratio (10% by default) to its load, plus the reserve. A TokenBucket, by
// contrast, grants a fixed rate: too few retries for a busy service, too many
// for a quiet one. With the defaults, 100 callers failing at the same instant
// send at most 100 + 10 + 10 = 120 attempts.
//
// The window slides in steps of Window/10: a ring of ten buckets holds the
// counts, and buckets whose time has passed are emptied lazily when the
// budget is next used. Memory is constant, and there is no goroutine. A
// request's deposit into the newest bucket takes no lock (one atomic
// addition); a retry, a new bucket and Snapshot take it.
//
// The zero value is an empty Ratio with the default configuration
// (see RatioConfig).
type Ratio struct {
	mu sync.Mutex
	// quick holds the deposits made without the lock into the newest
	// bucket, not yet counted in the ring: that bucket's tick plus one
	// above ratioQuickBits, their number below. Zero when none may be
	// made: before the first use, and while the lock's holder moves the
	// head (see lockAt). origin and width are set before it is first
	// stored, and never change after.
	quick   atomic.Uint64
	ratio   float64
	reserve float64
	width   time.Duration // time span of one bucket; zero until a zero Ratio is first used
	started bool
	shut    bool      // the holder of mu has stopped deposits without it; see lockAt
	origin  time.Time // time of the first call: bucket ticks count from here
	head    int64     // tick of the newest bucket
	next    time.Time // when the tick after head begins
	winReq  uint64    // requests in the ring
	winRet  uint64    // retries in the ring
	// Totals since creation.
	requests uint64
	retries  uint64
	refused  uint64
	ring     [ratioBuckets]ratioBucket // last: the fields above are read by every call
}

type ratioBucket struct {
	requests uint64
	retries  uint64
}

// RatioConfig configures a Ratio. The zero value is valid: 10%
// retries, at least one retry per second, over a 10-second window.
type RatioConfig struct {
	// Ratio is the retry credit each request deposits, in retries; zero
	// means 0.1. Must not be negative.
	Ratio float64
	// MinPerSecond sets the reserve, MinPerSecond·Window retries per window,
	// granted whatever the traffic; zero means 1. A negative value means no
	// reserve: retries then come from deposits alone, and a lone request
	// cannot retry until 1/Ratio requests have been recorded in the window
	// (the convention of net.Dialer.KeepAlive, where negative turns a
	// feature off).
	MinPerSecond float64
	// Window is how long a request's deposit (and a retry's withdrawal)
	// counts; zero means 10 seconds. It must be at least 10ns.
	Window time.Duration
}

// NewRatio returns an empty Ratio. A negative, NaN or infinite
// Ratio, a NaN or infinite MinPerSecond, or a negative or too short Window
// gives an error wrapping ErrInvalidPolicy that names the field.
func NewRatio(cfg RatioConfig) (*Ratio, error) {
	if err := sentinel.Finite("RatioConfig.Ratio", cfg.Ratio); err != nil {
		return nil, err
	}
	// A negative MinPerSecond is allowed (no reserve), so only its size is checked.
	if err := sentinel.Finite("RatioConfig.MinPerSecond", math.Abs(cfg.MinPerSecond)); err != nil {
		return nil, err
	}
	switch {
	case cfg.Window < 0:
		return nil, sentinel.InvalidPolicy("RatioConfig.Window", "is negative")
	case cfg.Window > 0 && cfg.Window < ratioBuckets:
		return nil, sentinel.InvalidPolicy("RatioConfig.Window", "is shorter than 10ns, the least that divides into 10 buckets")
	}
	window := orDefault(cfg.Window, defaultRatioWindow)
	minPerSecond := max(0, orDefault(cfg.MinPerSecond, defaultRatioMinPerSecond)) // negative: no reserve
	return &Ratio{
		ratio:   orDefault(cfg.Ratio, defaultRatio),
		reserve: minPerSecond * window.Seconds(),
		width:   window / ratioBuckets,
	}, nil
}

// The defaults of RatioConfig.
const (
	defaultRatio             = 0.1
	defaultRatioMinPerSecond = 1.0
	defaultRatioWindow       = 10 * time.Second
)

// initLocked gives a zero Ratio the default configuration. b.mu is
// held.
func (b *Ratio) initLocked() {
	if b.width == 0 {
		b.ratio = defaultRatio
		b.reserve = defaultRatioMinPerSecond * defaultRatioWindow.Seconds()
		b.width = defaultRatioWindow / ratioBuckets
	}
}

// ratioQuickBits is the width of the count in Ratio.quick. A deposit
// takes the lock once the count passes half of it (eight million in one
// bucket), so that callers adding at once cannot carry into the tick.
const (
	ratioQuickBits = 24
	ratioQuickMask = 1<<ratioQuickBits - 1
)

// lockAt takes the lock for a use at time now, and empties the buckets
// whose time has passed. When the head moves, or fold asks, the deposits
// made without the lock are counted in the ring first, and none are made
// until unlock; else they go on into the head beside the lock's holder,
// who reads them as pending.
func (b *Ratio) lockAt(now time.Time, fold bool) {
	b.mu.Lock()
	if fold || !b.started || !now.Before(b.next) {
		// quick's tick is the head's: the head moves only under the lock,
		// after this. A count without a tick was added after the swap
		// by depositors that then took the lock themselves.
		if w := b.quick.Swap(0); w>>ratioQuickBits != 0 {
			n := w & ratioQuickMask
			b.ring[b.head%ratioBuckets].requests += n
			b.winReq += n
			b.requests += n
		}
		b.shut = true
	}
	b.advance(now)
}

// unlock lets deposits into the head bucket be made without the lock
// again, if lockAt stopped them, and releases it. The store drops any
// count added while they were stopped.
func (b *Ratio) unlock() {
	if b.shut {
		b.shut = false
		if b.head < 1<<(64-ratioQuickBits)-1 { // else every deposit takes the lock
			b.quick.Store(uint64(b.head+1) << ratioQuickBits)
		}
	}
	b.mu.Unlock()
}

// pending is the number of deposits made without the lock into the head
// and not yet counted in the ring. b.mu is held.
func (b *Ratio) pending() uint64 {
	if w := b.quick.Load(); w>>ratioQuickBits != 0 {
		return w & ratioQuickMask
	}
	return 0
}

// depositQuick counts a deposit at time now without the lock, when now
// is before the bucket after the head, and reports whether it did.
func (b *Ratio) depositQuick(now time.Time) bool {
	w := b.quick.Load()
	if w>>ratioQuickBits == 0 || w&ratioQuickMask >= ratioQuickMask/2 {
		return false
	}
	// The head takes the deposit when now is before the bucket after it,
	// as advance has it: a time before the head's own bucket (a caller
	// that read the clock before another) counts as no time passed.
	if now.Sub(b.origin)-time.Duration(w>>ratioQuickBits-1)*b.width >= b.width {
		return false
	}
	// One addition, which cannot fail as a compare-and-swap can when
	// callers meet. Should the lock have been taken since the load, the
	// count landed either in a newer head, which takes a deposit of a time
	// before its bucket just as the head did, or in no bucket (no tick),
	// and then the deposit is made under the lock.
	return b.quick.Add(1)>>ratioQuickBits != 0
}

// advance empties the buckets whose time has passed. b.mu is held.
func (b *Ratio) advance(now time.Time) {
	b.initLocked()
	if !b.started {
		b.started, b.origin, b.next = true, now, now.Add(b.width)
		return
	}
	if now.Before(b.next) {
		return // same bucket, or time went backwards: no time has passed
	}
	tick := int64(now.Sub(b.origin) / b.width)
	if tick <= b.head {
		return // Sub saturates some 292 years after the first call
	}
	if tick-b.head >= ratioBuckets {
		b.ring = [ratioBuckets]ratioBucket{}
		b.winReq, b.winRet = 0, 0
	} else {
		for t := b.head + 1; t <= tick; t++ {
			bk := &b.ring[t%ratioBuckets]
			b.winReq -= bk.requests
			b.winRet -= bk.retries
			*bk = ratioBucket{}
		}
	}
	b.head = tick
	b.next = b.origin.Add(time.Duration(tick) * b.width).Add(b.width)
}

// balance is the retry credit left in the window, with pending deposits
// made without the lock (see pending). b.mu is held.
func (b *Ratio) balance(pending uint64) float64 {
	return b.ratio*float64(b.winReq+pending) + b.reserve - float64(b.winRet)
}

// AllowRetryAt withdraws one retry at time now and reports whether the
// balance covered it.
func (b *Ratio) AllowRetryAt(now time.Time) bool {
	b.lockAt(now, false)
	defer b.unlock()
	if b.balance(b.pending()) < 1-snapEpsilon {
		b.refused++
		return false
	}
	b.ring[b.head%ratioBuckets].retries++
	b.winRet++
	b.retries++
	return true
}

// RecordRequestAt deposits one request's credit at time now: without the
// lock until now reaches the bucket after the newest.
func (b *Ratio) RecordRequestAt(now time.Time) {
	if b.depositQuick(now) {
		return
	}
	b.lockAt(now, true)
	b.ring[b.head%ratioBuckets].requests++
	b.winReq++
	b.requests++
	b.unlock()
}

// RecordRequest deposits one request's credit.
func (b *Ratio) RecordRequest(context.Context) { b.RecordRequestAt(time.Now()) }

// AllowRetry withdraws one retry, and reports whether the balance covered
// it. Its error is always nil.
func (b *Ratio) AllowRetry(context.Context) (bool, error) {
	return b.AllowRetryAt(time.Now()), nil
}

// Snapshot returns the counters and the balance now.
func (b *Ratio) Snapshot() Snapshot { return b.SnapshotAt(time.Now()) }

// SnapshotAt returns the counters and the balance at time now.
func (b *Ratio) SnapshotAt(now time.Time) Snapshot {
	b.lockAt(now, false)
	defer b.unlock()
	p := b.pending() // read once: Requests and Available agree
	return Snapshot{
		Requests:  b.requests + p,
		Retries:   b.retries,
		Refused:   b.refused,
		Available: max(0, snap(b.balance(p))),
	}
}
