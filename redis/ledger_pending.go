package retryfuseredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the queue of the ledger's steps that Redis could not take
// (Complete, Release, Uncertain, and the cancellation of a failed Begin's
// claim), or that were not sent because the caller's context had ended,
// retried in the background by one goroutine, which runs only while the
// queue is not empty, and flushed by Close.

type ledgerOp uint8

const (
	opComplete ledgerOp = iota
	opRelease
	opUncertain
	opCancel
)

func (o ledgerOp) String() string {
	return [...]string{"complete", "release", "uncertain", "cancel"}[o]
}

// method returns the name of the Ledger method of the step.
func (o ledgerOp) method() string {
	return [...]string{"Complete", "Release", "Uncertain", "cancel"}[o]
}

// The backoff between rounds of retries while Redis does not answer.
const (
	pendingMinBackoff = 10 * time.Millisecond
	pendingMaxBackoff = time.Second
)

type pendingID struct{ key, token string }

type pendingStep struct {
	id       pendingID
	op       ledgerOp
	stored   []byte
	deadline time.Time // the key's TTL has passed by then: give up
	// unsent: the step was queued without being sent, its caller's
	// context having ended. Redis is not known to be down: the step is
	// tried at once, before the others.
	unsent bool
}

// pending is the queue. This type is concurrency safe.
type pending struct {
	l   *Ledger
	max int
	// The backoff between rounds that fail: pendingMinBackoff doubling up
	// to pendingMaxBackoff (fields, for the tests).
	minBackoff, maxBackoff time.Duration
	wake                   chan struct{} // cuts a backoff short: an unsent step came

	mu      sync.Mutex // guards the fields below
	steps   map[pendingID]*pendingStep
	order   []pendingID       // oldest first; may name steps since done
	cancels map[string]string // key → token of a failed Begin still to cancel
	running bool              // the goroutine is running
	stop    chan struct{}     // closed by Close
	done    chan struct{}     // closed when the goroutine ends
	closed  bool
}

func (p *pending) init(l *Ledger, max int) {
	p.l, p.max = l, orDefaultInt(max, defaultLedgerMaxPending)
	p.minBackoff, p.maxBackoff = pendingMinBackoff, pendingMaxBackoff
	p.wake = make(chan struct{}, 1)
	p.steps = make(map[pendingID]*pendingStep)
	p.cancels = make(map[string]string)
	p.stop = make(chan struct{})
}

func orDefaultInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func (p *pending) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// cancelled returns the token of a failed Begin on key still to be
// cancelled, or "": a Begin may take over its claim.
func (p *pending) cancelled(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cancels[key]
}

// add queues a step that failed with err (unsent: not sent at all, its
// caller's context having ended), replacing one queued for the same claim,
// and starts the goroutine if it is not running; an unsent step cuts its
// backoff short. It reports false, having reported the step as
// unrecorded, when the queue is full or closed.
func (p *pending) add(key, token string, op ledgerOp, stored []byte, err error, unsent bool) bool {
	id := pendingID{key, token}
	p.mu.Lock()
	if p.closed || len(p.steps) >= p.max && p.steps[id] == nil {
		closed := p.closed
		p.mu.Unlock()
		why := fmt.Sprintf("queue full (%d)", p.max)
		if closed {
			why = "ledger closed"
		}
		p.l.unrecorded(key, op, fmt.Errorf("%w; not retried: %s", err, why))
		return false
	}
	if p.steps[id] == nil {
		p.order = append(p.order, id)
	}
	p.steps[id] = &pendingStep{id: id, op: op, stored: stored, deadline: time.Now().Add(addSat(p.l.flight, p.l.ttl)), unsent: unsent}
	if op == opCancel {
		p.cancels[key] = token
	}
	if !p.running {
		p.running = true
		p.done = make(chan struct{})
		go p.work(p.done)
	} else if unsent {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
	return true
}

// remove drops a step once it has been recorded or given up.
func (p *pending) remove(s *pendingStep) {
	p.mu.Lock()
	if p.steps[s.id] == s {
		delete(p.steps, s.id)
		if s.op == opCancel && p.cancels[s.id.key] == s.id.token {
			delete(p.cancels, s.id.key)
		}
	}
	p.mu.Unlock()
}

// snapshot returns the queued steps, the unsent ones first, then oldest
// first, compacting the order.
func (p *pending) snapshot() []*pendingStep {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*pendingStep, 0, len(p.steps))
	order := p.order[:0]
	seen := make(map[pendingID]bool, len(p.steps))
	unsent := 0
	for _, id := range p.order {
		if s := p.steps[id]; s != nil && !seen[id] {
			seen[id] = true
			out = append(out, s)
			order = append(order, id)
			if s.unsent {
				unsent++
			}
		}
	}
	p.order = order
	if unsent > 0 {
		slices.SortStableFunc(out, func(a, b *pendingStep) int {
			switch {
			case a.unsent == b.unsent:
				return 0
			case a.unsent:
				return -1
			}
			return 1
		})
	}
	return out
}

