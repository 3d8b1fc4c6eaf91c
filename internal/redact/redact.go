// Package redact renders a URL as the transport reports it (in errors,
// hooks and logs): without user information or fragment, and with the
// values of the named query parameters replaced, so that no credential
// reaches a log.
package redact

import (
	"net/url"
	"strings"
)

// DefaultQueryParams returns the query parameters whose values are
// replaced by "REDACTED" in URLs the transport reports (errors, hooks,
// logs) when it is given no list of its own: a new slice each time, which
// its caller may keep. Names match without regard to case.
func DefaultQueryParams() []string {
	return []string{
		"access_token", "api_key", "apikey", "auth", "client_secret",
		"code", "key", "password", "secret", "sig", "signature", "token",
	}
}

// URL renders u without user information and with the values of the
// named query parameters replaced, so that no credential reaches a log.
func URL(u *url.URL, params []string) string {
	if u == nil {
		return ""
	}
	if plainURL(u) {
		return u.Scheme + "://" + u.Host + u.Path // what u.String() writes
	}
	v := *u
	v.User = nil
	v.Fragment, v.RawFragment = "", ""
	if v.RawQuery != "" && len(params) > 0 {
		q, err := url.ParseQuery(v.RawQuery)
		if err != nil {
			v.RawQuery = "REDACTED" // unparseable: hide it whole rather than guess
			return v.String()
		}
		changed := false
		for name := range q {
			for _, p := range params {
				if strings.EqualFold(name, p) {
					vals := q[name]
					for i := range vals {
						vals[i] = "REDACTED"
					}
					changed = true
					break
				}
			}
		}
		if changed {
			v.RawQuery = q.Encode()
		}
	}
	return v.String()
}

// plainURL reports whether u has nothing to hide or escape: a scheme, a
// host and a path (empty or absolute) of characters that String writes as
// they are, and no user, query or fragment. Most requests' URLs are plain,
// and writing one costs a concatenation rather than String's work.
func plainURL(u *url.URL) bool {
	if u.Scheme == "" || u.Host == "" || u.Opaque != "" || u.User != nil || u.RawPath != "" || u.OmitHost ||
		u.ForceQuery || u.RawQuery != "" || u.Fragment != "" || u.RawFragment != "" ||
		u.Path != "" && u.Path[0] != '/' {
		return false
	}
	return plainChars(u.Scheme, "+") && plainChars(u.Host, ":") && plainChars(u.Path, "/")
}

// plainChars reports whether s holds only letters, digits, "-._~" and the
// bytes of extra: characters that url.URL.String writes unescaped in the
// part s is ("/" in a path, ":" in a host).
func plainChars(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9',
			b == '-', b == '.', b == '_', b == '~':
		case strings.IndexByte(extra, b) >= 0:
		default:
			return false
		}
	}
	return true
}
