package ledger

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// This file is Memory's Inspector and Settler: what an operator reads and
// settles, at the time passed in, as the rest of Memory.

var (
	_ Inspector = (*Memory)(nil)
	_ Settler   = (*Memory)(nil)
)

func invalidf(field, format string, args ...any) error {
	return sentinel.InvalidPolicy(field, fmt.Sprintf(format, args...))
}

// mark records that e entered a new state at now: a new Version.
func (l *Memory) mark(e *ledgerEntry, now time.Time) {
	l.vseq++
	e.ver, e.since = l.vseq, now
}

// info returns what e says of its key at now (e nil: free); l.mu must
// be held.
func (l *Memory) info(key string, e *ledgerEntry, now time.Time) KeyInfo {
	k := KeyInfo{Key: key, Now: now}
	if e == nil {
		return k
	}
	k.Fingerprint, k.Since, k.Expires = e.fp, e.since, e.expires
	letter := "f"
	switch e.state {
	case entryInFlight:
		k.State = StateInFlight
	case entryUncertain:
		k.State, k.Lapsed, letter = StateUncertain, e.lapsed, "u"
	default:
		k.State, letter = StateCompleted, "c"
		if e.stored != nil {
			k.HasStored, k.StoredStatus = true, e.stored.StatusCode
		}
	}
	k.Version = strconv.FormatUint(e.ver, 36) + letter
	return k
}

// Lookup implements Inspector, at time.Now.
func (l *Memory) Lookup(_ context.Context, key string) (KeyInfo, error) {
	return l.LookupAt(key, time.Now()), nil
}

// LookupAt is Lookup at the time now.
func (l *Memory) LookupAt(key string, now time.Time) KeyInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lazyInit()
	return l.info(key, l.live(key, now), now)
}

// List implements Inspector, at time.Now: a page's keys are in the
// order of their bytes, and its Cursor is the last key it examined.
func (l *Memory) List(_ context.Context, q Query) (Page, error) {
	return l.ListAt(q, time.Now())
}

// ListAt is List at the time now.
func (l *Memory) ListAt(q Query, now time.Time) (Page, error) {
	q, err := CheckQuery(q)
	if err != nil {
		return Page{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lazyInit()
	keys := make([]string, 0, min(len(l.m), q.Limit+1))
	for k := range l.m {
		if k > q.Cursor {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, strings.Compare)
	var p Page
	if len(keys) > q.Limit {
		keys = keys[:q.Limit]
		p.Cursor = keys[q.Limit-1]
	}
	for _, k := range keys {
		if info := l.info(k, l.live(k, now), now); q.Matches(info) {
			p.Keys = append(p.Keys, info)
		}
	}
	return p, nil
}

// Settle implements Settler, at time.Now. A stored result beyond
// MaxStoredBody or the bounds of the headers completes the key without
// one, as Complete does.
func (l *Memory) Settle(_ context.Context, key, version string, s Settlement) (KeyInfo, error) {
	return l.SettleAt(key, version, s, time.Now())
}

// SettleAt is Settle at the time now.
func (l *Memory) SettleAt(key, version string, s Settlement, now time.Time) (KeyInfo, error) {
	if err := CheckSettlement(s); err != nil {
		return KeyInfo{}, err
	}
	if err := l.Validate(); err != nil {
		return KeyInfo{}, err
	}
	var stored *StoredResponse
	if l.storable(s.Stored) {
		stored = s.Stored.clone()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lazyInit()
	e := l.live(key, now)
	found := l.info(key, e, now)
	if found.Version != version || found.State != StateInFlight && found.State != StateUncertain {
		return KeyInfo{}, &SettleRefusedError{Found: found, Version: version}
	}
	if s.Outcome == NotApplied {
		l.remove(e)
		return l.info(key, nil, now), nil
	}
	e.state, e.token, e.stored, e.lapsed = entryCompleted, "", stored, false
	l.mark(e, now)
	l.setExpiry(e, now.Add(l.ttl()))
	l.moveToFront(e)
	return l.info(key, e, now), nil
}

// Reap implements Settler, at time.Now: it deletes at most limit expired
// keys (zero or negative: MaxEntries).
func (l *Memory) Reap(_ context.Context, limit int) (int, error) {
	return l.ReapAt(limit, time.Now()), nil
}

// ReapAt is Reap at the time now.
func (l *Memory) ReapAt(limit int, now time.Time) int {
	if limit <= 0 {
		limit = l.maxEntries()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lazyInit()
	n := 0
	for _, e := range l.m {
		if n == limit {
			break
		}
		if !now.Before(e.expires) && !l.lapse(e, now) {
			l.remove(e)
			n++
		}
	}
	return n
}
