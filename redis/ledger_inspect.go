package retryfuseredis

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/internal/stored"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the Ledger's ledger.Inspector and ledger.Settler: what an
// operator reads of the records and settles by hand.

//go:embed lua/ledger_inspect.lua
var ledgerInspectSource string

//go:embed lua/ledger_settle.lua
var ledgerSettleSource string

var (
	ledgerInspectScript = redis.NewScript(ledgerInspectSource)
	ledgerSettleScript  = redis.NewScript(ledgerGuardSource + ledgerSettleSource)
)

var (
	_ ledger.Inspector = (*Ledger)(nil)
	_ ledger.Settler   = (*Ledger)(nil)
)

// record is a key's record as read by ledger_inspect.lua; its token is
// kept for Settle's compare-and-set and never shown.
type record struct {
	key               string
	now               int64 // the server's time, ms
	s, fp, t, e, at   string
	pttl              int64
	head              string // the stored result's first bytes; "" when none
	hasHead, lapsed   bool
	ttl, flightMillis int64
}

// parseRecord reads the reply of ledger_inspect.lua.
func (l *Ledger) parseRecord(key string, v any) (record, error) {
	reply, _ := v.([]any)
	if len(reply) != 8 {
		return record{}, asLedgerUnavailable(unexpected(v)) // as Inspector says
	}
	r := record{key: key, ttl: l.ttlMillis, flightMillis: l.flightMillis}
	r.now, _ = reply[0].(int64)
	str := func(i int) string { s, _ := reply[i].(string); return s }
	r.s, r.fp, r.t, r.e, r.at = str(1), str(2), str(3), str(4), str(5)
	r.pttl, _ = reply[6].(int64)
	r.head, r.hasHead = reply[7].(string)
	if e, err := strconv.ParseInt(r.e, 10, 64); err == nil && r.s == "f" && e <= r.now {
		r.lapsed = true
	}
	return r, nil
}

// stamp is the field that dates the record's state: e in flight, at
// once ended.
func (r *record) stamp() string {
	if r.s == "f" {
		return r.e
	}
	return r.at
}

func (r *record) info() ledger.KeyInfo {
	k := ledger.KeyInfo{Key: r.key, Now: time.UnixMilli(r.now)}
	if r.s != "f" && r.s != "u" && r.s != "c" { // none, or a cancelled Begin's mark: free
		return k
	}
	copy(k.Fingerprint[:], r.fp)
	expires := r.now + max(r.pttl, 0)
	k.Expires = time.UnixMilli(expires)
	e, _ := strconv.ParseInt(r.e, 10, 64)
	since, err := strconv.ParseInt(r.at, 10, 64)
	if err != nil {
		since = expires - r.ttl // a record of an older release: dated by its expiry
	}
	letter := r.s
	switch {
	case r.s == "f" && !r.lapsed:
		k.State, k.Since, k.Expires = ledger.StateInFlight, time.UnixMilli(e-r.flightMillis), time.UnixMilli(e)
	case r.s == "f":
		k.State, k.Lapsed, k.Since, letter = ledger.StateUncertain, true, time.UnixMilli(e), "l"
	case r.s == "u":
		k.State, k.Since = ledger.StateUncertain, time.UnixMilli(since)
	default:
		k.State, k.Since = ledger.StateCompleted, time.UnixMilli(since)
		if r.hasHead {
			k.HasStored = true
			d := decoder{b: []byte(r.head)}
			if d.byte() == codecVersion {
				k.StoredStatus = int(d.uvarint())
			}
		}
	}
	// The version is a digest of what Settle compares: the token (never
	// shown), the state and the stamp that dates it.
	h := sha256.New()
	for _, f := range [...]string{r.t, letter, r.stamp()} {
		h.Write(binary.AppendUvarint(nil, uint64(len(f))))
		h.Write([]byte(f))
	}
	k.Version = hex.EncodeToString(h.Sum(nil)[:12])
	return k
}

// read reads key's record.
func (l *Ledger) read(ctx context.Context, key string) (record, error) {
	v, err := run(ctx, l.client, l.timeout, ledgerInspectScript, []string{l.Key(key)})
	if err != nil {
		return record{}, asLedgerUnavailable(err)
	}
	return l.parseRecord(key, v)
}

