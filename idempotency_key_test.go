package retryfuse

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestValidateIdempotencyKey(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		valid bool
	}{
		{"uuid", "3f2b8c4e-9a1d-4e7f-b6c5-0d8e2a1f7b93", true},
		{"one byte", "k", true},
		{"inner space", "order 42", true},
		{"visible punctuation", `!"#$%&'()*+,-./:;<=>?@[\]^_{|}~`, true},
		{"255 bytes", strings.Repeat("a", maxIdempotencyKeyLen), true},
		{"empty", "", false},
		{"256 bytes", strings.Repeat("a", maxIdempotencyKeyLen+1), false},
		{"CRLF injection", "k\r\nX-Admin: 1", false},
		{"LF", "k\n", false},
		{"CR", "k\r", false},
		{"tab", "a\tb", false},
		{"NUL", "a\x00b", false},
		{"DEL", "a\x7fb", false},
		{"non-ASCII", "clé", false},
		{"leading space", " k", false},
		{"trailing space", "k ", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateIdempotencyKey(tt.key)
			if got := err == nil; got != tt.valid {
				t.Fatalf("validateIdempotencyKey(%q) = %v; want valid %v", tt.key, err, tt.valid)
			}
			if err != nil && !errors.Is(err, ErrInvalidIdempotencyKey) {
				t.Errorf("validateIdempotencyKey(%q) = %v; want an error wrapping ErrInvalidIdempotencyKey", tt.key, err)
			}
		})
	}
}

func TestReadKey(t *testing.T) {
	tests := []struct {
		name        string
		header      http.Header
		wantKey     string
		wantPresent bool
		wantErr     bool
	}{
		{"none", http.Header{}, "", false, false},
		{"nil header", nil, "", false, false},
		{"canonical", http.Header{"Idempotency-Key": {"k1"}}, "k1", true, false},
		{"X- form", http.Header{"X-Idempotency-Key": {"k1"}}, "k1", true, false},
		{"lower-case form", http.Header{"idempotency-key": {"k1"}}, "k1", true, false},
		{"empty value is no key", http.Header{"Idempotency-Key": {""}}, "", false, false},
		{"both forms agreeing", http.Header{"Idempotency-Key": {"k1"}, "X-Idempotency-Key": {"k1"}}, "k1", true, false},
		{"both forms differing", http.Header{"Idempotency-Key": {"k1"}, "X-Idempotency-Key": {"k2"}}, "", false, true},
		{"two values", http.Header{"Idempotency-Key": {"k1", "k2"}}, "", false, true},
		{"invalid value", http.Header{"Idempotency-Key": {"k\n"}}, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := readKey(tt.header)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidIdempotencyKey) {
					t.Fatalf("readKey(%v) error = %v, want one wrapping ErrInvalidIdempotencyKey", tt.header, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("readKey(%v) error = %v, want nil", tt.header, err)
			}
			if k.value != tt.wantKey || k.present != tt.wantPresent {
				t.Errorf("readKey(%v) = %q present=%v, want %q present=%v", tt.header, k.value, k.present, tt.wantKey, tt.wantPresent)
			}
		})
	}
}

func TestHideKeyLeavesTheOriginalAlone(t *testing.T) {
	h := http.Header{"Idempotency-Key": {"k1"}, "X-Idempotency-Key": {"k1"}, "Accept": {"*/*"}}
	orig := h.Clone()
	h2 := hideKey(h, "")
	if _, ok := h2[headerIdempotencyKey]; ok {
		t.Errorf("hidden header still has the canonical map key %q", headerIdempotencyKey)
	}
	if _, ok := h2[headerXIdempotencyKey]; ok {
		t.Errorf("hidden header still has the canonical map key %q", headerXIdempotencyKey)
	}
	if got := h2[hiddenIdempotencyKey]; len(got) != 1 || got[0] != "k1" {
		t.Errorf("hidden header %q = %v, want [k1]", hiddenIdempotencyKey, got)
	}
	if got, ok := IdempotencyKeyOf(h2); got != "k1" || !ok {
		t.Errorf("IdempotencyKeyOf(hidden) = %q, %v; want k1, true", got, ok)
	}
	if got := h2.Get("Accept"); got != "*/*" {
		t.Errorf("hidden header Accept = %q, want */*", got)
	}
	if !equalHeaders(h, orig) {
		t.Errorf("hideKey modified its argument: got %v, want %v", h, orig)
	}
	gen := hideKey(nil, "genkey")
	if got, ok := IdempotencyKeyOf(gen); got != "genkey" || !ok {
		t.Errorf("IdempotencyKeyOf(hideKey(nil, genkey)) = %q, %v; want genkey, true", got, ok)
	}
}

