package idempotency

import (
	"net/http"
	"strings"
	"testing"
)

func TestParseKeyAcceptsBothForms(t *testing.T) {
	for _, tt := range []struct{ value, want string }{
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"}, // the draft's, Section 2.2
		{`8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},   // bare, as clients send it
		{`"clkyoesmbgybucifusbbtdsbohtyuuwz"`, "clkyoesmbgybucifusbbtdsbohtyuuwz"},         // the draft's, Section 6
		{`order 42`, "order 42"},
		{`" padded "`, " padded "},
		{`"a\"b\\c"`, `a"b\c`},
		{`  "x"  `, "x"},
		{"\tx\t", "x"},
		{strings.Repeat("k", MaxKeyLen), strings.Repeat("k", MaxKeyLen)},
		{`"` + strings.Repeat("k", MaxKeyLen) + `"`, strings.Repeat("k", MaxKeyLen)},
		{`"` + strings.Repeat(`\"`, MaxKeyLen) + `"`, strings.Repeat(`"`, MaxKeyLen)},
		{`a"b`, `a"b`}, // a bare key that does not begin with a quote may hold one
	} {
		got, err := parseKey(tt.value)
		if err != nil || got != tt.want {
			t.Errorf("parseKey(%q) = %q, %v; want %q", tt.value, got, err, tt.want)
		}
	}
}

func TestParseKeyRefusesMalformed(t *testing.T) {
	for _, value := range []string{
		"", "  ", `""`,
		strings.Repeat("k", MaxKeyLen+1),
		`"` + strings.Repeat("k", MaxKeyLen+1) + `"`,
		strings.Repeat("k", 10<<10),
		`"` + strings.Repeat("k", 10<<10) + `"`,
		"a\x00b", "a\rb", "a\nb", "a\x7fb", "caf\xc3\xa9",
		`"a` + "\n" + `b"`, `"caf` + "\xc3\xa9" + `"`,
		`"abc`, `"abc\"`, `"a\b"`, `"a"b`, `"a";p=1`, `"a", "b"`,
	} {
		if got, err := parseKey(value); err == nil {
			t.Errorf("parseKey(%q) = %q, want an error", value, got)
		}
	}
}

func TestKeyOfHeaders(t *testing.T) {
	for _, tt := range []struct {
		name        string
		h           http.Header
		want        string
		wantPresent bool
		wantErr     bool
	}{
		{"none", http.Header{}, "", false, false},
		{"draft's header", http.Header{"Idempotency-Key": {`"k"`}}, "k", true, false},
		{"X- header", http.Header{"X-Idempotency-Key": {"k"}}, "k", true, false},
		{"both, the same key", http.Header{"Idempotency-Key": {`"k"`}, "X-Idempotency-Key": {"k"}}, "k", true, false},
		{"both, different keys", http.Header{"Idempotency-Key": {"k"}, "X-Idempotency-Key": {"j"}}, "", true, true},
		{"sent twice", http.Header{"Idempotency-Key": {"k", "k"}}, "", true, true},
		{"empty", http.Header{"Idempotency-Key": {""}}, "", true, true},
		{"no value", http.Header{"Idempotency-Key": {}}, "", true, true},
	} {
		got, present, err := keyOf(tt.h)
		if got != tt.want || present != tt.wantPresent || (err != nil) != tt.wantErr {
			t.Errorf("%s: keyOf = %q, %v, %v; want %q, %v, error %v", tt.name, got, present, err, tt.want, tt.wantPresent, tt.wantErr)
		}
	}
}

// FuzzParseKey: nothing panics; an accepted key is 1 to MaxKeyLen bytes
// of visible ASCII and spaces; a key given in the quoted form with its
// quotes and backslashes escaped comes back as it is.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, "abc", `"a\"b"`, "", `"`, `"\`, "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		key, err := parseKey(value)
		if err != nil {
			return
		}
		if key == "" || len(key) > MaxKeyLen {
			t.Fatalf("parseKey(%q) = %q: %d bytes", value, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("parseKey(%q) = %q: byte %#x", value, key, key[i])
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := parseKey(quoted); err != nil || again != key {
			t.Fatalf("parseKey(%q) = %q, %v; want %q", quoted, again, err, key)
		}
	})
}
