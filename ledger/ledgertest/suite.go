// Package ledgertest is the conformance suite of the ledger.Ledger
// contract: every promise its documentation makes, checked against a
// ledger made fresh for each. ledger.Memory, and the Ledgers of the
// redis and sql modules (Redis, PostgreSQL, SQLite), all run it in their
// tests.
//
// # A ledger of your own store
//
// A ledger kept in a store of your own (DynamoDB, Spanner, a table your
// service already has) passes the same suite before a Transport or the
// idempotency middleware trusts it. In a test of its package, call Run
// with a constructor that returns a new ledger on a clean namespace of
// the store (a table, a key prefix of its own) with the TTLs the suite
// asks for:
//
//	func TestConformance(t *testing.T) {
//		ledgertest.Run(t, func(t testing.TB, cfg ledgertest.Config) ledger.Ledger {
//			return mystore.NewLedger(testDB(t), mystore.Config{
//				TTL: cfg.TTL, InFlightTTL: cfg.InFlightTTL, MaxStoredBody: cfg.MaxStoredBody,
//			})
//		}, ledgertest.Options{
//			// A ledger on a store that cannot be reached: its answers
//			// must fail closed (errors wrapping ledger.ErrUnavailable).
//			Unavailable: func(t testing.TB, cfg ledgertest.Config) ledger.Ledger { ... },
//		})
//	}
//
// The store's own clock measures the TTLs: the suite waits for them in
// real time (about ten seconds in all), unless Options.Advance moves a clock
// the ledger takes its time from. When the ledger implements
// ledger.Inspector or ledger.Settler, the suite checks those too. A
// broken promise fails the test with a message that names it.
package ledgertest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
)

// Config is what the suite asks of a ledger it makes: the settings of
// its TTLs and of its bound on stored bodies, to be given to the ledger
// as they are.
type Config struct {
	TTL           time.Duration
	InFlightTTL   time.Duration
	MaxStoredBody int
}

// Options adapt the suite to a store.
type Options struct {
	// Advance, when not nil, moves the clock of every ledger the
	// constructor returns forward by d, at once: the suite then never
	// waits, and asks for TTLs of minutes. Nil means the ledgers use the
	// store's clock: the suite asks for TTLs of InFlightTTL and TTL and
	// waits for them in real time.
	Advance func(d time.Duration)
	// Unavailable, when not nil, returns a ledger made as the constructor
	// makes one, whose store can then no longer be reached (stopped,
	// closed): every answer of it must be an error wrapping
	// ledger.ErrUnavailable, never a claim. Nil skips that promise.
	Unavailable func(t testing.TB, cfg Config) ledger.Ledger
	// InFlightTTL and TTL are the TTLs asked for when Advance is nil;
	// zero means 1s and 2s. Raise them for a store whose steps take
	// longer than a tenth of them.
	InFlightTTL, TTL time.Duration
}

// maxStoredBody is the bound on stored bodies the suite asks for.
const maxStoredBody = 64

// suite is one run of the promises.
type suite struct {
	newLedger func(t testing.TB, cfg Config) ledger.Ledger
	opts      Options
	cfg       Config
	margin    time.Duration // waited beyond an expiry, and the slack of a time read
	keys      atomic.Int64
	advanced  atomic.Int64 // what Advance moved the clock on, in ns
}

// promise is one promise of the contract and its check.
type promise struct {
	name string // what the contract promises, quoted in a failure
	slug string // the subtest's name
	run  func(s *suite, t testing.TB)
}

