package breaker

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// This file is the Breaker as an operator meets it during an incident: its
// settings changed while traffic flows, under a version, and its scopes
// read for a health endpoint.

// Update puts settings s in force while traffic flows, and returns the
// settings in force after it, defaults resolved. No scope loses its state:
//
//   - A closed scope keeps its counts (consecutive failures, outcomes
//     seen); the new FailureThreshold and MinObservations apply from its
//     next outcome. Settings never move a scope by themselves: a scope
//     whose failures already reach a lowered threshold opens at its next
//     failure.
//   - An open scope stays open, and the new OpenTimeout counts from when
//     it opened: nothing is sent to the dependency until its probe.
//   - A half-open scope keeps its probes out, whose outcomes still count,
//     and its successful probes; the new MaxProbes bounds the probes let
//     out next, the new ProbeSuccesses closes it from its next success.
//   - A lowered MaxScopes forgets closed scopes past it, as a new scope
//     does (see MaxScopes); open and half-open ones are kept.
//
// The version of s (Settings.Version) must be above the version in
// force; zero means the next one. Settings equal to those in force change
// nothing, and are no new version: a configuration applied twice is
// harmless. Every later transition, refusal (OpenError.Version) and
// event (Change.Settings) carries the new version, and each
// scope's first request under it is reported through Hooks.BreakerChange
// with From == To.
//
// Invalid settings, or a version at or below the one in force (other
// than the same settings under the same version), are refused with an
// error wrapping retryfuse.ErrInvalidPolicy that says why, and the settings in
// force stay so. Update is safe to call concurrently with traffic.
func (b *Breaker) Update(s Settings) (Settings, error) {
	next, err := s.resolve() // before the lock: it is pure
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	cur := b.set
	if err != nil {
		return cur, fmt.Errorf("%w; %s", err, stayInForce(cur.Version))
	}
	same := next
	same.Version = cur.Version
	switch {
	case same == cur && (s.Version == 0 || s.Version == cur.Version):
		return cur, nil // nothing changes
	case s.Version == 0 && cur.Version == math.MaxUint64:
		return cur, sentinel.InvalidPolicy("breaker.Settings.Version", "has no next value after "+strconv.FormatUint(cur.Version, 10)+"; "+stayInForce(cur.Version))
	case s.Version == 0:
		next.Version = cur.Version + 1
	case s.Version == cur.Version:
		return cur, sentinel.InvalidPolicy("breaker.Settings.Version "+strconv.FormatUint(s.Version, 10),
			"names other settings than the ones in force under it: a new version needs a new number; "+stayInForce(cur.Version))
	case s.Version < cur.Version:
		return cur, sentinel.InvalidPolicy("breaker.Settings.Version "+strconv.FormatUint(s.Version, 10),
			"goes backwards: it must be above "+strconv.FormatUint(cur.Version, 10)+", the version in force; "+stayInForce(cur.Version))
	}
	b.set = next
	for len(b.scopes) > next.MaxScopes && b.evictLocked() {
	}
	for _, sc := range b.scopes {
		// The quick path is shut for the new version until a scope's first
		// request under it has been reported.
		sc.quickFoldLocked()
		sc.quickPublishLocked()
	}
	return next, nil
}

func stayInForce(version uint64) string {
	return "the settings of version " + strconv.FormatUint(version, 10) + " stay in force"
}

// Snapshot returns every scope the Breaker remembers, as it stands, sorted
// by scope, for health endpoints and dashboards: To is the scope's state,
// At since when (since it was first seen, for a scope that has not changed
// state), From the state before it (zero when it has not changed), Cause
// the failure that opened an open scope, Settings the settings in force
// (Settings.Version names them), and the counts. An open scope whose
// OpenTimeout has passed stays open here until a request probes it (its
// probe is due at At plus Settings.OpenTimeout). A Breaker that has seen no
// request gives an empty slice.
//
// Snapshot is safe to call concurrently with traffic: it copies under the
// Breaker's lock, for a time that grows with the number of scopes (at most
// MaxScopes).
func (b *Breaker) Snapshot() []Change {
	b.mu.Lock()
	out := make([]Change, 0, len(b.scopes))
	for _, s := range b.scopes {
		s.quickFoldLocked()
		out = append(out, b.infoLocked(s))
		s.quickPublishLocked()
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(x, y Change) int { return strings.Compare(x.Scope, y.Scope) })
	return out
}
