package share

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// The flights alone (flights.go): who leads and who follows, the wait and
// its end, the landing, and the deadline the shared call plans against.

func TestJoinFirstLeadsOthersFollow(t *testing.T) {
	ctx := testContext(t)
	var fs Flights
	var ids atomic.Uint64
	a, leads := fs.Join("k", newRequest(t, ctx), &ids)
	if !leads {
		t.Fatal("the first caller of a key: got a follower, want the leader")
	}
	b, leads := fs.Join("k", newRequest(t, ctx), &ids)
	if leads || b != a {
		t.Errorf("the second caller of a key: got leader %v of flight %p, want a follower of %p", leads, b, a)
	}
	c, leads := fs.Join("other", newRequest(t, ctx), &ids)
	if !leads || c == a {
		t.Errorf("the first caller of another key: got leader %v of flight %p, want the leader of a flight of its own", leads, c)
	}
	if a.ID() != 1 || b.ID() != 1 || c.ID() != 2 {
		t.Errorf("ids: got %d, %d, %d, want 1, 1, 2", a.ID(), b.ID(), c.ID())
	}
	d, _ := fs.Join("unnumbered", newRequest(t, ctx), nil)
	if d.ID() != 0 {
		t.Errorf("id without a counter: got %d, want 0", d.ID())
	}
	for _, f := range []*Flight{a, c, d} {
		fs.Land(f, Result{})
	}
	// Every caller collects the result; a key landed is free again.
	for _, w := range []struct {
		f      *Flight
		leader bool
	}{{a, true}, {a, false}, {c, true}, {d, true}} {
		if res, _ := fs.Wait(ctx, w.f, w.leader); res == nil {
			t.Errorf("wait after the landing: got no result")
		}
	}
	if _, leads := fs.Join("k", newRequest(t, ctx), &ids); !leads {
		t.Error("the first caller after a landing: got a follower, want the leader of a new flight")
	} else {
		fs.Land(fs.m["k"], Result{})
	}
}

func TestRequestIsTheLeadersDetachedFromItsCancellation(t *testing.T) {
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(testContext(t), key{}, "leader's"))
	var fs Flights
	req := newRequest(t, ctx)
	f, _ := fs.Join("k", req, nil)
	call := f.Request()
	if call == req {
		t.Fatal("the shared call's request is the leader's own: want a clone")
	}
	if call.URL.String() != req.URL.String() || call.Method != req.Method {
		t.Errorf("the shared call's request: got %s %s, want %s %s", call.Method, call.URL, req.Method, req.URL)
	}
	if got := call.Context().Value(key{}); got != "leader's" {
		t.Errorf("value of the leader's context: got %v, want leader's", got)
	}
	cancel()
	if err := call.Context().Err(); err != nil {
		t.Errorf("the call's context after the leader's cancel: got %v, want none", err)
	}
	fs.Land(f, Result{})
	if err := call.Context().Err(); err != context.Canceled {
		t.Errorf("the call's context after the landing: got %v, want %v", err, context.Canceled)
	}
	if res, _ := fs.Wait(ctx, f, true); res == nil {
		t.Error("the leader's wait after the landing: got no result")
	}
}

func TestEveryCallerGetsTheOneResult(t *testing.T) {
	const callers = 32
	ctx := testContext(t)
	var fs Flights
	type joined struct {
		f      *Flight
		leader bool
	}
	joins := make(chan joined, callers)
	results := make(chan waited, callers)
	for range callers {
		req := newRequest(t, ctx)
		go func() {
			f, leader := fs.Join("k", req, nil)
			joins <- joined{f, leader}
			res, stream := fs.Wait(ctx, f, leader)
			results <- waited{res, stream}
		}()
	}
	var f *Flight
	leaders := 0
	for range callers {
		j := await(t, joins, "join")
		if f == nil {
			f = j.f
		}
		if j.f != f {
			t.Fatal("callers of one key joined different flights")
		}
		if j.leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("leaders: got %d, want 1", leaders)
	}
	callErr := errors.New("the shared call's error")
	fs.Land(f, Result{Err: callErr})
	for range callers {
		w := await(t, results, "result")
		if w.res == nil || w.res.Err != callErr || w.stream != nil {
			t.Errorf("a caller's result: got %+v, want the shared error and no stream", w)
		}
	}
}

