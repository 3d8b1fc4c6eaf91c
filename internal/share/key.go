package share

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// This file is which reads may share a call, and the key under which they
// do: the default (what makes two reads identical), and a ShareKey's,
// taken with the method.

// Eligible reports whether req is a read that may share a call: a GET or
// HEAD without a body or an upgrade. Whether a Transport above owns the
// request is the caller's to check.
func Eligible(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead:
	default:
		return false
	}
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	return req.Header.Get("Upgrade") == ""
}

// traceHeader reports whether name (in canonical form) is a header that
// only traces or identifies a request, which the default key leaves out:
// with them, no two requests of a traced client would ever share. Any
// other header may vary the answer, or carry credentials, and is in the
// key.
func traceHeader(name string) bool {
	switch name {
	case "Traceparent", "Tracestate", "Baggage", "B3",
		"X-Request-Id", "X-Correlation-Id", "X-Amzn-Trace-Id",
		"X-Cloud-Trace-Context", "Uber-Trace-Id", "Sentry-Trace":
		return true
	}
	return strings.HasPrefix(name, "X-B3-")
}

// defaultKey returns the key of req: its method, URL (user information
// included), Host, and every header but the trace headers (Traceparent,
// Tracestate, Baggage, B3, X-B3-*, X-Request-Id and the like), sorted by
// name, their values in order. Each part is written with its length
// first, so that no two requests that differ have the same key.
func defaultKey(req *http.Request) string {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	var url string
	if req.URL != nil {
		url = req.URL.String()
	}
	names := make([]string, 0, len(req.Header))
	for name := range req.Header {
		if !traceHeader(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	part := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	part(method)
	part(url)
	part(req.Host)
	for _, name := range names {
		vs := req.Header[name]
		part(name)
		b.WriteString(strconv.Itoa(len(vs)))
		for _, v := range vs {
			part(v)
		}
	}
	return b.String()
}

// KeyOf returns req's key under f (defaultKey when f is nil), prefixed
// with its method: a GET never shares a HEAD's answer. An empty key means
// req makes a call of its own. A function that panics gives an empty key
// and an error that says so.
func KeyOf(f func(*http.Request) string, req *http.Request) (key string, err error) {
	if f == nil {
		return defaultKey(req), nil
	}
	defer func() {
		if v := recover(); v != nil {
			key, err = "", fmt.Errorf("retryfuse: ShareKey panicked: %v", v)
		}
	}()
	k := f(req)
	if k == "" {
		return "", nil
	}
	m := req.Method
	if m == "" {
		m = http.MethodGet
	}
	return m + " " + k, nil
}
