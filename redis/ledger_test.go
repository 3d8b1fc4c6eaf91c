package retryfuseredis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

func newTestLedger(t *testing.T, cfg LedgerConfig) *Ledger {
	t.Helper()
	c := sharedClient(t)
	if cfg.Prefix == "" {
		cfg.Prefix = uniq(t)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = testTimeout
	}
	cfg.AllowWithoutPersistence = true // the shared server keeps nothing
	l, err := NewLedger(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	closeLedger(t, l)
	return l
}

// closeLedger closes l when the test ends, failing the test if a step
// could not be flushed.
func closeLedger(t testing.TB, l *Ledger) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bg(), 5*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

func begin(t *testing.T, l *Ledger, key string, fp ledger.Fingerprint) ledger.Claim {
	t.Helper()
	cl, err := l.Begin(bg(), key, fp)
	if err != nil {
		t.Fatalf("Begin(%q): %v", key, err)
	}
	return cl
}

func wantState(t *testing.T, cl ledger.Claim, state decide.KeyState, uncertain bool) {
	t.Helper()
	if cl.State != state || cl.Uncertain != uncertain {
		t.Fatalf("claim: got state %v uncertain %v, want %v uncertain %v", cl.State, cl.Uncertain, state, uncertain)
	}
}

var fpA, fpB = ledger.Fingerprint{1}, ledger.Fingerprint{2}

func TestLedgerLifecycle(t *testing.T) {
	l := newTestLedger(t, LedgerConfig{})
	cl := begin(t, l, "k", fpA)
	wantState(t, cl, decide.KeyNone, false)
	if len(cl.Token) < 26 {
		t.Fatalf("token %q: want at least 128 random bits", cl.Token)
	}
	wantState(t, begin(t, l, "k", fpA), decide.KeyInFlight, false)
	wantState(t, begin(t, l, "k", fpB), decide.KeyConflict, false)

	if err := l.Complete(bg(), "k", "not-the-token", nil); !errors.Is(err, ledger.ErrToken) {
		t.Fatalf("Complete with a wrong token: got %v, want ledger.ErrToken", err)
	}
	if err := l.Release(bg(), "k", "not-the-token"); !errors.Is(err, ledger.ErrToken) {
		t.Fatalf("Release with a wrong token: got %v, want ledger.ErrToken", err)
	}
	res := &ledger.StoredResponse{StatusCode: 201, Header: http.Header{"Content-Type": {"application/json"}, "X-Two": {"a", "b"}}, Body: []byte(`{"id":7}`)}
	if err := l.Complete(bg(), "k", cl.Token, res); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	res.Body[0] = 'X' // the ledger stored a copy

	got := begin(t, l, "k", fpA)
	wantState(t, got, decide.KeyCompleted, false)
	if got.Stored == nil || got.Stored.StatusCode != 201 || string(got.Stored.Body) != `{"id":7}` ||
		got.Stored.Header.Get("Content-Type") != "application/json" || len(got.Stored.Header["X-Two"]) != 2 {
		t.Fatalf("stored result: got %+v, want 201 with its headers and body", got.Stored)
	}
	wantState(t, begin(t, l, "k", fpB), decide.KeyConflict, false) // conflict beats completed

	if err := l.Release(bg(), "k", cl.Token); !errors.Is(err, ledger.ErrToken) {
		t.Fatalf("Release after Complete: got %v, want ledger.ErrToken", err)
	}
	if err := l.Complete(bg(), "k", cl.Token, res); err != nil {
		t.Fatalf("Complete sent again by the same owner: got %v, want nil (already so)", err)
	}
}

func TestLedgerUncertainAndRelease(t *testing.T) {
	l := newTestLedger(t, LedgerConfig{})
	cl := begin(t, l, "u", fpA)
	if err := l.Uncertain(bg(), "u", cl.Token); err != nil {
		t.Fatal(err)
	}
	held := begin(t, l, "u", fpA)
	wantState(t, held, decide.KeyInFlight, true)
	if held.Token != cl.Token {
		t.Fatalf("an uncertain key's token: got %q, want the owner's %q", held.Token, cl.Token)
	}
	wantState(t, begin(t, l, "u", fpB), decide.KeyConflict, false) // conflict beats uncertain
	if err := l.Complete(bg(), "u", "bogus", nil); !errors.Is(err, ledger.ErrToken) {
		t.Fatalf("Complete of an uncertain key with a wrong token: got %v, want ledger.ErrToken", err)
	}
	if err := l.Uncertain(bg(), "u", cl.Token); err != nil {
		t.Fatalf("Uncertain sent again by the same owner: got %v, want nil (already so)", err)
	}
	// Its outcome learnt: applied.
	if err := l.Complete(bg(), "u", cl.Token, nil); err != nil {
		t.Fatalf("Complete of an uncertain key with its token: got %v, want nil", err)
	}
	wantState(t, begin(t, l, "u", fpA), decide.KeyCompleted, false)
	// Or not applied: free again.
	cl = begin(t, l, "u2", fpA)
	if err := l.Uncertain(bg(), "u2", cl.Token); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(bg(), "u2", cl.Token); err != nil {
		t.Fatalf("Release of an uncertain key with its token: got %v, want nil", err)
	}
	wantState(t, begin(t, l, "u2", fpA), decide.KeyNone, false)

	cl = begin(t, l, "r", fpA)
	if err := l.Release(bg(), "r", cl.Token); err != nil {
		t.Fatal(err)
	}
	wantState(t, begin(t, l, "r", fpB), decide.KeyNone, false) // free again, for any body
}

func TestLedgerStoredBodyBound(t *testing.T) {
	l := newTestLedger(t, LedgerConfig{MaxStoredBody: 4})
	for _, tc := range []struct {
		key    string
		body   string
		stored bool
	}{{"fits", "1234", true}, {"over", "12345", false}} {
		cl := begin(t, l, tc.key, fpA)
		if err := l.Complete(bg(), tc.key, cl.Token, &ledger.StoredResponse{StatusCode: 200, Body: []byte(tc.body)}); err != nil {
			t.Fatal(err)
		}
		got := begin(t, l, tc.key, fpA)
		wantState(t, got, decide.KeyCompleted, false)
		if (got.Stored != nil) != tc.stored {
			t.Fatalf("%s: body of %d bytes, limit 4: stored %v, want %v", tc.key, len(tc.body), got.Stored != nil, tc.stored)
		}
	}
	cl := begin(t, l, "nil", fpA)
	if err := l.Complete(bg(), "nil", cl.Token, nil); err != nil {
		t.Fatal(err)
	}
	if got := begin(t, l, "nil", fpA); got.State != decide.KeyCompleted || got.Stored != nil {
		t.Fatalf("completed without a result: got %+v, want KeyCompleted with Stored nil", got)
	}
}

func TestLedgerExpiry(t *testing.T) {
	c := sharedClient(t)
	l := newTestLedger(t, LedgerConfig{TTL: 150 * time.Millisecond, InFlightTTL: 100 * time.Millisecond})

	cl := begin(t, l, "flight", fpA)
	if pttl := c.PTTL(bg(), l.Key("flight")).Val(); pttl <= 150*time.Millisecond || pttl > 250*time.Millisecond {
		t.Fatalf("in-flight PTTL: got %v, want in (TTL, InFlightTTL+TTL=250ms]", pttl)
	}
	waitUncertain(t, l, "flight", fpA, cl.Token) // an expired claim is uncertain, never free
	waitGone(t, c, l.Key("flight"))
	if err := l.Complete(bg(), "flight", cl.Token, nil); !errors.Is(err, ledger.ErrToken) {
		t.Fatalf("Complete after the key was freed: got %v, want ledger.ErrToken", err)
	}
	wantState(t, begin(t, l, "flight", fpB), decide.KeyNone, false)

	cl = begin(t, l, "done", fpA)
	if err := l.Uncertain(bg(), "done", cl.Token); err != nil {
		t.Fatal(err)
	}
	if pttl := c.PTTL(bg(), l.Key("done")).Val(); pttl <= 100*time.Millisecond || pttl > 150*time.Millisecond {
		t.Fatalf("uncertain PTTL: got %v, want in (100ms, TTL=150ms]", pttl)
	}
	waitGone(t, c, l.Key("done"))
	wantState(t, begin(t, l, "done", fpA), decide.KeyNone, false)
}

// waitUncertain waits (at most 10s) until key's claim has expired: Begin
// answers uncertain, with the owner's token. Until then it must answer in
// flight.
func waitUncertain(t *testing.T, l *Ledger, key string, fp ledger.Fingerprint, token string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cl := begin(t, l, key, fp)
		if cl.Uncertain {
			wantState(t, cl, decide.KeyInFlight, true)
			if cl.Token != token {
				t.Fatalf("expired claim: got token %q, want the owner's %q", cl.Token, token)
			}
			return
		}
		if cl.State != decide.KeyInFlight {
			t.Fatalf("claim of %q before it expired: got %v, want in flight", key, cl.State)
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim of %q not uncertain after 10s", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLedgerLongTTLs pins that the longest TTLs a Duration can hold give
// records that last, not records that expire at once.
func TestLedgerLongTTLs(t *testing.T) {
	c := sharedClient(t)
	l := newTestLedger(t, LedgerConfig{TTL: math.MaxInt64, InFlightTTL: math.MaxInt64})
	const atLeast = int64(100 * 365 * 24 * time.Hour / time.Millisecond)
	cl := begin(t, l, "long", fpA)
	if pttl := pttlMillis(t, c, l.Key("long")); pttl < atLeast {
		t.Fatalf("in-flight PTTL with InFlightTTL MaxInt64: got %dms, want at least %dms", pttl, atLeast)
	}
	if err := l.Complete(bg(), "long", cl.Token, nil); err != nil {
		t.Fatal(err)
	}
	if pttl := pttlMillis(t, c, l.Key("long")); pttl < atLeast {
		t.Fatalf("completed PTTL with TTL MaxInt64: got %dms, want at least %dms", pttl, atLeast)
	}
	c.Del(bg(), l.Key("long"))
}

// TestLedgerBeginSentAgain pins that a Begin the client sends again (the
// reply to the first was lost) finds its own claim, not a duplicate.
func TestLedgerBeginSentAgain(t *testing.T) {
	l := newTestLedger(t, LedgerConfig{})
	for i := range 2 {
		reply, err := l.guarded(bg(), ledgerBeginScript, "again", bucketOf("again"), string(fpA[:]), "tok", l.flightMillis, l.lifeMillis, "")
		if err != nil {
			t.Fatal(err)
		}
		if code := reply[0]; code != int64(0) {
			t.Fatalf("Begin %d with the same token: got code %v, want 0 (claimed)", i, code)
		}
	}
	if err := l.Release(bg(), "again", "tok"); err != nil {
		t.Fatal(err)
	}
}

func TestLedgerOneOwner(t *testing.T) {
	l := newTestLedger(t, LedgerConfig{})
	const n = 32
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		owners int
	)
	for range n {
		wg.Go(func() {
			cl, err := l.Begin(bg(), "race", fpA)
			if err != nil {
				t.Error(err)
				return
			}
			if cl.State == decide.KeyNone {
				mu.Lock()
				owners++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if owners != 1 {
		t.Fatalf("%d concurrent Begins: %d owners, want exactly 1", n, owners)
	}
}

func TestLedgerCorruptRecord(t *testing.T) {
	c := sharedClient(t)
	l := newTestLedger(t, LedgerConfig{})
	c.HSet(bg(), l.Key("bad"), "fp", string(fpA[:]), "s", "c", "r", "\x09garbage")
	if _, err := l.Begin(bg(), "bad", fpA); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Begin on an undecodable record: got %v, want an error wrapping ErrUnavailable", err)
	}
	c.Del(bg(), l.Key("bad"))
}

func TestLedgerUnavailable(t *testing.T) {
	if _, err := NewLedger(deadClient(t), LedgerConfig{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("NewLedger with Redis down: got %v, want an error wrapping ErrUnavailable", err)
	}
	s := startServer(t)
	var unrecorded []string
	var mu sync.Mutex
	l, err := NewLedger(newClient(t, s.Addr()), LedgerConfig{
		AllowWithoutPersistence: true,
		OnUnrecorded: func(key string, err error) {
			mu.Lock()
			unrecorded = append(unrecorded, key)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := l.Begin(bg(), "k", fpA); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Begin with Redis down: got %v, want an error wrapping ErrUnavailable", err)
	}
	for name, f := range map[string]func() error{
		"Complete":  func() error { return l.Complete(bg(), "k", "t", nil) },
		"Release":   func() error { return l.Release(bg(), "k2", "t") },
		"Uncertain": func() error { return l.Uncertain(bg(), "k3", "t") },
	} {
		if err := f(); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s with Redis down: got %v, want an error wrapping ErrUnavailable", name, err)
		}
	}
	if _, err := l.Begin(bg(), "", fpA); !errors.Is(err, retryfuse.ErrInvalidIdempotencyKey) {
		t.Fatalf("empty key: got %v, want ErrInvalidIdempotencyKey", err)
	}
	ctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Close with Redis down: got %v, want an error wrapping ErrUnavailable", err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The three ends, and the cancellation of the failed Begin's claim:
	// its error, a deadline passed while go-redis dialled again, does not
	// prove that the script never left.
	if len(unrecorded) != 4 {
		t.Fatalf("reported unrecorded: got %q, want 4 steps", unrecorded)
	}
	if _, err := l.Begin(bg(), "k", fpA); !errors.Is(err, ErrClosed) || !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Begin after Close: got %v, want an error wrapping ErrClosed and ledger.ErrUnavailable", err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	cases := []*ledger.StoredResponse{
		{StatusCode: 200},
		{StatusCode: 503, Header: http.Header{"Retry-After": {"1"}}, Body: []byte{}},
		{StatusCode: 201, Header: http.Header{"A": {"1", "2"}, "B": {""}}, Body: bytes.Repeat([]byte{0, 255}, 1000)},
	}
	for i, want := range cases {
		got, err := decodeResponse(encodeResponse(want))
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if got.StatusCode != want.StatusCode || !bytes.Equal(got.Body, want.Body) || len(got.Header) != len(want.Header) {
			t.Fatalf("case %d: got %+v, want %+v", i, got, want)
		}
		for k, vs := range want.Header {
			if len(got.Header[k]) != len(vs) {
				t.Fatalf("case %d: header %s: got %q, want %q", i, k, got.Header[k], vs)
			}
		}
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add(encodeResponse(&ledger.StoredResponse{StatusCode: 200, Header: http.Header{"A": {"b"}}, Body: []byte("x")}))
	f.Add([]byte{codecVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{codecVersion, 200, 1, 0x80, 0x80, 0x80, 0x80, 0x08})
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := decodeResponse(b)
		if err != nil {
			return
		}
		again, err := decodeResponse(encodeResponse(res))
		if err != nil || again.StatusCode != res.StatusCode || !bytes.Equal(again.Body, res.Body) {
			t.Fatalf("re-encoding a decoded record: got %+v, %v; want %+v", again, err, res)
		}
	})
}

// A result's headers are bounded too: 100 values, 32 KiB.
func TestLedgerStoredHeaderBound(t *testing.T) {
	l := newTestLedger(t, LedgerConfig{})
	many := http.Header{}
	for i := range 101 {
		many.Add(fmt.Sprintf("X-H%d", i), "v")
	}
	for _, tc := range []struct {
		key    string
		header http.Header
		stored bool
	}{
		{"small", http.Header{"Content-Type": {"application/json"}}, true},
		{"large", http.Header{"X-Big": {strings.Repeat("a", 33<<10)}}, false},
		{"many", many, false},
	} {
		cl := begin(t, l, tc.key, fpA)
		if err := l.Complete(bg(), tc.key, cl.Token, &ledger.StoredResponse{StatusCode: 201, Header: tc.header, Body: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		got := begin(t, l, tc.key, fpA)
		wantState(t, got, decide.KeyCompleted, false)
		if (got.Stored != nil) != tc.stored {
			t.Fatalf("%s: stored %v, want %v", tc.key, got.Stored != nil, tc.stored)
		}
	}
}

// Only a failed dial proves that a script never left: any other failure
// may come after it was written, and a Begin's claim is then cancelled.
func TestNeverSent(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{dial, true},
		{fmt.Errorf("%w: %w", ErrUnavailable, dial), true},
		{unavailable(nil, "", dial), true},
		// The client's last dial, which may have been another call's.
		{&unavailableError{err: context.DeadlineExceeded, dial: dial}, false},
		{read, false},
		{context.DeadlineExceeded, false},
		{io.EOF, false},
	} {
		if got := neverSent(tc.err); got != tc.want {
			t.Errorf("neverSent(%v): got %v, want %v", tc.err, got, tc.want)
		}
	}
}
