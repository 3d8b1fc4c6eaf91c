package debugpage

import (
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/retryfuse/retryfuse/internal/redact"
)

// This file keeps credentials off the page: the URLs within an error's
// text are shown as the hooks show a call's URL (internal/redact), and
// what may be a credential is hidden wherever it is in the text, for an
// error's text may hold a URL that does not parse, cut at a space, quoted
// with escapes, percent-encoded within another URL, or a fragment of it
// in a parse error's message.

// redactURLs returns s with what may be a credential hidden: the value
// of any of the query parameters params wherever it is named
// (hideParams; first, for an '@' in a value must not hide its name), the
// URL that url.Parse's error quotes and the pieces of it that its causes
// quote (hideQuoted: that URL may be cut at a '#' in its password), the
// user information after any "://" (hideUserinfo); and then each
// absolute URL in it written as the hooks write a URL, one that does not
// parse hidden whole (renderURLs). It may hide more than a credential,
// never less.
func redactURLs(s string, params []string) string {
	return renderURLs(hideUserinfo(hideQuoted(hideParams(s, params))), params)
}

// renderURLs returns s with each absolute URL in it (a scheme, "://", up
// to a space or a quote; when quoted, up to its closing quote) without user information and with the values of
// the query parameters params hidden; one that does not parse is hidden
// whole.
func renderURLs(s string, params []string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			break
		}
		start := i
		for start > 0 && isSchemeByte(s[start-1]) {
			start--
		}
		end := i + len("://")
		if quoted := start > 0 && s[start-1] == '"' && !escaped(s, start-1); quoted {
			for end < len(s) && (s[end] != '"' || escaped(s, end)) {
				end++ // a quoted URL ends at its closing quote
			}
		}
		for end < len(s) && !strings.ContainsRune(" \t\r\n\"'<>`", rune(s[end])) {
			end++
		}
		if start == i { // no scheme before it: not a URL
			b.WriteString(s[:end])
			s = s[end:]
			continue
		}
		b.WriteString(s[:start])
		if u, err := url.Parse(s[start:end]); err == nil {
			b.WriteString(redact.URL(u, params))
		} else {
			b.WriteString(hidden)
		}
		s = s[end:]
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(s)
	return b.String()
}

func isSchemeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

// truncate returns s cut to at most n bytes, at a rune's start, marked
// with an ellipsis when cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
