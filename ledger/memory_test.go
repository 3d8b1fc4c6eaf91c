package ledger

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/sentinel"
	"github.com/retryfuse/retryfuse/internal/stored"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ledgerOp uint8

const (
	opBegin ledgerOp = iota
	opComplete
	opRelease
	opUncertain
	opAdvance
)

// Which token a step ends a claim with.
const (
	tokOwner    = iota // the token of the latest KeyNone claim
	tokPrevious        // the token of the claim before it
	tokBogus           // a token the ledger never issued
)

type ledgerStep struct {
	op      ledgerOp
	fp      byte            // opBegin
	tok     int             // opComplete, opRelease, opUncertain
	res     *StoredResponse // opComplete
	advance time.Duration   // opAdvance
	// Expectations.
	state     decide.KeyState
	uncertain bool
	stored    string // "-" for Stored nil, else the stored body
	err       error
}

func TestMemoryLedgerSteps(t *testing.T) {
	res := &StoredResponse{StatusCode: 201, Header: http.Header{"X-Id": {"7"}}, Body: []byte("created")}
	big := &StoredResponse{StatusCode: 200, Body: []byte("longer than eight bytes")}
	begin := func(fp byte, state decide.KeyState, stored string) ledgerStep {
		return ledgerStep{op: opBegin, fp: fp, state: state, stored: stored}
	}
	beginUncertain := ledgerStep{op: opBegin, fp: 1, state: decide.KeyInFlight, uncertain: true, stored: "-"}
	end := func(op ledgerOp, tok int, err error) ledgerStep {
		return ledgerStep{op: op, tok: tok, res: res, err: err}
	}
	advance := func(d time.Duration) ledgerStep { return ledgerStep{op: opAdvance, advance: d} }

	tests := []struct {
		name  string
		steps []ledgerStep
	}{
		{"owned, completed with a stored body, then replayed", []ledgerStep{
			begin(1, decide.KeyNone, "-"), begin(1, decide.KeyInFlight, "-"), end(opComplete, tokOwner, nil),
			begin(1, decide.KeyCompleted, "created"), begin(1, decide.KeyCompleted, "created"),
		}},
		{"released key is free again", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opRelease, tokOwner, nil), begin(1, decide.KeyNone, "-"), begin(1, decide.KeyInFlight, "-"),
		}},
		{"released key takes another body", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opRelease, tokOwner, nil), begin(2, decide.KeyNone, "-"), begin(1, decide.KeyConflict, "-"),
		}},
		{"uncertain key is held until its TTL, then free", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opUncertain, tokOwner, nil), beginUncertain,
			advance(testLedgerTTL - time.Nanosecond), beginUncertain,
			advance(time.Nanosecond), begin(1, decide.KeyNone, "-"),
		}},
		{"completed key expires after its TTL", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opComplete, tokOwner, nil),
			advance(testLedgerTTL - time.Nanosecond), begin(1, decide.KeyCompleted, "created"),
			advance(time.Nanosecond), begin(1, decide.KeyNone, "-"),
		}},
		{"conflict beats in flight", []ledgerStep{
			begin(1, decide.KeyNone, "-"), begin(2, decide.KeyConflict, "-"), begin(1, decide.KeyInFlight, "-"),
		}},
		{"conflict beats completed", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opComplete, tokOwner, nil), begin(2, decide.KeyConflict, "-"), begin(1, decide.KeyCompleted, "created"),
		}},
		{"conflict beats uncertain", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opUncertain, tokOwner, nil), begin(2, decide.KeyConflict, "-"), beginUncertain,
		}},
		{"complete without a result stores none", []ledgerStep{
			begin(1, decide.KeyNone, "-"), {op: opComplete, tok: tokOwner}, begin(1, decide.KeyCompleted, "-"),
		}},
		{"a body over MaxStoredBody is not stored", []ledgerStep{
			begin(1, decide.KeyNone, "-"), {op: opComplete, tok: tokOwner, res: big}, begin(1, decide.KeyCompleted, "-"),
		}},
		{"an expired claim is uncertain, never free", []ledgerStep{
			begin(1, decide.KeyNone, "-"), advance(testLedgerInFlightTTL - time.Nanosecond), begin(1, decide.KeyInFlight, "-"),
			advance(time.Nanosecond), beginUncertain, end(opComplete, tokBogus, ErrToken), beginUncertain,
		}},
		{"an expired claim is held for TTL from its expiry, then free", []ledgerStep{
			begin(1, decide.KeyNone, "-"), advance(testLedgerInFlightTTL + testLedgerTTL - time.Nanosecond), beginUncertain,
			advance(time.Nanosecond), begin(1, decide.KeyNone, "-"),
		}},
		{"the owner of an expired claim may still complete it", []ledgerStep{
			begin(1, decide.KeyNone, "-"), advance(testLedgerInFlightTTL), end(opComplete, tokOwner, nil),
			begin(1, decide.KeyCompleted, "created"), end(opUncertain, tokOwner, ErrToken),
		}},
		{"the owner of an expired claim may still release it", []ledgerStep{
			begin(1, decide.KeyNone, "-"), advance(testLedgerInFlightTTL), end(opRelease, tokOwner, nil), begin(1, decide.KeyNone, "-"),
		}},
		{"the owner of an expired claim may report it uncertain, once: held for TTL from then", []ledgerStep{
			begin(1, decide.KeyNone, "-"), advance(testLedgerInFlightTTL), advance(testLedgerTTL / 2), end(opUncertain, tokOwner, nil),
			end(opUncertain, tokOwner, ErrToken), advance(testLedgerTTL - time.Nanosecond), beginUncertain,
			advance(time.Nanosecond), begin(1, decide.KeyNone, "-"),
		}},
		{"a stale owner cannot end the new owner's claim", []ledgerStep{
			begin(1, decide.KeyNone, "-"), advance(testLedgerInFlightTTL + testLedgerTTL), begin(1, decide.KeyNone, "-"),
			end(opComplete, tokPrevious, ErrToken), end(opRelease, tokPrevious, ErrToken),
			end(opUncertain, tokPrevious, ErrToken), begin(1, decide.KeyInFlight, "-"),
			end(opComplete, tokOwner, nil), begin(1, decide.KeyCompleted, "created"),
		}},
		{"a wrong token changes nothing", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opComplete, tokBogus, ErrToken), end(opRelease, tokBogus, ErrToken),
			end(opUncertain, tokBogus, ErrToken), begin(1, decide.KeyInFlight, "-"), end(opRelease, tokOwner, nil),
		}},
		{"a claim ends once", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opComplete, tokOwner, nil), end(opComplete, tokOwner, ErrToken),
			end(opRelease, tokOwner, ErrToken), end(opUncertain, tokOwner, ErrToken), begin(1, decide.KeyCompleted, "created"),
		}},
		{"an uncertain claim is ended once its outcome is learnt: applied", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opUncertain, tokOwner, nil), end(opUncertain, tokOwner, ErrToken),
			end(opComplete, tokBogus, ErrToken), beginUncertain,
			{op: opComplete, tok: tokOwner}, begin(1, decide.KeyCompleted, "-"), end(opRelease, tokOwner, ErrToken),
		}},
		{"an uncertain claim is ended once its outcome is learnt: not applied", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opUncertain, tokOwner, nil), end(opRelease, tokOwner, nil),
			begin(1, decide.KeyNone, "-"),
		}},
		{"a released token is stale", []ledgerStep{
			begin(1, decide.KeyNone, "-"), end(opRelease, tokOwner, nil), end(opRelease, tokOwner, ErrToken),
			end(opComplete, tokOwner, ErrToken), begin(1, decide.KeyNone, "-"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, clock := newTestLedger(t, 0)
			ctx := context.Background()
			var tokens []string
			token := func(which int) string {
				switch {
				case which == tokBogus:
					return "bogus"
				case which == tokPrevious && len(tokens) > 1:
					return tokens[len(tokens)-2]
				case which == tokOwner && len(tokens) > 0:
					return tokens[len(tokens)-1]
				}
				t.Fatalf("no token for %d", which)
				return ""
			}
			for i, s := range tt.steps {
				var err error
				switch s.op {
				case opAdvance:
					clock.Advance(s.advance)
					continue
				case opBegin:
					var c Claim
					c, err = l.Begin(ctx, "k", ledgerFP(s.fp))
					require.NoError(t, err, "step %d", i)
					assert.Equal(t, s.state, c.State, "step %d: got state %s, want %s", i, c.State, s.state)
					assert.Equal(t, s.uncertain, c.Uncertain, "step %d: uncertain", i)
					got := "-"
					if c.Stored != nil {
						got = string(c.Stored.Body)
						assert.Equal(t, res.StatusCode, c.Stored.StatusCode, "step %d: stored status", i)
						assert.Equal(t, res.Header, c.Stored.Header, "step %d: stored header", i)
					}
					assert.Equal(t, s.stored, got, "step %d: stored body", i)
					switch {
					case c.State == decide.KeyNone:
						require.NotEmpty(t, c.Token, "step %d: owner without a token", i)
						tokens = append(tokens, c.Token)
					case c.Uncertain:
						// The token that may end the uncertain claim once its
						// outcome is known: the owner's.
						assert.Equal(t, token(tokOwner), c.Token, "step %d: an uncertain key's token", i)
					default:
						assert.Empty(t, c.Token, "step %d: got a token without owning the key", i)
					}
					continue
				case opComplete:
					err = l.Complete(ctx, "k", token(s.tok), s.res)
				case opRelease:
					err = l.Release(ctx, "k", token(s.tok))
				case opUncertain:
					err = l.Uncertain(ctx, "k", token(s.tok))
				}
				if s.err == nil {
					assert.NoError(t, err, "step %d", i)
				} else {
					assert.ErrorIs(t, err, s.err, "step %d: got %v, want %v", i, err, s.err)
				}
			}
		})
	}
}

