package share

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// The shared result (result.go): the body read once, up to the bound, and
// each caller's copy of it; over the bound, the stream left to the leader.

func TestEachCallersCopyIsIndependent(t *testing.T) {
	ctx := testContext(t)
	var fs Flights
	f, _ := fs.Join("k", newRequest(t, ctx), nil)
	orig := newBody("hello, world")
	resp := response(orig, -1)
	resp.Trailer = http.Header{"Checksum": {"abc"}}
	res := f.Collect(resp, nil, 1<<10)
	if !orig.closed.Load() {
		t.Error("the shared body, read whole: not closed")
	}
	reqA, reqB := newRequest(t, ctx), newRequest(t, ctx)
	a, okA := res.For(reqA, nil)
	b, okB := res.For(reqB, nil)
	if !okA || !okB || a == nil || b == nil || a == b {
		t.Fatalf("copies: got %p (%v) and %p (%v), want two of their own", a, okA, b, okB)
	}
	if a.Request != reqA || b.Request != reqB {
		t.Error("a copy's Request is not its caller's")
	}
	if got, err := readAll(t, a); got != "hello, world" || err != nil {
		t.Errorf("the first copy's body: got %q, %v, want %q", got, err, "hello, world")
	}
	if got, err := readAll(t, b); got != "hello, world" || err != nil {
		t.Errorf("the second copy's body, after the first was read: got %q, %v, want %q", got, err, "hello, world")
	}
	a.Header.Set("Content-Type", "changed")
	a.Trailer.Set("Checksum", "changed")
	if got := b.Header.Get("Content-Type"); got != "text/plain" {
		t.Errorf("another copy's header after one changed: got %q, want text/plain", got)
	}
	if got := b.Trailer.Get("Checksum"); got != "abc" {
		t.Errorf("another copy's trailer after one changed: got %q, want abc", got)
	}
	c, _ := res.For(reqA, nil)
	if got := c.Header.Get("Content-Type"); got != "text/plain" {
		t.Errorf("a later copy's header: got %q, want text/plain", got)
	}
	fs.Land(f, res)
	fs.Wait(ctx, f, true)
}

func TestCollectShareableBodies(t *testing.T) {
	tests := []struct {
		name string
		body func() io.ReadCloser
		n    int64
		want string
	}{
		{"exactly the bound", func() io.ReadCloser { return newBody("12345") }, 5, "12345"},
		{"exactly the bound, its length unknown", func() io.ReadCloser { return newBody("12345") }, -1, "12345"},
		{"empty, its length unknown", func() io.ReadCloser { return newBody("") }, -1, ""},
		{"NoBody", func() io.ReadCloser { return http.NoBody }, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			var fs Flights
			f, _ := fs.Join("k", newRequest(t, ctx), nil)
			res := f.Collect(response(tt.body(), tt.n), nil, 5)
			for i := range 2 {
				resp, ok := res.For(newRequest(t, ctx), nil)
				if !ok || resp == nil {
					t.Fatalf("copy %d: got %v, %v, want a response", i, resp, ok)
				}
				if got, err := readAll(t, resp); got != tt.want || err != nil {
					t.Errorf("copy %d's body: got %q, %v, want %q", i, got, err, tt.want)
				}
			}
			fs.Land(f, res)
			fs.Wait(ctx, f, true)
		})
	}
}

func TestCollectWithoutABody(t *testing.T) {
	ctx := testContext(t)
	var fs Flights
	f, _ := fs.Join("k", newRequest(t, ctx), nil)
	res := f.Collect(&http.Response{StatusCode: http.StatusNoContent}, nil, 5)
	resp, ok := res.For(newRequest(t, ctx), nil)
	if !ok || resp == nil || resp.StatusCode != http.StatusNoContent || resp.Body != nil {
		t.Errorf("copy of a response without a body: got %+v, %v, want a 204 with none", resp, ok)
	}
	fs.Land(f, res)
	fs.Wait(ctx, f, true)
}

func TestCollectABodyCutShort(t *testing.T) {
	ctx := testContext(t)
	var fs Flights
	f, _ := fs.Join("k", newRequest(t, ctx), nil)
	cut := errors.New("connection reset")
	orig := &body{Reader: io.MultiReader(strings.NewReader("part"), iotest.ErrReader(cut))}
	res := f.Collect(response(orig, -1), nil, 1<<10)
	for i := range 2 {
		resp, ok := res.For(newRequest(t, ctx), nil)
		if !ok {
			t.Fatalf("copy %d: not shared", i)
		}
		if got, err := readAll(t, resp); got != "part" || !errors.Is(err, cut) {
			t.Errorf("copy %d's body: got %q, %v, want %q, %v", i, got, err, "part", cut)
		}
	}
	fs.Land(f, res)
	fs.Wait(ctx, f, true)
}

func TestCollectAFailedCall(t *testing.T) {
	ctx := testContext(t)
	var fs Flights
	f, _ := fs.Join("k", newRequest(t, ctx), nil)
	callErr := errors.New("the shared call's error")
	res := f.Collect(nil, callErr, 5)
	if res.Err != callErr {
		t.Errorf("Err: got %v, want %v", res.Err, callErr)
	}
	if resp, ok := res.For(newRequest(t, ctx), nil); resp != nil || !ok {
		t.Errorf("For a failed call: got %v, %v, want no response, shared", resp, ok)
	}
	fs.Land(f, res)
	fs.Wait(ctx, f, true)
}

