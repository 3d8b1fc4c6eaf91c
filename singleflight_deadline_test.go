package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// A shared call plans against the deadline of the callers who joined it:
// the latest, or none once one has none. It gives up at once on a
// Retry-After that no caller would wait for, as an unshared call does, and
// waits for one that a caller would.

// deadlineOf returns ctx with a deadline d after now on clk, or ctx itself
// when d is zero.
func deadlineOf(t *testing.T, ctx context.Context, clk *fakeClock, d time.Duration) context.Context {
	t.Helper()
	if d == 0 {
		return ctx
	}
	ctx, cancel := context.WithDeadline(ctx, clk.Now().Add(d))
	t.Cleanup(cancel)
	return ctx
}

func TestShareReadsCallKeepsTheLatestDeadlineOfItsCallers(t *testing.T) {
	const retryAfter = 6 * time.Second
	tests := []struct {
		name     string
		leader   time.Duration // the first caller's deadline; 0: none
		follower time.Duration // a second caller's, joining before the answer; 0: none; -1: no second caller
		attempts int32
	}{
		{"one caller whose deadline comes before the Retry-After: the 503 at once", 5 * time.Second, -1, 1},
		{"both callers' deadlines before the Retry-After: the 503 at once", 5 * time.Second, 4 * time.Second, 1},
		{"a follower whose deadline is past the Retry-After: the call waits for it", 5 * time.Second, 10 * time.Second, 2},
		{"a leader whose deadline is past the Retry-After, a follower's before: the call waits", 10 * time.Second, 5 * time.Second, 2},
		{"a follower without a deadline: the call waits", 5 * time.Second, 0, 2},
		{"a leader without a deadline: the call waits", 0, 5 * time.Second, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noGoroutineLeft(t)
			clk := newFakeClock()
			gate := make(chan struct{})
			var sent atomic.Int32
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if sent.Add(1) > 1 {
					return textResponse(req, http.StatusOK, "ok"), nil
				}
				select {
				case <-gate: // every caller has joined
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
				resp := textResponse(req, http.StatusServiceUnavailable, "busy")
				resp.Header.Set("Retry-After", "6")
				return resp, nil
			})
			log := newShareLog()
			var gave giveUpLog
			tr := newTransport(t, clk, &Transport{
				Base: base,
				Reads: ReadPolicy{
					Share: true,
				},
				Retry: RetryPolicy{
					Budget: budget.Unlimited(),
				},
				Hooks: Hooks{Policy: log.hook, GiveUp: gave.hook},
			})

			calls := []*asyncCall{goDo(tr, getReq(t, deadlineOf(t, testCtx(t), clk, tt.leader), "http://dep.test/"))}
			log.await(t, actionLed, 1)
			if tt.follower >= 0 {
				calls = append(calls, goDo(tr, getReq(t, deadlineOf(t, testCtx(t), clk, tt.follower), "http://dep.test/")))
				log.await(t, actionFollowed, 1)
			}
			close(gate)

			want, wantBody := http.StatusOK, "ok"
			if tt.attempts == 1 {
				want, wantBody = http.StatusServiceUnavailable, "busy"
			}
			for i, c := range calls {
				if c.wait(t); c.err != nil || c.resp.StatusCode != want || c.body != wantBody {
					t.Fatalf("caller %d: got %v, %v, %q; want %d %q", i, c.resp, c.err, c.body, want, wantBody)
				}
			}
			if got := sent.Load(); got != tt.attempts {
				t.Errorf("attempts sent: got %d, want %d", got, tt.attempts)
			}
			sleeps := clk.Sleeps()
			if tt.attempts == 1 {
				if len(sleeps) != 0 {
					t.Errorf("waits: got %v, want none", sleeps)
				}
				if n := gave.matching(errRetryAfterTooLong); n != 1 {
					t.Errorf("GiveUp with retry_after_too_long: got %d, want 1", n)
				}
			} else if len(sleeps) != 1 || sleeps[0] < retryAfter {
				t.Errorf("waits: got %v, want one of the Retry-After, %v at least", sleeps, retryAfter)
			}
		})
	}
}

// textResponse is an answer of code with body to req.
func textResponse(req *http.Request, code int, body string) *http.Response {
	return &http.Response{StatusCode: code, Status: strconv.Itoa(code) + " " + http.StatusText(code), Header: http.Header{},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}
}

// An attempt of a shared call keeps its AttemptTimeout even when the
// deadline in force as it starts comes first: a caller without a deadline
// who joins after it started still gets the retry, not an attempt left
// without a bound when the first caller's deadline passed.
func TestShareReadsAttemptKeepsItsTimeoutPastALeaderDeadline(t *testing.T) {
	noGoroutineLeft(t)
	clk := newFakeClock()
	start := clk.Now() // the fake clock stands still: every attempt starts at it
	leaderDL := start.Add(100 * time.Millisecond)
	var (
		sent     atomic.Int32
		firstDLs [2]time.Time // the first attempt's deadline, asked before and after the second caller joined
		firstOK  [2]bool
		asked    = make(chan struct{})
		joined   = make(chan struct{})
	)
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if sent.Add(1) == 1 {
			// The attempt is cut at its own deadline (its start plus
			// 250ms), past the first caller's, or when the last caller
			// goes: its context reports that deadline, and no other as
			// callers join.
			firstDLs[0], firstOK[0] = req.Context().Deadline()
			close(asked)
			select {
			case <-joined:
			case <-req.Context().Done():
			}
			firstDLs[1], firstOK[1] = req.Context().Deadline()
			<-req.Context().Done() // the first attempt hangs until it is cut
			return nil, req.Context().Err()
		}
		return textResponse(req, http.StatusOK, "ok"), nil
	})
	log := newShareLog()
	tr := newTransport(t, clk, &Transport{
		Base: base,
		Reads: ReadPolicy{
			Share: true,
		},
		Retry: RetryPolicy{
			Budget:         budget.Unlimited(),
			AttemptTimeout: 250 * time.Millisecond,
		},
		Hooks: Hooks{Policy: log.hook},
	})

	leaderCtx, cancel := context.WithDeadline(testCtx(t), leaderDL)
	defer cancel()
	leader := goDo(tr, getReq(t, leaderCtx, "http://dep.test/"))
	log.await(t, actionLed, 1)
	select { // the first attempt began under the first caller's deadline alone
	case <-asked:
	case <-time.After(callWait):
		t.Fatal("the first attempt did not come")
	}
	follower := goDo(tr, getReq(t, testCtx(t), "http://dep.test/"))
	log.await(t, actionFollowed, 1)
	close(joined)

	if leader.wait(t); !errors.Is(leader.err, context.DeadlineExceeded) {
		t.Errorf("the first caller: got %v, %v; want its deadline exceeded", leader.resp, leader.err)
	}
	if follower.wait(t); follower.err != nil || follower.resp.StatusCode != http.StatusOK || follower.body != "ok" {
		t.Fatalf("the caller without a deadline: got %v, %v, %q; want the retry's 200", follower.resp, follower.err, follower.body)
	}
	if got := sent.Load(); got != 2 {
		t.Errorf("attempts sent: got %d, want 2 (the first cut by AttemptTimeout, then the retry)", got)
	}
	for i, when := range []string{"before", "after"} {
		if want := start.Add(250 * time.Millisecond); !firstOK[i] || !firstDLs[i].Equal(want) {
			t.Errorf("the first attempt's deadline, %s the second caller joined: got %v (%v), want its start plus AttemptTimeout, %v",
				when, firstDLs[i], firstOK[i], want)
		}
	}
}
