package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func field(s string) string {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	return string(n[:]) + s
}

// TestOfFormat pins the value: ledgers keep it across releases.
func TestOfFormat(t *testing.T) {
	for _, tt := range []struct{ method, path, wantPath, body string }{
		{"POST", "/v1/charges", "/v1/charges", `{"amount":100}`},
		{"PUT", "", "/", ""},
		{"PATCH", "/a%2Fb/" + strings.Repeat("p", 20<<10), "/a%2Fb/" + strings.Repeat("p", 20<<10), strings.Repeat("b", 40<<10)},
	} {
		want := sha256.Sum256([]byte(RequestPrefix + field(tt.method) + field(tt.wantPath) + tt.body))
		if got := Of(tt.method, tt.path, "", []byte(tt.body)); got != want {
			t.Errorf("Of(%s %q): got %x, want %x", tt.method, tt.path, got, want)
		}
	}
}

// TestOfQueryFormat pins the value of a request with a query: its own
// prefix, then the method, the path and the query, each with its length.
func TestOfQueryFormat(t *testing.T) {
	want := sha256.Sum256([]byte(QueryRequestPrefix + field("POST") + field("/transfer") + field("to=alice&amount=5") + `{}`))
	if got := Of("POST", "/transfer", "to=alice&amount=5", []byte(`{}`)); got != want {
		t.Errorf("got %x, want %x", got, want)
	}
}

// The query tells requests apart: another query, or none, is another
// fingerprint, and no split of the same bytes between path and query
// gives one of another request.
func TestQueryTellsRequestsApart(t *testing.T) {
	seen := map[[32]byte]string{}
	for _, r := range [][2]string{
		{"/transfer", "to=alice"}, {"/transfer", "to=bob"}, {"/transfer", ""},
		{"/transfer?to=alice", ""}, {"/transfer%3Fto=alice", ""}, {"/trans", "fer"},
	} {
		fp := Of("POST", r[0], r[1], []byte("{}"))
		if other, ok := seen[fp]; ok {
			t.Errorf("path %q, query %q: the fingerprint of %s", r[0], r[1], other)
		}
		seen[fp] = r[0] + "?" + r[1]
	}
}

// A body read by Body, in place or through the buffer, hashes as the same
// bytes given to Of.
func TestBodyMatchesOf(t *testing.T) {
	body := strings.Repeat("0123456789", 5000) // longer than the copy buffer
	want := Of("POST", "/x", "", []byte(body))
	for _, r := range []io.Reader{bytes.NewReader([]byte(body)), strings.NewReader(body), io.MultiReader(strings.NewReader(body))} {
		h := New()
		h.Start("POST", "/x", "")
		if err := h.Body(r, int64(len(body))); err != nil {
			t.Fatalf("%T: %v", r, err)
		}
		if got := h.Sum(); got != want {
			t.Errorf("%T: got %x, want %x", r, got, want)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	for _, tt := range []struct {
		body    string
		limit   int64
		wantErr error
	}{
		{"", 0, nil},
		{"x", 0, ErrTooLong},
		{"12345678", 8, nil},
		{"123456789", 8, ErrTooLong},
	} {
		for _, r := range []io.Reader{bytes.NewReader([]byte(tt.body)), strings.NewReader(tt.body)} {
			h := Get()
			h.Start("POST", "/", "")
			if err := h.Body(r, tt.limit); !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("%q, limit %d, %T: got %v, want %v", tt.body, tt.limit, r, err, tt.wantErr)
			}
			Put(h)
		}
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestBodyReadError(t *testing.T) {
	errRead := errors.New("read failed")
	h := New()
	if err := h.Body(failingReader{errRead}, 10); !errors.Is(err, errRead) {
		t.Errorf("got %v, want %v", err, errRead)
	}
}

// A Hasher reset, or got again from the pool, starts afresh.
func TestResetStartsAfresh(t *testing.T) {
	want := Of("POST", "/a", "", []byte("body"))
	h := New()
	h.Start("GET", "/other", "")
	h.Write([]byte("junk"))
	h.Reset()
	h.Start("POST", "/a", "")
	h.Write([]byte("body"))
	if got := h.Sum(); got != want {
		t.Errorf("after Reset: got %x, want %x", got, want)
	}
}
