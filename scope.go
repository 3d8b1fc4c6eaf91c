package retryfuse

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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

// budgets keeps one Budget per scope, created on first use, at most max of
// them. When full, an arbitrary scope's budget is dropped to make room: a
// fresh budget for a scope that returns is the cost of the bound.
type budgets struct {
	last atomic.Pointer[scopedBudget] // the budget found or made last (in m, or just dropped from it), read without the lock
	mu   sync.Mutex
	m    map[hostKey]*scopedBudget
}

// scopedBudget is a scope's budget with its key.
type scopedBudget struct {
	key hostKey
	b   Budget
}

// hostKey identifies a scope: by the request's scheme and host (as
// written in its URL) for the default scope, so that finding a budget
// builds no string; by name for a custom Scope.
type hostKey struct{ scheme, host, scope string }

// hostKeyOf is the key of req's default scope; req.URL is not nil.
func hostKeyOf(req *http.Request) hostKey {
	return hostKey{scheme: req.URL.Scheme, host: withoutDefaultPort(req.URL.Scheme, req.URL.Host)}
}

// withoutDefaultPort returns host without the scheme's default port
// (":80" for http, ":443" for https), so that "h" and "h:80" find the same
// budget, as hostScope names them both "http://h:80". It slices host and
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

// get returns the budget of scope k, creating it with p.newBudget on first
// use, on p's clock; it keeps at most p.maxScopes.
//
// Most Transports call one dependency, so the budget found last is kept
// apart and read first without the lock: most calls then touch neither
// the lock nor the map (which costs more than its instructions suggest:
// between two calls, the memory behind them has gone cold).
func (b *budgets) get(k hostKey, scope func() string, p *policy) (Budget, error) {
	if l := b.last.Load(); l != nil && l.key == k {
		return l.b, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if sb, ok := b.m[k]; ok {
		b.last.Store(sb)
		return sb.b, nil
	}
	// Created under the lock, so that a scope's budget is created once: a
	// factory that keeps what it creates (to read Snapshots) sees exactly
	// the budgets in use.
	bud, err := p.newBudget(scope())
	if err != nil {
		return nil, err
	}
	if bud == nil {
		bud = unlimitedBudget{}
	}
	bud = budgetOn(bud, p.clock)
	if b.m == nil {
		b.m = make(map[hostKey]*scopedBudget)
	}
	if len(b.m) >= p.maxScopes {
		for k := range b.m {
			delete(b.m, k)
			break
		}
	}
	sb := &scopedBudget{key: k, b: bud}
	b.m[k] = sb
	b.last.Store(sb)
	return bud, nil
}