func TestABodyOverTheBoundIsTheLeadersStream(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		content string
		conn    bool // the body is a connection, written to as well
		n       int64
	}{
		{"its length over the bound", http.StatusOK, "123456", false, 6},
		{"its length unknown, read over the bound", http.StatusOK, "123456", false, -1},
		{"a switch of protocols", http.StatusSwitchingProtocols, "1", false, -1},
		{"a connection", http.StatusOK, "1", true, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			var fs Flights
			f, _ := fs.Join("k", newRequest(t, ctx), nil)
			fs.Join("k", newRequest(t, ctx), nil)
			orig := newBody(tt.content)
			var rc io.ReadCloser = orig
			if tt.conn {
				rc = connBody{orig}
			}
			resp := response(rc, tt.n)
			resp.StatusCode = tt.status
			fs.Land(f, f.Collect(resp, nil, 5))
			if err := f.Request().Context().Err(); err != nil {
				t.Fatalf("the call's context after a landing with a stream: got %v, want none: the leader reads on", err)
			}

			res, stream := fs.Wait(ctx, f, false)
			if stream != nil {
				t.Error("a follower got the stream")
			}
			if resp, ok := res.For(newRequest(t, ctx), nil); resp != nil || ok {
				t.Errorf("For a follower: got %v, %v, want no response: it makes a call of its own", resp, ok)
			}

			res, stream = fs.Wait(ctx, f, true)
			if stream == nil {
				t.Fatal("the leader got no stream")
			}
			req := newRequest(t, ctx)
			got, ok := res.For(req, stream)
			if !ok || got != stream || got.Request != req {
				t.Fatalf("For the leader: got %v, %v, want its stream, for its request", got, ok)
			}
			if _, isConn := got.Body.(io.Writer); isConn {
				t.Error("the stream's body is writable: only the body under it is")
			}
			if b, err := io.ReadAll(got.Body); string(b) != tt.content || err != nil {
				t.Errorf("the stream's body: got %q, %v, want %q", b, err, tt.content)
			}
			if orig.closed.Load() {
				t.Error("the body under the stream was closed before the stream was")
			}
			_ = got.Body.Close()
			if !orig.closed.Load() {
				t.Error("the body under the stream: not closed with it")
			}
			if err := f.Request().Context().Err(); err != context.Canceled {
				t.Errorf("the call's context after the stream closed: got %v, want %v", err, context.Canceled)
			}
		})
	}
}

func TestLandClosesTheStreamOfALeaderWhoHasGone(t *testing.T) {
	ctx := testContext(t)
	leaderCtx, cancelLeader := context.WithCancel(ctx)
	var fs Flights
	f, _ := fs.Join("k", newRequest(t, leaderCtx), nil)
	fs.Join("k", newRequest(t, ctx), nil)
	cancelLeader()
	if res, _ := fs.Wait(leaderCtx, f, true); res != nil {
		t.Fatalf("the leader who went: got %v, want no result", res)
	}
	orig := newBody("123456")
	fs.Land(f, f.Collect(response(orig, 6), nil, 5))
	if !orig.closed.Load() {
		t.Error("a stream no one will read: not closed")
	}
	if err := f.Request().Context().Err(); err != context.Canceled {
		t.Errorf("the call's context: got %v, want %v", err, context.Canceled)
	}
	res, stream := fs.Wait(ctx, f, false)
	if stream != nil {
		t.Error("a follower got the stream")
	}
	if _, ok := res.For(newRequest(t, ctx), nil); ok {
		t.Error("For a follower of a body over the bound: shared, want a call of its own")
	}
}

func TestBodyErrorNamesTheBound(t *testing.T) {
	var err error = &BodyError{Limit: 4096}
	var be *BodyError
	if !errors.As(err, &be) || be.Limit != 4096 {
		t.Fatalf("errors.As: got %v, want the BodyError", be)
	}
	if !strings.Contains(err.Error(), "4096 bytes") {
		t.Errorf("message %q does not name the bound", err.Error())
	}
}

// The largest bound, math.MaxInt64 (ReadPolicy.MaxSharedBody set to mean
// "no bound"), is read up to, and one byte past, without overflowing: an
// overflow would read nothing and share an empty body.
func TestCollectUnderTheLargestBound(t *testing.T) {
	for _, n := range []int64{-1, 5} {
		ctx := testContext(t)
		var fs Flights
		f, _ := fs.Join("k", newRequest(t, ctx), nil)
		res := f.Collect(response(newBody("hello"), n), nil, math.MaxInt64)
		resp, ok := res.For(newRequest(t, ctx), nil)
		if !ok || resp == nil {
			t.Fatalf("length %d: got %v, %v, want a shared response", n, resp, ok)
		}
		if got, err := readAll(t, resp); got != "hello" || err != nil {
			t.Errorf("length %d: the copy's body: got %q, %v, want %q", n, got, err, "hello")
		}
		fs.Land(f, res)
		fs.Wait(ctx, f, true)
	}
}
