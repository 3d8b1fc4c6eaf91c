package retryfuse

import (
	"context"
	"net/http"
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
		name string
		tr   *Transport
		want float64
	}{
		{"defaults", &Transport{Base: staticBase{}}, 3},
		{"AttemptTimeout", &Transport{Base: staticBase{}, AttemptTimeout: 10 * time.Second}, 6},
	} {
		got := testing.AllocsPerRun(200, func() {
			if resp, err = tc.tr.RoundTrip(req); err != nil {
				t.Fatal(err)
			}
		}) - base
		if got > tc.want {
			t.Errorf("%s: the Transport allocates %v times per call, want at most %v", tc.name, got, tc.want)
		}
	}
	_ = resp
}