// Run checks every promise of the ledger.Ledger contract against ledgers
// that newLedger returns, a new one per promise, each made with the
// Config it is given and cleaned up with t.Cleanup by the constructor.
// When t is a *testing.T each promise is a subtest; any other
// testing.TB runs them one after another.
func Run(t testing.TB, newLedger func(t testing.TB, cfg Config) ledger.Ledger, opts Options) {
	t.Helper()
	s := &suite{newLedger: newLedger, opts: opts, cfg: Config{MaxStoredBody: maxStoredBody}}
	switch {
	case opts.Advance != nil:
		s.cfg.InFlightTTL, s.cfg.TTL, s.margin = time.Minute, 10*time.Minute, time.Second
	default:
		s.cfg.InFlightTTL, s.cfg.TTL = orDefault(opts.InFlightTTL, time.Second), orDefault(opts.TTL, 2*time.Second)
		s.margin = min(s.cfg.InFlightTTL, s.cfg.TTL) / 3
	}
	for _, p := range promises() {
		if tt, ok := t.(*testing.T); ok {
			tt.Run(p.slug, func(t *testing.T) { p.run(s, promiseTB{t, p.name}) })
			continue
		}
		// A FailNow of t ends the check's goroutine (runtime.Goexit), as
		// in package testing.
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.run(s, promiseTB{t, p.name})
		}()
		<-done
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// promises returns every promise, in the order they are checked.
func promises() []promise {
	return []promise{
		{"exactly one concurrent Begin owns a free key", "OneOwner", (*suite).oneOwner},
		{"a wrong or used token is refused and changes nothing", "TokenFencing", (*suite).tokenFencing},
		{"an uncertain key is held until its outcome is known", "UncertainHolds", (*suite).uncertainHolds},
		{"a claim expires uncertain, never free, and its owner may still end it", "ClaimExpiresUncertain", (*suite).claimExpires},
		{"a completed or uncertain key is free after its TTL", "KeyExpires", (*suite).keyExpires},
		{"a stored result is kept within its bounds, as a deep copy", "StoredResponse", (*suite).storedResponse},
		{"another fingerprint is a conflict whatever the key's state", "FingerprintConflict", (*suite).fingerprintConflict},
		{"a store that cannot answer fails closed", "FailsClosed", (*suite).failsClosed},
		{"Lookup reads a key's state without changing it, and never its token", "Lookup", (*suite).lookup},
		{"List pages through the keys by state and age, within its limit", "List", (*suite).list},
		{"Settle acts only on the version seen, and then binds the key", "Settle", (*suite).settle},
		{"of two operators settling one key two ways, one succeeds and the other is refused with the state it found", "SettleRace", (*suite).settleRace},
		{"Reap deletes only records whose time has passed", "Reap", (*suite).reap},
	}
}

// promiseTB names the promise in every failure.
type promiseTB struct {
	testing.TB
	name string
}

func (p promiseTB) Errorf(format string, args ...any) {
	p.TB.Helper()
	p.TB.Errorf("broken promise %q: "+format, append([]any{p.name}, args...)...)
}

func (p promiseTB) Fatalf(format string, args ...any) {
	p.TB.Helper()
	p.TB.Fatalf("broken promise %q: "+format, append([]any{p.name}, args...)...)
}

func (p promiseTB) Error(args ...any) {
	p.TB.Helper()
	p.Errorf("%s", fmtArgs(args))
}

func (p promiseTB) Fatal(args ...any) {
	p.TB.Helper()
	p.Fatalf("%s", fmtArgs(args))
}

func fmtArgs(args []any) string { return strings.TrimSuffix(fmt.Sprintln(args...), "\n") }

// ledger returns a new ledger of the constructor.
func (s *suite) ledger(t testing.TB) ledger.Ledger {
	t.Helper()
	l := s.newLedger(t, s.cfg)
	if l == nil {
		t.Fatalf("the constructor returned a nil ledger")
	}
	return l
}

// key returns a key no other check of this run uses.
func (s *suite) key(name string) string {
	return "ledgertest-" + name + "-" + strconv.FormatInt(s.keys.Add(1), 10)
}

// now returns the suite's time: the wall clock's, or with Advance the
// time that Advance has moved on since the run began (the steps of a
// ledger on a virtual clock take no time).
func (s *suite) now() time.Time {
	if s.opts.Advance != nil {
		return time.Unix(0, 0).Add(time.Duration(s.advanced.Load()))
	}
	return time.Now()
}

// waitUntil lets the ledgers' clock pass t, as read by now; a check
// waits from a time read after the steps whose expiry it awaits, so
// that slow steps never shorten a wait.
func (s *suite) waitUntil(t time.Time) {
	d := t.Sub(s.now())
	if d <= 0 {
		return
	}
	if s.opts.Advance != nil {
		s.advanced.Add(int64(d))
		s.opts.Advance(d)
		return
	}
	time.Sleep(d) // the store's clock: a real wait, bounded by the TTLs asked for
}

// ctx returns a context for one step, bounded to a minute.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}
