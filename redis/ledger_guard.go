package retryfuseredis

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
)

// This file is how the ledger notices that Redis lost its records, and the
// quarantine that follows: see lua/ledger_guard.lua for the markers.

//go:embed lua/ledger_marker.lua
var ledgerMarkerSource string

// ErrDataLost is wrapped by the error of Begin while the ledger is in
// quarantine: Redis lost records of the ledger (restarted without
// persistence, a snapshot restored, a failover to a lagging replica), so
// that a key it no longer holds may have been completed or be in flight.
// It wraps ledger.ErrUnavailable: the transport sends nothing.
var ErrDataLost = fmt.Errorf("%w: redis lost records of the ledger", ledger.ErrUnavailable)

// guard holds what this process knows of the markers, and the quarantine.
// This type is concurrency safe.
type guard struct {
	quarantine       time.Duration
	quarantineMillis int64
	onDataLost       func(error)
	onEnd            func(QuarantineEnd)
	recheckEvery     time.Duration // see recheck
	adopting         sync.Mutex    // one adoption at a time

	mu      sync.Mutex // guards the fields below
	ids     [ledgerBuckets]string
	seen    [ledgerBuckets]int64
	fresh   string    // a random id for a marker remade after a loss
	until   time.Time // the quarantine's end, by this process's clock
	stale   bool      // the markers must be adopted again before a Begin
	checked time.Time // when the markers were last looked at in quarantine
}

func (g *guard) init(quarantine time.Duration, onDataLost func(error), onEnd func(QuarantineEnd)) {
	g.quarantine, g.quarantineMillis, g.onDataLost, g.onEnd = quarantine, ceilMillis(quarantine), onDataLost, onEnd
	g.recheckEvery = recheckEvery
	g.fresh = rand.Text()
}

// marker returns the id of bucket b's marker, the highest count seen,
// and the id a script gives the marker it remakes after a loss.
func (g *guard) marker(b int) (id string, seen int64, fresh string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ids[b], g.seen[b], g.fresh
}

// saw notes count seq of bucket b's marker, if its id is still id.
func (g *guard) saw(b int, id string, seq int64) {
	g.mu.Lock()
	if g.ids[b] == id && seq > g.seen[b] {
		g.seen[b] = seq
	}
	g.mu.Unlock()
}

// replace adopts marker newID, at count n, for bucket b, if its id is
// still old: its quarantine is over.
func (g *guard) replace(b int, old, newID string, n int64) {
	g.mu.Lock()
	if g.ids[b] == old {
		g.ids[b], g.seen[b] = newID, n
	}
	g.mu.Unlock()
}

// lost enters the quarantine for left (reported once, when the ledger
// was not already in one) and returns the error for the caller.
func (g *guard) lost(where string, left time.Duration) error {
	now := time.Now()
	until := now.Add(left)
	g.mu.Lock()
	report := !now.Before(g.until)
	if until.After(g.until) {
		g.until = until
	}
	g.stale = true
	g.fresh = rand.Text() // the id remade with the last one may be this loss's
	until = g.until
	g.mu.Unlock()
	err := lostError(until)
	if report && g.onDataLost != nil {
		g.onDataLost(fmt.Errorf("%w (noticed at %s)", err, where))
	}
	return err
}

func lostError(until time.Time) error {
	return fmt.Errorf("%w: keyed requests refused until %s", ErrDataLost, until.UTC().Format(time.RFC3339))
}

// ready returns nil when a Begin may go ahead: not in quarantine (or the
// quarantine ended deliberately: see recheck), and the markers adopted
// again after one.
func (g *guard) ready(ctx context.Context, l *Ledger) error {
	g.mu.Lock()
	until, stale := g.until, g.stale
	g.mu.Unlock()
	if time.Now().Before(until) && !g.recheck(ctx, l) {
		return lostError(until)
	}
	if !stale {
		return nil
	}
	g.adopting.Lock()
	defer g.adopting.Unlock()
	g.mu.Lock()
	stale = g.stale
	g.mu.Unlock()
	if !stale {
		return nil // another Begin adopted them
	}
	return g.adopt(ctx, l)
}

// adopt reads every bucket's marker, making those that are missing, in
// one pipeline (a round trip per server). A marker still in quarantine
// puts this process in quarantine for what is left of it.
func (g *guard) adopt(ctx context.Context, l *Ledger) error {
	ctx, cancel := context.WithTimeout(ctx, max(l.timeout, time.Second))
	defer cancel()
	pipe := l.client.Pipeline()
	for b := range ledgerBuckets {
		pipe.Eval(ctx, ledgerMarkerSource, []string{l.markerKey(b)}, rand.Text())
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return unavailable(l.client, "read the ledger's markers", err)
	}
	var ids [ledgerBuckets]string
	var seen [ledgerBuckets]int64
	var left time.Duration
	for b, c := range cmds {
		v, _ := c.(interface{ Val() any })
		var reply []any
		if v != nil {
			reply, _ = v.Val().([]any)
		}
		if len(reply) != 3 {
			return unexpected(reply)
		}
		ids[b], _ = reply[0].(string)
		seen[b], _ = reply[1].(int64)
		ms, _ := reply[2].(int64)
		left = max(left, time.Duration(ms)*time.Millisecond)
	}
	g.mu.Lock()
	g.ids, g.seen, g.stale = ids, seen, false
	g.mu.Unlock()
	if left > 0 {
		return g.lost("start: a marker in quarantine", left)
	}
	return nil
}
