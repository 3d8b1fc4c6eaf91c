package share

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// What makes two reads identical: the default key tells apart what varies
// the answer (credentials included), and leaves out what only traces.

func TestDefaultShareKeyTellsApartWhatVariesTheAnswer(t *testing.T) {
	base := func(h ...string) string {
		req, _ := http.NewRequest(http.MethodGet, "https://api.example.com/items?id=1", nil)
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Add(h[i], h[i+1])
		}
		return DefaultKey(req)
	}
	same := base("Accept", "application/json")
	for _, h := range [][]string{
		{"Accept", "application/json", "Authorization", "Bearer a"},
		{"Accept", "application/json", "Cookie", "session=1"},
		{"Accept", "application/json", "X-Api-Key", "k"},
		{"Accept", "text/html"},
		{"Accept", "application/json", "Accept-Language", "fr"},
		{"Accept", "application/json", "Range", "bytes=0-9"},
		{"Accept", "application/json", "Accept", "text/html"},
	} {
		assert.NotEqual(t, same, base(h...), "%v", h)
	}
	for _, h := range [][]string{
		{"Accept", "application/json", "Traceparent", "00-abc-def-01"},
		{"Accept", "application/json", "X-Request-Id", "r1", "X-B3-Traceid", "t"},
	} {
		assert.Equal(t, same, base(h...), "%v", h)
	}
	// A value that holds what a separator would be does not collide.
	assert.NotEqual(t, base("A", "b1:c"), base("A", "b", "1:c"))
	req, _ := http.NewRequest(http.MethodGet, "https://user:pw@api.example.com/", nil)
	other, _ := http.NewRequest(http.MethodGet, "https://other:pw@api.example.com/", nil)
	assert.NotEqual(t, DefaultKey(req), DefaultKey(other), "user information in the URL")
}
