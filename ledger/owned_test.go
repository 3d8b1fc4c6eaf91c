package ledger

import (
	"testing"
	"time"
)

// CompleteAt keeps a body without a copy unless its slice has room
// beyond its length, and applies the ledger's bounds as Complete does.
func TestMemoryLedgerCompleteOwnedKeepsOrTrims(t *testing.T) {
	now := time.Unix(1000, 0)
	l, err := newMemory(&Memory{MaxStoredBody: 8})
	if err != nil {
		t.Fatal(err)
	}
	stored := func(key string) *StoredResponse {
		t.Helper()
		l.mu.Lock()
		defer l.mu.Unlock()
		e := l.m[key]
		if e == nil {
			t.Fatalf("key %q: no entry", key)
		}
		return e.stored
	}
	claim := func(key string) string {
		t.Helper()
		c, err := l.BeginAt(key, Fingerprint{}, now)
		if err != nil || c.Token == "" {
			t.Fatalf("Begin(%q): got %+v, %v; want a claim", key, c, err)
		}
		return c.Token
	}

	exact := []byte("12345")
	if err := l.CompleteAt("exact", claim("exact"), &StoredResponse{StatusCode: 201, Body: exact}, now); err != nil {
		t.Fatal(err)
	}
	if s := stored("exact"); &s.Body[0] != &exact[0] {
		t.Errorf("a body without spare room was copied, want it kept as it is")
	}

	roomy := append(make([]byte, 0, 64), "12345"...)
	if err := l.CompleteAt("roomy", claim("roomy"), &StoredResponse{StatusCode: 201, Body: roomy}, now); err != nil {
		t.Fatal(err)
	}
	if s := stored("roomy"); string(s.Body) != "12345" || cap(s.Body) != len(s.Body) || &s.Body[0] == &roomy[0] {
		t.Errorf("a body with spare room: stored %q (cap %d), want a copy of 12345 without room", s.Body, cap(s.Body))
	}

	if err := l.CompleteAt("long", claim("long"), &StoredResponse{StatusCode: 201, Body: []byte("123456789")}, now); err != nil {
		t.Fatal(err)
	}
	if s := stored("long"); s != nil {
		t.Errorf("a body over MaxStoredBody: stored %+v, want none", s)
	}
}