// work retries the queued steps until the queue is empty or Close stops
// it: a round over every step, then, if one failed, a backoff that doubles
// up to maxBackoff, cut short when an unsent step is queued.
func (p *pending) work(done chan struct{}) {
	defer close(done)
	backoff := p.minBackoff
	for {
		if p.round(context.Background(), p.stop) {
			p.mu.Lock()
			if len(p.steps) == 0 {
				p.running = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			backoff = p.minBackoff
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-p.wake:
			t.Stop()
			continue
		case <-t.C:
		}
		backoff = min(2*backoff, p.maxBackoff)
	}
}

// round tries each queued step once, stopping at the first that Redis
// does not take, or when stop is closed. It reports whether every step
// was dealt with.
func (p *pending) round(ctx context.Context, stop <-chan struct{}) bool {
	for _, s := range p.snapshot() {
		select {
		case <-stop:
			return false
		default:
		}
		if ctx.Err() != nil {
			return false
		}
		if !p.try(ctx, s) {
			return false
		}
	}
	return true
}

// try runs one step. It reports false when Redis did not take it and the
// step is still queued.
func (p *pending) try(ctx context.Context, s *pendingStep) bool {
	if time.Now().After(s.deadline) {
		p.remove(s)
		p.l.unrecorded(s.id.key, s.op, fmt.Errorf("%w: not recorded within the key's TTL", ErrUnavailable))
		return true
	}
	err := p.l.endOnce(ctx, s.id.key, s.id.token, s.op, s.stored)
	switch {
	case err == nil:
		p.remove(s)
	case errors.Is(err, ErrDataLost), errors.Is(err, ledger.ErrToken):
		// The record is gone, or has been ended otherwise: nothing to retry.
		p.remove(s)
		if s.op != opCancel {
			p.l.unrecorded(s.id.key, s.op, err)
		}
	default:
		return false
	}
	return true
}

// Close flushes the steps still waiting to be recorded in Redis, within
// ctx's deadline, and stops the goroutine that retries them. Each step it
// could not flush is reported to OnUnrecorded, and the error, wrapping
// ErrUnavailable, counts them. After Close, Begin fails with an error
// wrapping ErrClosed, and a Complete, Release or Uncertain that Redis
// does not take is not retried. Close does not close the Redis client.
// Calling it again does nothing.
func (l *Ledger) Close(ctx context.Context) error {
	p := &l.pending
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stop)
	running, done := p.running, p.done
	p.mu.Unlock()
	if running {
		<-done
	}
	backoff := p.minBackoff
	for !p.round(ctx, nil) {
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		backoff = min(2*backoff, p.maxBackoff)
	}
	left := p.snapshot()
	if len(left) == 0 {
		return nil
	}
	for _, s := range left {
		p.remove(s)
		l.unrecorded(s.id.key, s.op, fmt.Errorf("%w: not flushed before Close's deadline: %w", ErrUnavailable, context.Cause(ctx)))
	}
	return fmt.Errorf("%w: %d ledger steps not recorded (first: %s of key %q)", ErrUnavailable, len(left), left[0].op, left[0].id.key)
}

// unrecorded reports a step given up.
func (l *Ledger) unrecorded(key string, op ledgerOp, err error) {
	if l.onUnrecorded != nil {
		l.onUnrecorded(key, fmt.Errorf("%s: %w", op, err))
	}
}