func TestMemoryLedgerConcurrentBeginOneOwner(t *testing.T) {
	const goroutines, rounds = 64, 200
	l, _ := newTestLedger(t, 0)
	ctx := context.Background()
	for round := range rounds {
		key := "k" + strconv.Itoa(round)
		var owners, inFlight atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range goroutines {
			wg.Go(func() {
				<-start
				c, err := l.Begin(ctx, key, ledgerFP(1))
				if err != nil {
					t.Errorf("Begin: %v", err)
					return
				}
				switch c.State {
				case decide.KeyNone:
					owners.Add(1)
				case decide.KeyInFlight:
					inFlight.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if got := owners.Load(); got != 1 {
			t.Fatalf("round %d: got %d owners, want 1", round, got)
		}
		if got := inFlight.Load(); got != goroutines-1 {
			t.Fatalf("round %d: got %d in flight, want %d", round, got, goroutines-1)
		}
	}
}

// Owners come and go on one key: at no moment may two hold it.
func TestMemoryLedgerConcurrentOwnershipExclusive(t *testing.T) {
	l, _ := newTestLedger(t, 0)
	ctx := context.Background()
	var holders, claims atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 200 {
				c, err := l.Begin(ctx, "k", ledgerFP(1))
				if err != nil || c.State != decide.KeyNone {
					continue
				}
				claims.Add(1)
				if n := holders.Add(1); n != 1 {
					t.Errorf("got %d concurrent owners, want 1", n)
				}
				holders.Add(-1)
				if err := l.Release(ctx, "k", c.Token); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	assert.Positive(t, claims.Load(), "no goroutine ever owned the key")
}

func TestMemoryLedgerDeepCopies(t *testing.T) {
	l, _ := newTestLedger(t, 0)
	ctx := context.Background()
	res := &StoredResponse{StatusCode: 200, Header: http.Header{"A": {"1"}}, Body: []byte("body")}
	c := ledgerBegin(t, l, "k", decide.KeyNone)
	require.NoError(t, l.Complete(ctx, "k", c.Token, res))
	res.Header.Set("A", "changed")
	res.Header.Set("B", "added")
	res.Body[0] = 'X'

	want := &StoredResponse{StatusCode: 200, Header: http.Header{"A": {"1"}}, Body: []byte("body")}
	got := ledgerBegin(t, l, "k", decide.KeyCompleted)
	require.Equal(t, want, got.Stored, "the caller's changes after Complete reached the ledger")
	got.Stored.Header["A"][0] = "changed"
	got.Stored.Body[0] = 'X'
	got.Stored.StatusCode = 500
	again := ledgerBegin(t, l, "k", decide.KeyCompleted)
	assert.Equal(t, want, again.Stored, "changes to a handed-out copy reached the ledger")
}

func TestMemoryLedgerEmptyKey(t *testing.T) {
	l, _ := newTestLedger(t, 0)
	_, err := l.Begin(context.Background(), "", ledgerFP(1))
	assert.ErrorIs(t, err, sentinel.ErrInvalidIdempotencyKey)
	assert.Equal(t, 0, l.len())
}

func TestMemoryLedgerZeroValue(t *testing.T) {
	var l Memory
	ctx := context.Background()
	c, err := l.Begin(ctx, "k", ledgerFP(1))
	require.NoError(t, err)
	require.Equal(t, decide.KeyNone, c.State)
	body := make([]byte, defaultMaxStoredBody)
	require.NoError(t, l.Complete(ctx, "k", c.Token, &StoredResponse{StatusCode: 200, Body: body}))
	c, err = l.Begin(ctx, "k", ledgerFP(1))
	require.NoError(t, err)
	require.NotNil(t, c.Stored, "a body of exactly the default MaxStoredBody was not stored")
	assert.Len(t, c.Stored.Body, defaultMaxStoredBody)
	assert.Equal(t, 1, l.lenAt(time.Now()))
}

// A result's headers are bounded, as its body is: a result with more than
// 100 header values or 32 KiB of them completes the key unstored.
func TestMemoryLedgerStoredHeaderBound(t *testing.T) {
	l, _ := newTestLedger(t, 0)
	ctx := context.Background()
	many := http.Header{}
	for i := range stored.MaxHeaderFields + 1 {
		many.Add(fmt.Sprintf("X-H%d", i), "v")
	}
	for i, tc := range []struct {
		header http.Header
		stored bool
	}{
		{http.Header{"Content-Type": {"application/json"}}, true},
		{http.Header{"X-Big": {strings.Repeat("a", stored.MaxHeaderBytes)}}, false},
		{many, false},
	} {
		key := fmt.Sprint("k", i)
		c := ledgerBegin(t, l, key, decide.KeyNone)
		require.NoError(t, l.Complete(ctx, key, c.Token, &StoredResponse{StatusCode: 201, Header: tc.header}))
		got := ledgerBegin(t, l, key, decide.KeyCompleted)
		assert.Equalf(t, tc.stored, got.Stored != nil, "case %d: stored %v, want %v", i, got.Stored != nil, tc.stored)
	}
}