func TestNeedsKeyHiding(t *testing.T) {
	keyed := http.Header{"Idempotency-Key": {"k"}}
	xkeyed := http.Header{"X-Idempotency-Key": {"k"}}
	tests := []struct {
		method string
		h      http.Header
		want   bool
	}{
		{"POST", keyed, true},
		{"PATCH", xkeyed, true},
		{"post", keyed, true}, // not idempotent: methods are case-sensitive
		{"POST", http.Header{}, false},
		{"POST", http.Header{"idempotency-key": {"k"}}, false},
		{"PUT", keyed, false},
		{"GET", xkeyed, false},
	}
	for _, tt := range tests {
		if got := needsKeyHiding(tt.method, tt.h); got != tt.want {
			t.Errorf("needsKeyHiding(%s, %v) = %v, want %v", tt.method, tt.h, got, tt.want)
		}
	}
}

func TestNewIdempotencyKey(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		k, err := newIdempotencyKey()
		if err != nil {
			t.Fatalf("newIdempotencyKey: %v", err)
		}
		if !isHex32(k) {
			t.Fatalf("newIdempotencyKey() = %q, want 32 lower-case hex digits", k)
		}
		if seen[k] {
			t.Fatalf("newIdempotencyKey() repeated %q", k)
		}
		seen[k] = true
	}
}

func isHex32(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || len(va) != len(vb) {
			return false
		}
		for i := range va {
			if va[i] != vb[i] {
				return false
			}
		}
	}
	return true
}

// An empty key is no key, for IdempotencyKeyOf as for the transport.
func TestIdempotencyKeyOfEmptyValue(t *testing.T) {
	h := http.Header{headerIdempotencyKey: {""}, hiddenXIdempotencyKey: {"k2"}}
	if got, ok := IdempotencyKeyOf(h); got != "k2" || !ok {
		t.Errorf("IdempotencyKeyOf = %q, %v; want k2, true: an empty value is skipped", got, ok)
	}
	if got, ok := IdempotencyKeyOf(http.Header{headerIdempotencyKey: {""}}); got != "" || ok {
		t.Errorf("IdempotencyKeyOf(empty) = %q, %v; want \"\", false", got, ok)
	}
}

// The hidden copy shares h's value slices; changing the copy as a base
// that broke the rules might (Add, Set, Del, append) still leaves h alone.
func TestHideKeyCopyChangedLeavesTheOriginalAlone(t *testing.T) {
	accept := make([]string, 1, 4) // room to append in place
	accept[0] = "*/*"
	h := http.Header{"Idempotency-Key": {"k1"}, "Accept": accept, "Via": {"a"}, "Empty": nil}
	orig := h.Clone()
	h2 := hideKey(h, "")
	h2.Add("Accept", "text/plain")
	h2["Via"] = append(h2["Via"], "b")
	h2.Set(hiddenIdempotencyKey, "k2")
	h2.Del("Empty")
	h2.Add("Idempotency-Key", "k3")
	if !equalHeaders(h, orig) {
		t.Errorf("changing hideKey's copy changed its argument: got %v, want %v", h, orig)
	}
	if got := accept[:2][1]; got != "" {
		t.Errorf("Add on the copy wrote %q into the argument's backing array, want nothing", got)
	}
	if got := h2["Accept"]; len(got) != 2 || got[0] != "*/*" || got[1] != "text/plain" {
		t.Errorf("copy's Accept = %v, want [*/* text/plain]", got)
	}
}

// A key under both the canonical and the hidden map key is hidden with the
// canonical one's value, as it was when the header was cloned whole.
func TestHideKeyCanonicalValueWins(t *testing.T) {
	for range 20 { // map order varies from run to run
		h := http.Header{"Idempotency-Key": {""}, "idempotency-key": {"k1"}}
		if got := hideKey(h, "")[hiddenIdempotencyKey]; len(got) != 1 || got[0] != "" {
			t.Fatalf("hidden key = %q, want the canonical map key's [\"\"]", got)
		}
	}
}
