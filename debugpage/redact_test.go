package debugpage

import "testing"

func TestRedactURLsHidesCredentialsInErrorText(t *testing.T) {
	params := []string{"token", "api_key"}
	for _, c := range []struct{ in, want string }{
		{"no url here", "no url here"},
		{`Get "https://user:pw@api.example.com/v1?token=s3cret&x=1": EOF`, `Get "https://api.example.com/v1?token=REDACTED&x=1": EOF`},
		{"dial https://b/c then http://h:80/a?API_KEY=k&x=1", "dial https://b/c then http://h:80/a?API_KEY=REDACTED&x=1"},
		{"bad http://h/%zz?x=t end", "bad REDACTED end"},
		{"just :// alone", "just :// alone"},
		// An unquoted value is hidden to the line's end: a space may be in it.
		{"dial http://h:80/a?API_KEY=k then https://b/c\nnext", "dial http://h:80/a?API_KEY=REDACTED\nnext"},
	} {
		if got := redactURLs(c.in, params); got != c.want {
			t.Errorf("redactURLs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// What may be a credential is hidden wherever it is in an error's text,
// in a URL that does not parse too: no piece of a password or of a
// redacted parameter's value is left.
func TestRedactURLsHidesCredentialsOutsideAParsedURL(t *testing.T) {
	params := []string{"token", "api_key"}
	for _, c := range []struct{ name, in, want string }{
		{"password with a space", "dial http://bob:pa ss@h/x failed",
			"dial http://h/x failed"},
		{"quoted password with a space", `Get "http://bob:pa ss@h/x": EOF`,
			`Get "http://h/x": EOF`},
		{"quoted password with an escaped quote", `Get "http://bob:p\"w@h/": EOF`,
			`Get "http://h/": EOF`},
		{"password with a slash, in url.Parse's error: the URL and the port hidden", `parse "http://bob:se/cret@h/": invalid port ":se" after host`,
			`parse "REDACTED": invalid port "REDACTED" after host`},
		{"bad escape in the password", `parse "http://bob:%zzpw@h/": invalid URL escape "%zz"`,
			`parse "REDACTED": invalid URL escape "REDACTED"`},
		{"value with a space, quoted", `Get "http://h/x?token=ab cd&y=1": EOF`,
			`Get "http://h/x?token=REDACTED&y=1": EOF`},
		{"value with an escaped quote", `Get "http://h/x?token=ab\"cd": EOF`,
			`Get "http://h/x?token=REDACTED": EOF`},
		{"value in a fragment", "Get http://h/#token=abc", "Get http://h/"},
		{"escaped URL within another", "to http://p/?next=http%3A%2F%2Fbob%3Apw%40h%2F%3Ftoken%3Dabc%26y%3D1 refused",
			"to http://p/?next=http%3A%2F%2FREDACTED%40h%2F%3Ftoken%3DREDACTED%26y%3D1 refused"},
		{"path-escaped URL", "dial http://p/http:%2F%2Fbob:pw@h%2F%3Ftoken=abc&y=1: refused",
			"dial http://p/http:%2F%2FREDACTED@h%2F%3Ftoken=REDACTED&y=1: refused"},
		{"parameter named in prose", "api_key=abc was refused\nretrying", "api_key=REDACTED\nretrying"},
		{"case of the name", "http://h/?TOKEN=abc", "http://h/?TOKEN=REDACTED"},
	} {
		if got := redactURLs(c.in, params); got != c.want {
			t.Errorf("%s: redactURLs(%q) = %q, want %q", c.name, c.in, got, c.want)
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
