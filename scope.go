package retryfuse

import (
	"net/http"
	"strings"
)

// hostScope is the default scope of a request: its scheme, host and port,
// the port written even when it is the scheme's default
// ("https://api.example.com:443"), so that one failing dependency neither
// spends another's retry budget nor opens its breaker.
func hostScope(req *http.Request) string {
	return hostScopeWith(req, "", "")
}

// hostScopeWith returns hostScope(req) followed by sep and suffix, built
// in one allocation: hostScope(req) is its prefix, to be sliced off
// without another.
func hostScopeWith(req *http.Request, sep, suffix string) string {
	if req == nil || req.URL == nil {
		return sep + suffix
	}
	scheme, host, port := req.URL.Scheme, req.URL.Hostname(), req.URL.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	bracket := port != "" && strings.IndexByte(host, ':') >= 0 // an IPv6 address, as net.JoinHostPort writes it
	var b strings.Builder
	b.Grow(len(scheme) + len("://[]:") + len(host) + len(port) + len(sep) + len(suffix))
	b.WriteString(scheme)
	b.WriteString("://")
	if bracket {
		b.WriteByte('[')
	}
	b.WriteString(host)
	if bracket {
		b.WriteByte(']')
	}
	if port != "" {
		b.WriteByte(':')
		b.WriteString(port)
	}
	b.WriteString(sep)
	b.WriteString(suffix)
	return b.String()
}

// hostKey identifies a scope: by the request's scheme and host (as
// written in its URL) for the default scope, so that finding its record
// (scopes.go) builds no string; by name for a custom Scope.
type hostKey struct{ scheme, host, scope string }

// hostKeyOf is the key of req's default scope; req.URL is not nil.
func hostKeyOf(req *http.Request) hostKey {
	return hostKey{scheme: req.URL.Scheme, host: withoutDefaultPort(req.URL.Scheme, req.URL.Host)}
}

// withoutDefaultPort returns host without the scheme's default port
// (":80" for http, ":443" for https), so that "h" and "h:80" find the same
// record, as hostScope names them both "http://h:80". It slices host and
// builds no string.
func withoutDefaultPort(scheme, host string) string {
	var port string
	switch scheme {
	case "http":
		port = ":80"
	case "https":
		port = ":443"
	default:
		return host
	}
	if strings.HasSuffix(host, port) {
		return host[:len(host)-len(port)]
	}
	return host
}

// breakerScopeName returns the call's scope at the breaker: its scope, or,
// with BreakerScope, the scope divided by the function's value. It is
// computed on first use.
func (c *call) breakerScopeName() string {
	if c.p.breakerScope == nil {
		return c.scopeName()
	}
	if c.bscope == "" {
		c.bscope = breakerScopeOf(c.p.breakerScope, c.req, c.scopeName())
	}
	return c.bscope
}

// breakerScopeOf returns scope divided by f's value for req: scope, a
// space and the value, or scope alone when f returns empty or panics.
func breakerScopeOf(f func(*http.Request) string, req *http.Request, scope string) (name string) {
	defer func() {
		if recover() != nil {
			name = scope
		}
	}()
	if v := f(req); v != "" {
		return scope + " " + v
	}
	return scope
}
