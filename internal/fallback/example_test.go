package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/retryfuse/retryfuse/internal/fallback"
)

// A request that asks for current data is not answered from a Fallback.
func ExampleNeedsCurrent() {
	for _, h := range []http.Header{
		{},
		{"Cache-Control": {"no-transform, Max-Age=0"}},
		{"Pragma": {"no-cache"}},
		{"Cache-Control": {"max-age=60"}, "Pragma": {"no-cache"}}, // Pragma yields to Cache-Control
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://example.com/", nil)
		req.Header = h
		fmt.Println(fallback.NeedsCurrent(req))
	}
	req, _ := http.NewRequestWithContext(fallback.WithCurrentData(context.Background()), http.MethodGet, "http://example.com/", nil)
	fmt.Println(fallback.NeedsCurrent(req))
	// Output:
	// false
	// true
	// true
	// false
	// true
}

// The Fallback's answer, marked with why the call failed; the header map
// the Fallback keeps for its answers is left as it was.
func ExampleAsk() {
	cached := http.Header{"Content-Type": {"application/json"}}
	fb := func(*http.Request, *http.Response, error) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Header: cached, Body: http.NoBody}, nil
	}
	req, _ := http.NewRequest(http.MethodGet, "http://example.com/", nil)
	resp, err, failure := fallback.Ask(fb, req, nil, errors.New("connection refused"))
	if failure != nil || err != nil {
		panic(fmt.Sprint(failure, err))
	}
	fallback.Mark(resp, "exhausted")
	fmt.Println(resp.StatusCode, resp.Header.Get("Retryfuse-Fallback"))
	fmt.Printf("%q\n", cached.Get("Retryfuse-Fallback"))
	// Output:
	// 200 exhausted
	// ""
}
