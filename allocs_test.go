package retryfuse

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// The success path allocates only what outlives the call: the wire (the
// contexts, the trace and the first attempt's request copy) and the trace's
// hooks; the call itself stays on RoundTrip's stack. AttemptTimeout adds
// its cancellable context, its cancel function and its timer. The base
// here answers without a body and is not net/http's (so the trace has a
// GetConn hook too); its own allocation, the response, is counted apart.
// Allocation counts are exact, but the race detector changes them: scripts/test
// runs this test without it.
func TestSuccessPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates; scripts/test runs this test without it")
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://127.0.0.1:1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	var resp *http.Response // kept, so that the base's response is on the heap in both
	base := testing.AllocsPerRun(200, func() {
		if resp, err = (staticBase{}).RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct {
		name      string
		tr        *Transport
		want      float64
		alternate bool // calls alternate between two hosts, whose records were made
	}{
		{"defaults", &Transport{Base: staticBase{}}, 3, false},
		{"AttemptTimeout", &Transport{Base: staticBase{}, Retry: RetryPolicy{AttemptTimeout: 10 * time.Second}}, 6, false},
		{"two hosts in turn", &Transport{Base: staticBase{}}, 3, true},
	} {
		reqs := []*http.Request{req, req}
		if tc.alternate {
			reqs[1] = req.Clone(context.Background())
			reqs[1].URL.Host = "127.0.0.2:1"
			for _, r := range reqs {
				if resp, err = tc.tr.RoundTrip(r); err != nil {
					t.Fatal(err)
				}
			}
		}
		i := 0
		got := testing.AllocsPerRun(200, func() {
			i++
			if resp, err = tc.tr.RoundTrip(reqs[i%2]); err != nil {
				t.Fatal(err)
			}
		}) - base
		if got > tc.want {
			t.Errorf("%s: the Transport allocates %v times per call, want at most %v", tc.name, got, tc.want)
		}
	}
	_ = resp
}

// TestWarmGETPath makes a GET that sets a default Transport up, then
// RETRYFUSE_WARM_GETS (1 unless set) more, each one attempt answered 200.
// scripts/get-path runs it under coverage with 1 and with 2: the
// difference is the code one warm GET runs, file by file (the path in
// docs/ARCHITECTURE.md).
func TestWarmGETPath(t *testing.T) {
	n := 1
	if v := os.Getenv("RETRYFUSE_WARM_GETS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("RETRYFUSE_WARM_GETS=%q: %v", v, err)
		}
	}
	var calls atomic.Int64
	tr := &Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		calls.Add(1)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
	})}
	for i := range 1 + n {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/items", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %d: %v, %v", i+1, resp, err)
		}
		_ = resp.Body.Close()
	}
	if got := calls.Load(); got != int64(1+n) {
		t.Errorf("the base was called %d times for %d GETs", got, 1+n)
	}
}
