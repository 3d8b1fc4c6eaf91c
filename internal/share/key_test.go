package share

import (
	"io"
	"net/http"
	"strings"
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
		return defaultKey(req)
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
	assert.NotEqual(t, defaultKey(req), defaultKey(other), "user information in the URL")
}

func TestEligible(t *testing.T) {
	tests := []struct {
		name   string
		method string
		body   io.ReadCloser
		header http.Header
		want   bool
	}{
		{"GET", http.MethodGet, nil, nil, true},
		{"no method (GET)", "", nil, nil, true},
		{"HEAD", http.MethodHead, nil, nil, true},
		{"GET with NoBody", http.MethodGet, http.NoBody, nil, true},
		{"GET with a body", http.MethodGet, io.NopCloser(strings.NewReader("q")), nil, false},
		{"GET with an upgrade", http.MethodGet, nil, http.Header{"Upgrade": {"websocket"}}, false},
		{"POST", http.MethodPost, nil, nil, false},
		{"PUT", http.MethodPut, nil, nil, false},
		{"OPTIONS", http.MethodOptions, nil, nil, false},
	}
	for _, tt := range tests {
		req := &http.Request{Method: tt.method, Body: tt.body, Header: tt.header}
		if got := Eligible(req); got != tt.want {
			t.Errorf("Eligible(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestKeyOf(t *testing.T) {
	get, _ := http.NewRequest(http.MethodGet, "https://api.example.com/items", nil)
	head, _ := http.NewRequest(http.MethodHead, "https://api.example.com/items", nil)
	bare := &http.Request{URL: get.URL, Header: http.Header{}} // no method: a GET
	byPath := func(r *http.Request) string { return r.URL.Path }

	if got, err := KeyOf(nil, get); got != defaultKey(get) || err != nil {
		t.Errorf("KeyOf(nil, GET) = %q, %v, want the default key", got, err)
	}
	if got, err := KeyOf(byPath, get); got != "GET /items" || err != nil {
		t.Errorf("KeyOf(path, GET) = %q, %v, want %q", got, err, "GET /items")
	}
	if got, _ := KeyOf(byPath, bare); got != "GET /items" {
		t.Errorf("KeyOf(path, no method) = %q, want %q", got, "GET /items")
	}
	if a, b := mustKey(t, byPath, get), mustKey(t, byPath, head); a == b {
		t.Errorf("a GET and a HEAD share the key %q", a)
	}
	if got, err := KeyOf(func(*http.Request) string { return "" }, get); got != "" || err != nil {
		t.Errorf("KeyOf(empty) = %q, %v, want no key and no error: a call of its own", got, err)
	}
	got, err := KeyOf(func(*http.Request) string { panic("no key today") }, get)
	if got != "" || err == nil || !strings.Contains(err.Error(), "no key today") {
		t.Errorf("KeyOf(panics) = %q, %v, want no key and an error naming the panic", got, err)
	}
}

func mustKey(t *testing.T, f func(*http.Request) string, req *http.Request) string {
	t.Helper()
	k, err := KeyOf(f, req)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
