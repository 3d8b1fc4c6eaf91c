package retryfuseredis

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the deliberate end of a quarantine: the operator's step
// once the keys that Redis lost have been reconciled, recorded on the
// markers, and how a process in quarantine learns of it.

//go:embed lua/ledger_quarantine.lua
var ledgerQuarantineSource string

var ledgerQuarantineScript = redis.NewScript(ledgerQuarantineSource)

var (
	// ErrUnconfirmed is the error of EndQuarantine when it was not asked
	// for explicitly: QuarantineEnd.Reconciled false, or no Reason.
	ErrUnconfirmed = errors.New("retryfuseredis: ending a quarantine must be asked for explicitly")
	// ErrNoQuarantine is the error of EndQuarantine when no marker in
	// Redis is in quarantine: there is nothing to end.
	ErrNoQuarantine = errors.New("retryfuseredis: the ledger is not in quarantine")
)

// maxReasonBytes bounds the reason recorded on each marker.
const maxReasonBytes = 512

// QuarantineEnd is the operator's request to end a quarantine, and, given
// to LedgerConfig.OnQuarantineEnd, the record of one that was ended.
type QuarantineEnd struct {
	// Reconciled must be true: it says that the keys Redis lost have been
	// reconciled (each write that may have been applied looked up where it
	// took effect), so that taking them for free again applies nothing
	// twice. The ledger cannot know it; the operator says so.
	Reconciled bool
	// Reason says who ended the quarantine and why. Required; recorded on
	// every marker in Redis (at most 512 bytes kept) and reported to every
	// process.
	Reason string
	// At is when the quarantine was ended, by the Redis server's clock;
	// set in what OnQuarantineEnd is given, ignored by EndQuarantine.
	At time.Time
}

// EndQuarantine ends the ledger's quarantine after lost data before its
// time, for every process that uses the same Redis and Prefix: the
// operator's step once the keys that Redis lost have been reconciled. It
// is refused, with an error wrapping ErrUnconfirmed, unless end.Reconciled
// is true and end.Reason is set; with one wrapping ErrNoQuarantine when no
// marker is in quarantine (a loss no process has noticed yet is not one).
//
// It records the end on every marker (when, and end.Reason: see the
// README for reading it), making the markers that are missing, so that
// every process takes the markers as they now are; this process's
// quarantine ends at once, and another's at its next Begin, which looks
// at the markers at most once a second while in quarantine. Each reports
// it through LedgerConfig.OnQuarantineEnd. A Redis that cannot be reached
// is an error wrapping ErrUnavailable; the markers it did reach are ended,
// and the step may be run again.
//
// It is one pipeline per server (64 markers) to look, and one to end.
func (l *Ledger) EndQuarantine(ctx context.Context, end QuarantineEnd) error {
	if !end.Reconciled {
		return fmt.Errorf("%w: QuarantineEnd.Reconciled must be true: reconcile the keys Redis lost first", ErrUnconfirmed)
	}
	reason := strings.TrimSpace(end.Reason)
	if reason == "" {
		return fmt.Errorf("%w: QuarantineEnd.Reason must say who ends it and why", ErrUnconfirmed)
	}
	if len(reason) > maxReasonBytes {
		reason = reason[:maxReasonBytes]
	}
	if ctx.Err() != nil {
		return contextEnded(ctx, "EndQuarantine")
	}
	wait := max(l.timeout, time.Second)
	before, err := l.markers(ctx, wait, "look", "")
	if err != nil {
		return err
	}
	var left time.Duration
	for _, m := range before {
		left = max(left, m.left)
	}
	if left == 0 {
		return ErrNoQuarantine
	}
	after, err := l.markers(ctx, wait, "end", reason)
	if err != nil {
		return err
	}
	var at int64
	for _, m := range after {
		at = max(at, m.now)
	}
	l.guard.ended(QuarantineEnd{Reconciled: true, Reason: reason, At: time.UnixMilli(at)})
	return nil
}

// markerState is a marker as ledger_quarantine.lua reads it.
type markerState struct {
	id        string // empty: missing
	n         int64
	left      time.Duration // the quarantine left
	endedAt   int64         // ms of the server's clock of a deliberate end; 0 for none
	endReason string
	now       int64 // ms of the server's clock when it was read
}

// markers runs ledger_quarantine.lua on every marker with mode ("look"
// or "end"), in one pipeline (a round trip per server), within wait.
func (l *Ledger) markers(ctx context.Context, wait time.Duration, mode, reason string) ([ledgerBuckets]markerState, error) {
	var out [ledgerBuckets]markerState
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	pipe := l.client.Pipeline()
	for b := range ledgerBuckets {
		args := []any{mode}
		if mode == "end" {
			args = append(args, rand.Text(), reason)
		}
		ledgerQuarantineScript.Eval(ctx, pipe, []string{l.markerKey(b)}, args...)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return out, unavailable(l.client, "read the ledger's markers", err)
	}
	for b, c := range cmds {
		v, _ := c.(interface{ Val() any })
		var reply []any
		if v != nil {
			reply, _ = v.Val().([]any)
		}
		if len(reply) != 6 {
			return out, unexpected(reply)
		}
		m := &out[b]
		m.id, _ = reply[0].(string)
		m.n, _ = reply[1].(int64)
		ms, _ := reply[2].(int64)
		m.left = time.Duration(ms) * time.Millisecond
		m.endedAt, _ = reply[3].(int64)
		m.endReason, _ = reply[4].(string)
		m.now, _ = reply[5].(int64)
	}
	return out, nil
}

// over reports whether the markers say that the quarantine this process
// is in was ended deliberately, and returns the end recorded last. An end
// is recorded on every marker, and a loss marked after it remakes a
// marker without it (as does a marker made afresh: a loss not yet
// marked): so every marker must carry an end and be in no quarantine, and
// one whose id this process knows must not have gone back.
func (g *guard) over(ms [ledgerBuckets]markerState) (QuarantineEnd, bool) {
	g.mu.Lock()
	ids, seen := g.ids, g.seen
	g.mu.Unlock()
	var end QuarantineEnd
	for b, m := range ms {
		switch {
		case m.id == "", m.left > 0, m.endedAt == 0:
			return end, false
		case m.id == ids[b] && m.n < seen[b]:
			return end, false
		}
		if at := time.UnixMilli(m.endedAt); at.After(end.At) {
			end = QuarantineEnd{Reconciled: true, Reason: m.endReason, At: at}
		}
	}
	return end, true
}

// ended ends this process's quarantine: the markers are adopted again
// before the next Begin, and the end is reported.
func (g *guard) ended(end QuarantineEnd) {
	g.mu.Lock()
	g.until, g.stale = time.Time{}, true
	g.mu.Unlock()
	if g.onEnd != nil {
		g.onEnd(end)
	}
}

// recheckEvery is how often, at most, a process in quarantine looks at the
// markers for a deliberate end.
const recheckEvery = time.Second

// recheck looks at the markers, at most once every recheckEvery (one
// Begin looks, the others go on refusing meanwhile), and ends this
// process's quarantine when they say it was ended. It reports whether it
// did.
func (g *guard) recheck(ctx context.Context, l *Ledger) bool {
	now := time.Now()
	g.mu.Lock()
	due := !now.Before(g.checked.Add(g.recheckEvery)) && now.Before(g.until)
	if due {
		g.checked = now
	}
	g.mu.Unlock()
	if !due {
		return false
	}
	ms, err := l.markers(ctx, l.timeout, "look", "")
	if err != nil {
		return false // still in quarantine: the error of Begin says so
	}
	end, over := g.over(ms)
	if over {
		g.ended(end)
	}
	return over
}
