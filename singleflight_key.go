package retryfuse

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// This file is the key of a shared read: the default (what makes two reads
// identical), and a ShareKey's, taken with the method.

// traceHeaders are the headers that only trace or identify a request, and
// that the default key leaves out: with them, no two requests of a traced
// client would ever share. Any other header may vary the answer, or carry
// credentials, and is in the key.
var traceHeaders = map[string]bool{
	"Traceparent":           true,
	"Tracestate":            true,
	"Baggage":               true,
	"B3":                    true,
	"X-Request-Id":          true,
	"X-Correlation-Id":      true,
	"X-Amzn-Trace-Id":       true,
	"X-Cloud-Trace-Context": true,
	"Uber-Trace-Id":         true,
	"Sentry-Trace":          true,
}

// defaultShareKey returns the key of req: its method, URL (user
// information included), Host, and every header but the trace headers
// (traceHeaders, and X-B3-*), sorted by name, their values in order. Each
// part is written with its length first, so that no two requests that
// differ have the same key.
func defaultShareKey(req *http.Request) string {
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
		if !traceHeaders[name] && !strings.HasPrefix(name, "X-B3-") {
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

// shareKeyOf returns req's key under f (the default key when f is nil),
// prefixed with its method: a GET never shares a HEAD's answer. A
// function that panics gives an empty key and an error that says so.
func shareKeyOf(f func(*http.Request) string, req *http.Request) (key string, err error) {
	if f == nil {
		return defaultShareKey(req), nil
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