// asLedgerUnavailable returns err wrapping ledger.ErrUnavailable too.
func asLedgerUnavailable(err error) error {
	if err == nil || errors.Is(err, ledger.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
}

// Lookup implements ledger.Inspector: one script, read-only, on the
// server's clock. An in-flight key's Since is derived from its claim's
// expiry and this Ledger's InFlightTTL.
func (l *Ledger) Lookup(ctx context.Context, key string) (ledger.KeyInfo, error) {
	r, err := l.read(ctx, key)
	if err != nil {
		return ledger.KeyInfo{}, err
	}
	return r.info(), nil
}

// List implements ledger.Inspector with SCAN (never KEYS): one SCAN of
// COUNT q.Limit over the ledger's keys (Prefix, a hash tag, ":"), then
// one read of each record found, in one pipeline. Its order is SCAN's,
// and a page may hold no keys yet have a Cursor. On a Redis Cluster it
// scans each master in turn (those that hold the ledger's 64 hash tags,
// in the order of their addresses).
func (l *Ledger) List(ctx context.Context, q ledger.Query) (ledger.Page, error) {
	q, err := ledger.CheckQuery(q)
	if err != nil {
		return ledger.Page{}, err
	}
	c, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	nodes, err := l.scanNodes(c)
	if err != nil {
		return ledger.Page{}, err
	}
	node, cursor := 0, uint64(0)
	if q.Cursor != "" {
		n, cur, ok := strings.Cut(q.Cursor, ":")
		node, err = strconv.Atoi(n)
		if err == nil {
			cursor, err = strconv.ParseUint(cur, 10, 64)
		}
		if !ok || err != nil || node < 0 || node >= len(nodes) {
			return ledger.Page{}, invalid("Query.Cursor", "is not a cursor of this ledger")
		}
	}
	client := nodes[node]
	found, next, err := client.Scan(c, cursor, globEscape(l.prefix)+"{??}:*", int64(q.Limit)).Result()
	if err != nil {
		return ledger.Page{}, asLedgerUnavailable(unavailable(l.client, "SCAN", err))
	}
	pipe := client.Pipeline()
	cmds := make([]*redis.Cmd, len(found))
	for i, k := range found {
		cmds[i] = ledgerInspectScript.Eval(c, pipe, []string{k})
	}
	if len(found) > 0 {
		if _, err := pipe.Exec(c); err != nil {
			return ledger.Page{}, asLedgerUnavailable(unavailable(l.client, "List", err))
		}
	}
	var p ledger.Page
	switch {
	case next != 0:
		p.Cursor = strconv.Itoa(node) + ":" + strconv.FormatUint(next, 10)
	case node+1 < len(nodes):
		p.Cursor = strconv.Itoa(node+1) + ":0"
	}
	skip := len(l.prefix) + len("{00}:")
	for i, k := range found {
		r, err := l.parseRecord(k[skip:], cmds[i].Val())
		if err != nil {
			return ledger.Page{}, err
		}
		if info := r.info(); q.Matches(info) {
			p.Keys = append(p.Keys, info)
		}
	}
	return p, nil
}

// scanNodes returns the servers List scans: the client's one, or the
// masters of a Redis Cluster that hold the ledger's hash tags, ordered by
// address.
func (l *Ledger) scanNodes(ctx context.Context) ([]redis.Cmdable, error) {
	cc, cluster := l.client.(*redis.ClusterClient)
	if !cluster {
		return []redis.Cmdable{l.client}, nil
	}
	byAddr := map[string]*redis.Client{}
	for b := range ledgerBuckets {
		m, err := cc.MasterForKey(ctx, l.markerKey(b))
		if err != nil {
			return nil, asLedgerUnavailable(unavailable(l.client, "List", err))
		}
		byAddr[m.Options().Addr] = m
	}
	addrs := slices.Sorted(maps.Keys(byAddr))
	nodes := make([]redis.Cmdable, len(addrs))
	for i, a := range addrs {
		nodes[i] = byAddr[a]
	}
	return nodes, nil
}

// globEscape escapes the characters special to a SCAN MATCH pattern.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}

// Settle implements ledger.Settler: it reads the key's record, and
// settles it with a script that first checks the record is still as
// read (its token, state and the stamp that dates it), so that a record
// changed in between is left alone. The script runs after the guard, as
// Begin's does: during a quarantine after lost data it refuses (an
// error wrapping ErrDataLost). A settled key keeps no token: its owner's
// Complete, Release or Uncertain is refused (ledger.ErrToken).
func (l *Ledger) Settle(ctx context.Context, key, version string, s ledger.Settlement) (ledger.KeyInfo, error) {
	if err := ledger.CheckSettlement(s); err != nil {
		return ledger.KeyInfo{}, err
	}
	r, err := l.read(ctx, key)
	if err != nil {
		return ledger.KeyInfo{}, err
	}
	found := r.info()
	if found.Version != version || found.State != ledger.StateInFlight && found.State != ledger.StateUncertain {
		return ledger.KeyInfo{}, &ledger.SettleRefusedError{Found: found, Version: version}
	}
	outcome := "not_applied"
	lapsed := "0"
	if r.lapsed {
		lapsed = "1"
	}
	args := []any{outcome, r.s, r.t, r.stamp(), lapsed, l.ttlMillis}
	if s.Outcome == ledger.Applied {
		args[0] = "applied"
		if res := s.Stored; res != nil && len(res.Body) <= l.maxStoredBody && stored.HeaderFits(res.Header) {
			args = append(args, encodeResponse(res))
		}
	}
	reply, err := l.guarded(ctx, ledgerSettleScript, key, bucketOf(key), args...)
	if err != nil {
		return ledger.KeyInfo{}, asLedgerUnavailable(err)
	}
	after, err := l.read(ctx, key)
	if err != nil {
		return ledger.KeyInfo{}, err
	}
	if reply[0] != int64(1) {
		return ledger.KeyInfo{}, &ledger.SettleRefusedError{Found: after.info(), Version: version}
	}
	return after.info(), nil
}

// Reap implements ledger.Settler. Redis deletes every record itself when
// its time passes (PEXPIRE): there is nothing to reap, and Reap returns
// 0.
func (l *Ledger) Reap(context.Context, int) (int, error) { return 0, nil }
