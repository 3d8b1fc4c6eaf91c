package debugpage

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// The texts FuzzRedactURLsLeavesNoSecret builds hide their secrets
// (a user, a password, a redacted query parameter's value) with a 'Q'
// before and after each of their characters, and nothing else in them
// has a 'Q': a redacted text with a 'Q' left shows a fragment of a
// secret, however short.
const secretMark = 'Q'

// fuzzAlphabet is what the fuzzed parts are written in: what an error's
// text may hold in and around a broken URL, without the mark.
const fuzzAlphabet = "abcxyz019 \t@:/?#&=%;+-._~!$,'\"\\<>`[]()*"

// fromAlphabet maps s onto the alphabet (its bytes in it kept as they
// are), without the bytes in without.
func fromAlphabet(s, without string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(fuzzAlphabet, c) < 0 {
			c = fuzzAlphabet[int(c)%len(fuzzAlphabet)]
		}
		if strings.IndexByte(without, c) < 0 {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// marked is s with the mark before and after each of its characters.
func marked(s string) string {
	var b strings.Builder
	b.WriteRune(secretMark)
	for i := 0; i < len(s); i++ {
		b.WriteByte(s[i])
		b.WriteRune(secretMark)
	}
	return b.String()
}

// secretText is an error's text that carries rawURL as form says: as it
// is, quoted, in url.Parse's error, query-escaped or path-escaped within
// another URL.
func secretText(form uint8, rawURL string) string {
	switch form % 5 {
	case 1:
		return "Get " + strconv.Quote(rawURL) + ": EOF"
	case 2:
		if _, err := url.Parse(rawURL); err != nil {
			return err.Error()
		}
		return `Post "` + rawURL + `": context deadline exceeded`
	case 3:
		return "redirect to http://proxy.test/go?next=" + url.QueryEscape(rawURL) + " refused"
	case 4:
		return "dial http://proxy.test/" + url.PathEscape(rawURL) + ": connection refused"
	}
	return "dial " + rawURL + " failed"
}

func FuzzRedactURLsLeavesNoSecret(f *testing.F) {
	f.Add(uint8(0), "user", "pa ss", "h.test", "/p", "tok en", "x=1", uint8(11))
	f.Add(uint8(1), "alice", `s3"cr\et`, "api.test", "/v1", "a b", "page=2", uint8(3))
	f.Add(uint8(2), "u", "a/b", "h", "", "v", "", uint8(0))
	f.Add(uint8(2), "u", "p?q", "h", "/", "v", "", uint8(1))
	f.Add(uint8(2), "u", "%zz", "h", "/", "v w", "", uint8(5))
	f.Add(uint8(3), "u", "p@w d", "h", "/x", "v@w", "y=2", uint8(2))
	f.Add(uint8(4), "us er", "p:w", "h:80", "/x y", "v", "z", uint8(7))
	f.Add(uint8(0), "u", "p", "h", "/", "v", "a=b", uint8(0))
	params := []string{"access_token", "api_key", "sig", "token"}
	f.Fuzz(func(t *testing.T, form uint8, user, pass, host, path, value, other string, param uint8) {
		if len(user)+len(pass)+len(host)+len(path)+len(value)+len(other) > 200 {
			return
		}
		name := params[int(param)%len(params)]
		if param&4 != 0 {
			name = strings.ToUpper(name)
		}
		raw := "https://" + marked(fromAlphabet(user, "")) + ":" + marked(fromAlphabet(pass, "")) + "@" +
			fromAlphabet(host, "") + fromAlphabet(path, "") + "?" + fromAlphabet(other, "") + "&" +
			name + "=" + marked(fromAlphabet(value, "&#\"\n")) + "&" + fromAlphabet(other, "")
		in := secretText(form, raw)
		got := redactURLs(in, params)
		if strings.ContainsRune(got, secretMark) {
			t.Fatalf("redactURLs(%q) = %q: a secret's fragment is left", in, got)
		}
	})
}

// Whatever the text (as long as the page lets one be), redacting it does
// not panic and leaves no user information after a "://" and nothing that
// url.Parse's errors quote: the hiding it does finds nothing more to hide
// in what it returns.
func FuzzRedactURLsLeavesNoUserinfo(f *testing.F) {
	for _, s := range []string{"", "://", "a://@", `x "h://u:p@h/?token=v" y`, "token=", "invalid port \"", "h%3A%2F%2Fu%40h",
		"A://?token ", `parse "a://u@h": x`, "a://h/x@y b://u:p@h"} {
		f.Add(s)
	}
	params := []string{"token", "key"}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4*maxErrText {
			return
		}
		got := redactURLs(s, params)
		if again := hideQuoted(hideUserinfo(got)); again != got {
			t.Fatalf("redactURLs(%q) = %q, which still shows %q hidden", s, got, again)
		}
	})
}
