//go:build !race

package share

import (
	"math"
	"runtime"
	"strings"
	"testing"
)

// The bytes a shared body costs, measured with runtime.MemStats: the race
// detector changes what allocates, so these run without it (scripts/test
// runs them so).

// A declared length is trusted only up to maxGrow: a server that declares
// 256 MiB under a large bound and sends five bytes costs the room of what
// it sent, not of what it declared.
func TestCollectDoesNotTrustALargeDeclaredLength(t *testing.T) {
	ctx := testContext(t)
	var fs Flights
	f, _ := fs.Join("k", newRequest(t, ctx), nil)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := f.Collect(response(newBody("hello"), 256<<20), nil, math.MaxInt64)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("collecting 5 bytes declared as 256 MiB allocated %d bytes, want at most %d", grew, 8<<20)
	}
	resp, ok := res.For(newRequest(t, ctx), nil)
	if !ok || resp == nil {
		t.Fatalf("got %v, %v, want a shared response", resp, ok)
	}
	if got, _ := readAll(t, resp); got != "hello" {
		t.Errorf("the copy's body: got %q, want %q", got, "hello")
	}
	fs.Land(f, res)
	fs.Wait(ctx, f, true)
}

// A body that fills its declared length is read into room made once: it
// costs about its size, not the double of a buffer grown for the last
// read.
func TestCollectATruthfulLengthCostsItsSize(t *testing.T) {
	const size = 1 << 20
	ctx := testContext(t)
	var fs Flights
	f, _ := fs.Join("k", newRequest(t, ctx), nil)
	body := strings.Repeat("x", size)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := f.Collect(response(newBody(body), size), nil, 2*size)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > size+size/4 {
		t.Errorf("collecting a body of %d bytes declared as such allocated %d bytes, want at most %d", size, grew, size+size/4)
	}
	resp, ok := res.For(newRequest(t, ctx), nil)
	if !ok || resp == nil {
		t.Fatalf("got %v, %v, want a shared response", resp, ok)
	}
	if got, _ := readAll(t, resp); len(got) != size {
		t.Errorf("the copy's body: got %d bytes, want %d", len(got), size)
	}
	fs.Land(f, res)
	fs.Wait(ctx, f, true)
}
