package debugpage

import "testing"

func TestRedactURLsHidesCredentialsInErrorText(t *testing.T) {
	params := []string{"token", "api_key"}
	for _, c := range []struct{ in, want string }{
		{"no url here", "no url here"},
		{`Get "https://user:pw@api.example.com/v1?token=s3cret&x=1": EOF`, `Get "https://api.example.com/v1?token=REDACTED&x=1": EOF`},
		{"dial http://h:80/a?API_KEY=k then https://b/c", "dial http://h:80/a?API_KEY=REDACTED then https://b/c"},
		{"bad http://h/%zz?token=t end", "bad REDACTED end"},
		{"just :// alone", "just :// alone"},
	} {
		if got := redactURLs(c.in, params); got != c.want {
			t.Errorf("redactURLs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestTruncateCutsAtARuneAndMarksIt(t *testing.T) {
	if got := truncate("héllo", 4); got != "h…" {
		t.Errorf("truncate(héllo, 4) = %q, want %q", got, "h…")
	}
	if got := truncate("short", 10); got != "short" {
		t.Errorf("truncate(short, 10) = %q, want it whole", got)
	}
}
