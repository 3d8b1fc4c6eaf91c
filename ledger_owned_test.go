package retryfuse

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The Transport hands its MemoryLedger the result it records, which the
// ledger keeps without a copy: what the caller does with its response
// afterwards never reaches the stored result, whether the body's length
// was known (recorded into a buffer of that size) or not.
func TestStoredResultUntouchedByTheCallersResponse(t *testing.T) {
	for _, known := range []bool{true, false} {
		t.Run("known length "+strconv.FormatBool(known), func(t *testing.T) {
			const want = `{"order":"o-1","status":"created"}`
			ledger, _ := newLedgerOnFakeClock(t, &MemoryLedger{})
			sent := 0
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				sent++
				_ = r.Body.Close()
				n := int64(-1)
				if known {
					n = int64(len(want))
				}
				return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(bytes.NewReader([]byte(want))), ContentLength: n, Request: r}, nil
			})
			client, _ := newLedgerClient(t, ledger, func(tr *Transport) { tr.Base = base })
			first, err := client.Do(newKeyedPOST(t, callCtx(t), "http://orders.invalid/orders", "k-1", `{"item":"book"}`))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(first.Body)
			if err != nil || string(got) != want {
				t.Fatalf("first body: got %q, %v; want %q", got, err, want)
			}
			_ = first.Body.Close()
			first.Header.Set("Content-Type", "text/plain")
			first.Header["Content-Type"][0] = "changed"
			first.Header.Add("X-Extra", "1")

			resp, body, err := postKeyed(t, client, "http://orders.invalid/orders", "k-1", `{"item":"book"}`)
			if err != nil {
				t.Fatalf("replay: got error %v, want the stored result", err)
			}
			if sent != 1 {
				t.Errorf("requests sent: got %d, want 1", sent)
			}
			if body != want || resp.StatusCode != http.StatusCreated {
				t.Errorf("replay: got %d %q, want 201 %q", resp.StatusCode, body, want)
			}
			if h := resp.Header; len(h) != 1 || h.Get("Content-Type") != "application/json" {
				t.Errorf("replay header: got %v, want only Content-Type: application/json", h)
			}
		})
	}
}

// completeOwnedAt keeps a body without a copy unless its slice has room
// beyond its length, and applies the ledger's bounds as Complete does.
func TestMemoryLedgerCompleteOwnedKeepsOrTrims(t *testing.T) {
	now := time.Unix(1000, 0)
	l, err := newMemoryLedger(&MemoryLedger{MaxStoredBody: 8})
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
		c, err := l.beginAt(key, Fingerprint{}, now)
		if err != nil || c.Token == "" {
			t.Fatalf("Begin(%q): got %+v, %v; want a claim", key, c, err)
		}
		return c.Token
	}

	exact := []byte("12345")
	if err := l.completeOwnedAt("exact", claim("exact"), &StoredResponse{StatusCode: 201, Body: exact}, now); err != nil {
		t.Fatal(err)
	}
	if s := stored("exact"); &s.Body[0] != &exact[0] {
		t.Errorf("a body without spare room was copied, want it kept as it is")
	}

	roomy := append(make([]byte, 0, 64), "12345"...)
	if err := l.completeOwnedAt("roomy", claim("roomy"), &StoredResponse{StatusCode: 201, Body: roomy}, now); err != nil {
		t.Fatal(err)
	}
	if s := stored("roomy"); string(s.Body) != "12345" || cap(s.Body) != len(s.Body) || &s.Body[0] == &roomy[0] {
		t.Errorf("a body with spare room: stored %q (cap %d), want a copy of 12345 without room", s.Body, cap(s.Body))
	}

	if err := l.completeOwnedAt("long", claim("long"), &StoredResponse{StatusCode: 201, Body: []byte("123456789")}, now); err != nil {
		t.Fatal(err)
	}
	if s := stored("long"); s != nil {
		t.Errorf("a body over MaxStoredBody: stored %+v, want none", s)
	}
}
