package retryfuse

import (
	"net"
	"net/http"
	"net/url"
	"testing"

	"github.com/retryfuse/retryfuse/budget"
)

// A call's scoped key is its scope, a space and its key, with the default
// scope or a custom one; building it names the default scope the same way
// hostScope does.
func TestScopedKeyIsScopeSpaceKey(t *testing.T) {
	for _, raw := range []string{
		"http://api.example.com/x",
		"https://api.example.com/x",
		"https://API.example.com:8443/x",
		"http://[::1]:8080/",
		"https://[fe80::1%25eth0]/",
		"http://user:pw@127.0.0.1:9/",
		"ftp://files.example/x", // no default port
		"ftp://[::1]/x",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		req := &http.Request{Method: http.MethodPost, URL: u}
		want := joinedHostScope(u)
		if got := hostScope(req); got != want {
			t.Errorf("%s: hostScope %q, want %q", raw, got, want)
		}
		c := &call{p: &policy{budget: budget.Unlimited()}, req: req, key: requestKey{value: "order-1", present: true}} // nothing kept per scope: the name is built
		if got := c.scopedKey(); got != want+" order-1" {
			t.Errorf("%s: scoped key %q, want %q", raw, got, want+" order-1")
		}
		if got := c.scopeName(); got != want {
			t.Errorf("%s: scope %q, want %q", raw, got, want)
		}
		custom := &call{p: &policy{budget: budget.Unlimited(), scope: func(*http.Request) string { return "payments" }}, req: req, key: c.key}
		if got := custom.scopedKey(); got != "payments order-1" {
			t.Errorf("%s, custom scope: scoped key %q, want %q", raw, got, "payments order-1")
		}
	}
}

// joinedHostScope names u's default scope as net.JoinHostPort writes a
// host and port.
func joinedHostScope(u *url.URL) string {
	scheme, host, port := u.Scheme, u.Hostname(), u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	if port == "" {
		return scheme + "://" + host
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
