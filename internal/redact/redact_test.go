package redact

import (
	"math/rand/v2"
	"net/url"
	"testing"
)

func TestRedactURL(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		params []string
		want   string
	}{
		{"plain", "https://api.example.test/v1/orders", DefaultQueryParams(), "https://api.example.test/v1/orders"},
		{"user and password", "https://alice:s3cret@api.example.test/x", DefaultQueryParams(), "https://api.example.test/x"},
		{"user only", "https://alice@api.example.test/x", DefaultQueryParams(), "https://api.example.test/x"},
		{"token", "https://h.test/x?token=abc&page=2", DefaultQueryParams(), "https://h.test/x?page=2&token=REDACTED"},
		{"case-insensitive name", "https://h.test/x?Access_Token=abc", DefaultQueryParams(), "https://h.test/x?Access_Token=REDACTED"},
		{"repeated param", "https://h.test/x?sig=a&sig=b", DefaultQueryParams(), "https://h.test/x?sig=REDACTED&sig=REDACTED"},
		{"nothing sensitive", "https://h.test/x?page=2&q=go", DefaultQueryParams(), "https://h.test/x?page=2&q=go"},
		{"fragment dropped", "https://h.test/x#token=abc", DefaultQueryParams(), "https://h.test/x"},
		{"unparseable query hidden whole", "https://h.test/x?token=a;b", DefaultQueryParams(), "https://h.test/x?REDACTED"},
		{"custom list", "https://h.test/x?session=abc&token=t", []string{"session"}, "https://h.test/x?session=REDACTED&token=t"},
		{"empty list redacts no param", "https://u:p@h.test/x?token=t", []string{}, "https://h.test/x?token=t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.raw)
			if err != nil {
				t.Fatalf("url.Parse(%q): %v", tt.raw, err)
			}
			before := *u
			if got := URL(u, tt.params); got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.raw, got, tt.want)
			}
			if *u != before {
				t.Errorf("URL modified its argument: got %+v, want %+v", *u, before)
			}
		})
	}
	if got := URL(nil, DefaultQueryParams()); got != "" {
		t.Errorf("URL(nil) = %q, want empty", got)
	}
}

// TestPlainURLWrittenAsStringWrites checks the shortcut for plain URLs
// against url.URL.String over URLs made of every kind of character.
func TestPlainURLWrittenAsStringWrites(t *testing.T) {
	const alphabet = "aZ09-._~/:@?#%[] +!$&'()*,;=\x7f\xc3\xa9"
	rng := rand.New(rand.NewPCG(1, 2))
	part := func(n int) string {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			if rng.IntN(3) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = "abcxyz/"[rng.IntN(7)]
			}
		}
		return string(b)
	}
	plain := 0
	for range 200000 {
		u := &url.URL{Scheme: []string{"http", "https", "h+s", ""}[rng.IntN(4)], Host: part(12), Path: part(16)}
		if !plainURL(u) {
			continue
		}
		plain++
		if got, want := URL(u, nil), u.String(); got != want {
			t.Fatalf("URL %#v written %q, String writes %q", *u, got, want)
		}
	}
	if plain < 1000 {
		t.Fatalf("only %d plain URLs made: the check checked little", plain)
	}
	for _, raw := range []string{"http://api.test/items", "https://api.test:8443/a/b-c_d.e~f", "http://api.test"} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !plainURL(u) || URL(u, nil) != raw {
			t.Errorf("%s: plain %v, written %q", raw, plainURL(u), URL(u, nil))
		}
	}
}
