package retryfuseredis

import (
	"context"
	"math"
	"time"
)

// This file holds the sync of a budget with Redis: the goroutine that runs
// it once per interval, or with backoff while Redis is down, and the lease.

// maxProbeBackoff bounds the wait between two probes of a Redis that does
// not answer (or the sync interval, when longer).
const maxProbeBackoff = time.Second

// start starts the sync goroutine; close stops it.
func (s *shared) start() {
	s.done = make(chan struct{})
	go s.run()
}

// run syncs once per interval, sooner when a retry found no lease left
// (but not within half an interval of the last sync), and with doubling
// backoff while Redis is down.
func (s *shared) run() {
	defer close(s.done)
	timer := time.NewTimer(s.interval)
	defer timer.Stop()
	last := time.Now()
	next := last.Add(s.interval)
	var backoff time.Duration
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
			if backoff == 0 {
				if early := last.Add(s.interval / 2); early.Before(next) {
					next = early
					timer.Reset(time.Until(next))
				}
			}
			continue
		case <-timer.C:
		}
		last = time.Now()
		if err := s.sync(context.Background(), false); err != nil {
			backoff = min(max(2*backoff, s.interval), max(maxProbeBackoff, s.interval))
			next = last.Add(backoff)
		} else {
			backoff = 0
			next = last.Add(s.interval)
		}
		timer.Reset(time.Until(next))
	}
}

// close stops the sync goroutine, then deposits the requests recorded
// since the last sync, charges the retries granted on credit and gives
// back the unused lease, within ctx and the timeout; with ctx already
// ended it sends nothing (ErrContextEnded when there was something to
// send). It is idempotent: only the first call syncs.
func (s *shared) close(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		if s.done != nil {
			<-s.done // a sync under way ends within the timeout
		}
		err = s.sync(ctx, true)
		s.mu.Lock()
		s.state.closed = true
		s.mu.Unlock()
	})
	return err
}

// idleAfter is how many sync intervals without a retry asked for make a
// process give its lease back, for other processes to use.
const idleAfter = 2

// sync runs one script call: it deposits the requests recorded since the
// last, charges the retries granted on credit, gives back a lease that is
// half-way to its expiry (or every lease when final, or when the process
// has asked for no retry for idleAfter intervals), and tops the lease up to the local rate of retries
// asked for. With nothing to send and Redis up, it sends nothing. A
// failure puts the budget in its fail-safe until a later sync succeeds.
func (s *shared) sync(ctx context.Context, final bool) error {
	n := s.pending.Swap(0)
	now := s.now()
	s.mu.Lock()
	credit := s.credit
	s.credit = 0
	var back, backTick int64
	if s.held > 0 && (final || now.Sub(s.askedAt) >= idleAfter*s.interval || s.leaseTTL > 0 && now.Sub(s.leasedAt) >= s.leaseTTL/2) {
		back, backTick = s.held, s.tick
		s.held = 0
	}
	var want int64
	if !final && s.asks > 0 {
		if target := s.target(now); s.held <= target/2 {
			want = target - s.held
		}
	}
	down := s.state.down
	s.mu.Unlock()
	if n == 0 && credit == 0 && back == 0 && want == 0 && !down {
		return nil
	}
	if final && ctx.Err() != nil {
		// Close, with something to send and no time to send it: the
		// requests not deposited are not counted, the retries granted on
		// credit not charged, and a lease not given back is lost to the
		// other processes until it expires (a token bucket's, until the
		// bucket refills).
		e := contextEnded(ctx, "Close")
		e.budget = s.key
		return e
	}

	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	leased, tick, err := s.kind.sync(ctx, s.client, s.key, n, credit, back, backTick, want)
	cancel()

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// The deposits and the lease given back are lost to the shared
		// budget, which then grants fewer retries, never more; the credit
		// is still owed.
		s.credit += credit
		if !s.state.down {
			s.state.down, s.state.downReported, s.state.cause = true, false, err
			s.held = 0 // the fail-safe answers now, not a lease
		}
		return err
	}
	if s.state.down {
		s.state.upToReport = s.state.downReported
		s.state.down, s.state.downReported, s.state.cause = false, false, nil
	}
	if leased > 0 {
		if s.held == 0 {
			s.tick, s.leasedAt = tick, now
		}
		s.held += leased
		s.asks, s.sinceAt = 0, now
	}
	return nil
}

// target is the lease for the local rate of retries asked for: enough for
// two intervals, between 1 and maxLease.
func (s *shared) target(now time.Time) int64 {
	elapsed := s.interval
	if !s.sinceAt.IsZero() {
		elapsed = max(elapsed, now.Sub(s.sinceAt))
	}
	want := math.Ceil(float64(s.asks) * float64(2*s.interval) / float64(elapsed))
	return int64(min(max(want, 1), float64(s.maxLease)))
}
