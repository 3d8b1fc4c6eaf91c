package share_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/retryfuse/retryfuse/internal/share"
)

// Two identical reads share one call: the first to join leads and makes
// it, the result lands once, and each caller reads a copy of its own.
func Example() {
	var fs share.Flights
	ctx := context.Background()
	first, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/items", nil)
	second := first.Clone(ctx)

	key, _ := share.KeyOf(nil, first)
	f, leads := fs.Join(key, first, nil)
	g, follows := fs.Join(key, second, nil)
	fmt.Println("first leads:", leads, "second follows:", !follows && g == f)

	// The leader makes the call with f.Request(), on a goroutine of its
	// own in a Transport, and lands its result.
	resp := &http.Response{
		StatusCode:    http.StatusOK,
		Body:          io.NopCloser(strings.NewReader("[1,2,3]")),
		ContentLength: 7,
	}
	fs.Land(f, f.Collect(resp, nil, share.DefaultMaxBody))

	for _, c := range []struct {
		req    *http.Request
		leader bool
	}{{first, true}, {second, false}} {
		res, stream := fs.Wait(ctx, f, c.leader)
		resp, _ := res.For(c.req, stream)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// first leads: true second follows: true
	// 200 [1,2,3]
	// 200 [1,2,3]
}
