package retryfuse

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/decide"
)

// This file is a Transport's memory of keys when it has no Ledger: the
// idempotency keys whose writes it left uncertain, or whose writes the
// caller has since learnt were applied (ReconcileRequiredError.Resolve). A
// later call under such a key is told to reconcile instead of being sent.
// No fingerprint, no stored result: one map lookup, for keyed requests
// only.
//
// With a Ledger, the ledger decides; the memory then only keeps what this
// process knows of its own uncertain writes (when, after how many
// attempts, how far they got), to describe them to a later call that the
// ledger refuses because of them.

// The bounds of the memory: how many keys, and for how long. A key is
// dropped after keyMemoryTTL, like a MemoryLedger's, or to make room for a
// new one when keyMemoryMax are held (the one that would expire first).
const (
	keyMemoryMax = 10000
	keyMemoryTTL = 24 * time.Hour
)

// keyMemory is safe for concurrent use. Its zero value is empty.
type keyMemory struct {
	n  atomic.Int64 // len(m), read without the lock
	mu sync.Mutex
	m  map[string]keyMemo
}

// empty reports whether no key is remembered. It takes no lock: a key
// remembered by a call that ends as this one begins may or may not be
// seen, as it may or may not be under the lock.
func (k *keyMemory) empty() bool { return k.n.Load() == 0 }

type keyMemo struct {
	applied bool // learnt to have been applied; else uncertain
	earlier uncertainCall
	expires time.Time
}

// uncertainCall is what is known of a call that left its write uncertain.
// The zero value: nothing is known.
type uncertainCall struct {
	at       time.Time // when its uncertain attempt ended
	attempts int
	phase    decide.Phase
}

// lookup returns what is remembered of key at now, and whether it is.
func (k *keyMemory) lookup(key string, now time.Time) (keyMemo, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.m[key]
	if !ok {
		return keyMemo{}, false
	}
	if !now.Before(m.expires) {
		delete(k.m, key)
		k.n.Store(int64(len(k.m)))
		return keyMemo{}, false
	}
	return m, true
}

// remember holds key with m from now for keyMemoryTTL.
func (k *keyMemory) remember(key string, m keyMemo, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = make(map[string]keyMemo)
	}
	if _, ok := k.m[key]; !ok && len(k.m) >= keyMemoryMax {
		k.makeRoom(now)
	}
	m.expires = now.Add(keyMemoryTTL)
	k.m[key] = m
	k.n.Store(int64(len(k.m)))
}

// forget frees key.
func (k *keyMemory) forget(key string) {
	k.mu.Lock()
	delete(k.m, key)
	k.n.Store(int64(len(k.m)))
	k.mu.Unlock()
}

// makeRoom drops the expired keys or, when none has expired, the one that
// expires first. k.mu is held.
func (k *keyMemory) makeRoom(now time.Time) {
	var first string
	var firstAt time.Time
	for key, m := range k.m {
		if !now.Before(m.expires) {
			delete(k.m, key)
			continue
		}
		if first == "" || m.expires.Before(firstAt) {
			first, firstAt = key, m.expires
		}
	}
	if len(k.m) >= keyMemoryMax {
		delete(k.m, first)
	}
}
