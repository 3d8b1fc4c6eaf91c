package debugpage

import (
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/retryfuse/retryfuse/internal/redact"
)

// This file keeps credentials off the page: the URLs within an error's
// text are shown as the hooks show a call's URL (internal/redact).

// redactURLs returns s with each absolute URL in it (a scheme, "://", up
// to a space or a quote) without user information and with the values of
// the query parameters params hidden; one that does not parse is hidden
// whole.
func redactURLs(s string, params []string) string {
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
			b.WriteString("REDACTED")
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