func TestLastCallerToGoCancelsTheCallAndWaitsForIt(t *testing.T) {
	for _, leaderLast := range []bool{true, false} {
		name := "the follower last"
		if leaderLast {
			name = "the leader last"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			leaderCtx, cancelLeader := context.WithCancel(ctx)
			followerCtx, cancelFollower := context.WithCancel(ctx)
			var fs Flights
			f, _ := fs.Join("k", newRequest(t, leaderCtx), nil)
			fs.Join("k", newRequest(t, followerCtx), nil)
			call := f.Request().Context()

			firstCtx, cancelFirst, firstLeads := followerCtx, cancelFollower, false
			lastCtx, cancelLast, lastLeads := leaderCtx, cancelLeader, true
			if !leaderLast {
				firstCtx, cancelFirst, firstLeads = leaderCtx, cancelLeader, true
				lastCtx, cancelLast, lastLeads = followerCtx, cancelFollower, false
			}

			cancelFirst()
			if res, stream := fs.Wait(firstCtx, f, firstLeads); res != nil || stream != nil {
				t.Errorf("the first to go: got %v, %v, want nothing", res, stream)
			}
			if err := call.Err(); err != nil {
				t.Fatalf("the call's context after one of two callers went: got %v, want none", err)
			}

			cancelLast()
			last := waitOn(lastCtx, &fs, f, lastLeads)
			await(t, call.Done(), "the call's cancel by the last caller")
			if _, leads := fs.Join("k", newRequest(t, ctx), nil); !leads {
				t.Error("a caller of the key of a call being cancelled joined it: want a new flight")
			} else {
				fs.Land(fs.m["k"], Result{})
			}
			select {
			case <-last:
				t.Fatal("the last caller returned before the call ended")
			default:
			}
			fs.Land(f, Result{Err: call.Err()}) // the call ends, cancelled
			if w := await(t, last, "the last caller's return"); w.res != nil || w.stream != nil {
				t.Errorf("the last to go: got %+v, want nothing", w)
			}
		})
	}
}

func TestLatestIsTheLatestDeadlineOfTheCallers(t *testing.T) {
	const none = time.Duration(-1)
	tests := []struct {
		name  string
		joins []time.Duration // each caller's deadline after base; none: no deadline
		want  time.Duration   // none: no deadline
	}{
		{"one", []time.Duration{time.Hour}, time.Hour},
		{"a later one moves it", []time.Duration{time.Hour, 3 * time.Hour, 2 * time.Hour}, 3 * time.Hour},
		{"an earlier one does not shorten it", []time.Duration{2 * time.Hour, time.Hour}, 2 * time.Hour},
		{"the leader without", []time.Duration{none, time.Hour}, none},
		{"a follower without", []time.Duration{time.Hour, none}, none},
		{"none once one had none", []time.Duration{time.Hour, none, 5 * time.Hour}, none},
	}
	base := time.Now().Add(time.Hour) // far enough that no deadline passes in the test
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fs Flights
			var f *Flight
			for _, d := range tt.joins {
				ctx := context.Background()
				if d != none {
					var cancel context.CancelFunc
					ctx, cancel = context.WithDeadline(ctx, base.Add(d))
					defer cancel()
				}
				f, _ = fs.Join("k", newRequest(t, ctx), nil)
			}
			got, ok := f.Latest()
			switch {
			case tt.want == none && ok:
				t.Errorf("Latest() = %v, want none", got)
			case tt.want != none && (!ok || !got.Equal(base.Add(tt.want))):
				t.Errorf("Latest() = %v, %v, want %v", got, ok, base.Add(tt.want))
			}
			fs.Land(f, Result{})
		})
	}
}

func TestLatestOutlivesTheCallerWhoseDeadlineItIs(t *testing.T) {
	base := time.Now().Add(time.Hour)
	early, cancelEarly := context.WithDeadline(context.Background(), base)
	defer cancelEarly()
	late, cancelLate := context.WithDeadline(context.Background(), base.Add(time.Hour))
	var fs Flights
	f, _ := fs.Join("k", newRequest(t, early), nil)
	fs.Join("k", newRequest(t, late), nil)
	cancelLate()
	if res, _ := fs.Wait(late, f, false); res != nil {
		t.Fatalf("a follower who went: got %v, want no result", res)
	}
	if got, ok := f.Latest(); !ok || !got.Equal(base.Add(time.Hour)) {
		t.Errorf("Latest() after the latest caller went = %v, %v, want %v", got, ok, base.Add(time.Hour))
	}
	fs.Land(f, Result{})
	fs.Wait(early, f, true)
}
