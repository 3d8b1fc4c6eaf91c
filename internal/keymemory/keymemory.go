// Package keymemory is a Transport's memory of keys when it has no
// Ledger: the idempotency keys whose writes it left uncertain, or whose
// writes the caller has since learnt were applied
// (ReconcileRequiredError.Resolve). A later call under such a key is told
// to reconcile instead of being sent. No fingerprint, no stored result:
// one map lookup, for keyed requests only.
//
// With a Ledger, the ledger decides; the memory then only keeps what this
// process knows of its own uncertain writes (when, after how many
// attempts, how far they got), to describe them to a later call that the
// ledger refuses because of them.
package keymemory

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/decide"
)

// The bounds of the memory: how many keys, and for how long. A key is
// dropped after ttl, like a ledger.Memory's, or to make room for a new one
// when maxKeys are held (the one that would expire first).
const (
	maxKeys = 10000
	ttl     = 24 * time.Hour
)

// Memory is the memory of keys, bounded by maxKeys and ttl. Its zero value
// is empty and ready for use. This type is concurrency safe.
type Memory struct {
	n    atomic.Int64 // len(m), read without the lock
	mu   sync.Mutex
	m    map[string]Memo
	gens uint64 // the Remembers made, numbering their Memos
}

// Empty reports whether no key is remembered. It takes no lock: a key
// remembered by a call that ends as this one begins may or may not be
// seen, as it may or may not be under the lock.
func (k *Memory) Empty() bool { return k.n.Load() == 0 }

// Memo is what is remembered of a key.
type Memo struct {
	Applied bool      // learnt to have been applied; else uncertain
	Earlier Uncertain // with Applied false, what is known of the call that left it uncertain
	expires time.Time
	gen     uint64 // the Remember that made it
}

// Gen names the Remember that made m (zero for a Memo not remembered),
// for ForgetIf.
func (m Memo) Gen() uint64 { return m.gen }

// Uncertain is what is known of a call that left its write uncertain.
// The zero value: nothing is known.
type Uncertain struct {
	At       time.Time    // when its uncertain attempt ended
	Attempts int          // the attempts it made
	Phase    decide.Phase // how far it got
}

// Lookup returns what is remembered of key at now, and whether it is.
func (k *Memory) Lookup(key string, now time.Time) (Memo, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.m[key]
	if !ok {
		return Memo{}, false
	}
	if !now.Before(m.expires) {
		delete(k.m, key)
		k.n.Store(int64(len(k.m)))
		return Memo{}, false
	}
	return m, true
}

// Remember holds key with m from now for ttl, and returns the Gen of
// the Memo it keeps.
func (k *Memory) Remember(key string, m Memo, now time.Time) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = make(map[string]Memo)
	}
	if _, ok := k.m[key]; !ok && len(k.m) >= maxKeys {
		k.makeRoom(now)
	}
	k.gens++
	m.expires, m.gen = now.Add(ttl), k.gens
	k.m[key] = m
	k.n.Store(int64(len(k.m)))
	return m.gen
}

// Forget frees key.
func (k *Memory) Forget(key string) {
	k.mu.Lock()
	delete(k.m, key)
	k.n.Store(int64(len(k.m)))
	k.mu.Unlock()
}

// ForgetIf frees key if what holds it is still the Memo of Gen gen: not
// one a later Remember put in its place (a later call's uncertain write,
// whose hold this one's settlement must not end). It reports whether it
// freed the key, or found it free already.
func (k *Memory) ForgetIf(key string, gen uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.m[key]
	if ok && m.gen != gen {
		return false
	}
	delete(k.m, key)
	k.n.Store(int64(len(k.m)))
	return true
}

// makeRoom drops the expired keys or, when none has expired, the one that
// expires first. k.mu is held.
func (k *Memory) makeRoom(now time.Time) {
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
	if len(k.m) >= maxKeys {
		delete(k.m, first)
	}
}
