package retryfuse

import (
	"net/url"
	"strings"
)

// defaultRedactedQueryParams are the query parameters whose values are
// replaced by "REDACTED" in URLs the transport reports (errors, hooks,
// logs) when Transport.RedactQueryParams is nil. Names match without
// regard to case.
var defaultRedactedQueryParams = []string{
	"access_token", "api_key", "apikey", "auth", "client_secret",
	"code", "key", "password", "secret", "sig", "signature", "token",
}

// redactURL renders u without user information and with the values of the
// named query parameters replaced, so that no credential reaches a log.
func redactURL(u *url.URL, params []string) string {
	if u == nil {
		return ""
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
