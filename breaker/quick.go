package breaker

import "sync/atomic"

// This file is the breaker's closed path without its lock: a request to a
// closed scope under the settings in force takes a ticket, and its success
// is counted, with a few atomic operations on the scope alone. Every call
// of a scope passes here, from every core; a lock shared by all the scopes
// of a Breaker made them wait on each other. Anything else — a failure, a
// scope open or half-open, settings of a new version, a scope not yet
// seen, the quick tickets all out — takes the lock (breaker.go), which
// keeps the exact rules.
//
// While the lock is held on a scope, its quick word is zero, so nothing is
// counted or issued beside it: the lock's holder has folded the count in
// (quickFoldLocked) and publishes the scope anew as it ends
// (quickPublishLocked).

// quickSlots is how many tickets of one scope may be out at once from the
// quick path; more take the lock.
const quickSlots = 64

// The quick word of a scope: the low 32 bits of its generation above,
// then whether a request may take a quick ticket (closed, under the
// settings in force), whether a success may be counted quickly (closed,
// with no failure since its last success), and the successes counted
// quickly since the lock last folded them in.
const (
	quickAllow     = 1 << 31
	quickClean     = 1 << 30
	quickCountMask = quickClean - 1
)

// quickScope is a scope's state for the quick path.
type quickScope struct {
	word atomic.Uint64
	_    [56]byte // word, written by every success, apart from used, read by every ticket
	// used is the Breaker's use count when the scope was last asked for a
	// ticket: the order in which closed scopes are forgotten (MaxScopes).
	used atomic.Uint64
	_    [56]byte
	// slots hold the quick tickets: each a version, doubled, plus one
	// while its ticket is out. A ticket's seq is its slot's value while it
	// is out; done moves the slot on, so a second done finds it changed.
	slots [quickSlots]atomic.Uint64
	hint  atomic.Uint32 // the slot where a search for a free one starts
}

// findQuick returns the scope named scope, or nil when it is not
// remembered, without the lock: the scope used last, else the index.
func (b *Breaker) findQuick(scope string) *scopeState {
	if s := b.last.Load(); s != nil && s.name == scope {
		return s
	}
	if v, ok := b.index.Load(scope); ok {
		return v.(*scopeState)
	}
	return nil
}

// allowQuick issues a quick ticket of s, and reports false when the lock
// must decide.
func (b *Breaker) allowQuick(s *scopeState) (Ticket, bool) {
	w := s.q.word.Load()
	if w&quickAllow == 0 {
		return Ticket{}, false
	}
	h := s.q.hint.Load()
	for i := range uint32(quickSlots) {
		j := (h + i) % quickSlots
		v := s.q.slots[j].Load()
		if v&1 == 0 && s.q.slots[j].CompareAndSwap(v, v+1) {
			if j != h {
				s.q.hint.Store(j)
			}
			b.touch(s)
			return Ticket{s: s, gen: w >> 32, seq: v + 1, slot: int32(j), quick: true}, true
		}
	}
	return Ticket{}, false
}

// touch makes s the most recently used scope: it takes a new number of
// the Breaker's use count unless it holds the newest already, so that
// calls to one scope write no memory that another core reads. The number
// is not tied to last, which only speeds findQuick: two scopes touched at
// once may leave last on one and the newest number on the other, and the
// next use of the first then numbers it anew.
func (b *Breaker) touch(s *scopeState) {
	if b.last.Load() != s {
		b.last.Store(s)
	}
	if u := s.q.used.Load(); u == 0 || u != b.uses.Load() {
		s.q.used.Store(b.uses.Add(1))
	}
}

// releaseQuick frees the slot of t, a quick ticket, and reports false when
// t was done before.
func (s *scopeState) releaseQuick(t Ticket) bool {
	return s.q.slots[t.slot].CompareAndSwap(t.seq, t.seq+1)
}

// countQuick counts a success of a ticket of generation gen, and reports
// false when the lock must count it: the scope has changed since, or has
// failures to forget.
func (s *scopeState) countQuick(gen uint64) bool {
	for {
		w := s.q.word.Load()
		if w>>32 != gen&0xffffffff || w&quickClean == 0 || w&quickCountMask == quickCountMask {
			return false
		}
		if s.q.word.CompareAndSwap(w, w+1) {
			return true
		}
	}
}

// quickOut is the number of quick tickets out.
func (s *scopeState) quickOut() int {
	n := 0
	for i := range s.q.slots {
		n += int(s.q.slots[i].Load() & 1)
	}
	return n
}

// quickFoldLocked stops the quick path on s and counts in its successes.
// b.mu is held.
func (s *scopeState) quickFoldLocked() {
	w := s.q.word.Swap(0)
	if w != 0 && w>>32 == s.gen&0xffffffff {
		s.observed += int(w & quickCountMask)
	}
}

// quickPublishLocked opens the quick path on s as it now stands. b.mu is
// held.
func (s *scopeState) quickPublishLocked() {
	g := s.gen & 0xffffffff
	if s.forgotten || s.state != Closed || g == 0 {
		return // the word stays zero: everything takes the lock
	}
	w := g << 32
	if s.version == s.b.set.Version {
		w |= quickAllow
	}
	if s.failures == 0 {
		w |= quickClean
	}
	s.q.word.Store(w)
}
