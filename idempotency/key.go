package idempotency

import (
	"net/http"
	"strconv"
	"strings"
)

// This file reads the idempotency key of a request.

// MaxKeyLen is the longest idempotency key accepted, in bytes (of the key
// itself, after the quotes and escapes of the sf-string form are taken
// off). retryfuse's client sends none longer.
const MaxKeyLen = 255

// The request header fields that carry the key: the draft's, and the
// older form that retryfuse's client (and net/http) also recognise.
const (
	headerKey  = "Idempotency-Key"
	headerXKey = "X-Idempotency-Key"
)

// keyError says why a key header is malformed; the problem detail carries
// it.
type keyError struct{ detail string }

func (e *keyError) Error() string { return "idempotency: " + e.detail }

func malformed(detail string) error { return &keyError{detail: detail} }

// keyOf returns the idempotency key h carries and whether one is there.
// Idempotency-Key and X-Idempotency-Key are both read; sent both, they
// must name the same key. A header sent more than once, or a value that
// is not a key, is an error (*keyError).
func keyOf(h http.Header) (key string, present bool, err error) {
	v, ok := h[headerKey]
	xv, xok := h[headerXKey]
	if !ok && !xok {
		return "", false, nil // the usual unkeyed request: no parsing at all
	}
	if ok {
		if key, err = oneKey(headerKey, v); err != nil {
			return "", true, err
		}
	}
	if xok {
		xkey, err := oneKey(headerXKey, xv)
		if err != nil {
			return "", true, err
		}
		if ok && xkey != key {
			return "", true, malformed(headerKey + " and " + headerXKey + " name different keys")
		}
		key = xkey
	}
	return key, true, nil
}

// oneKey parses the values of the header name: exactly one field line.
func oneKey(name string, v []string) (string, error) {
	switch len(v) {
	case 0:
		return "", malformed(name + " has no value")
	case 1:
	default:
		return "", malformed(name + " is sent " + strconv.Itoa(len(v)) + " times; send it once")
	}
	key, err := parseKey(v[0])
	if err != nil {
		return "", malformed(name + ": " + err.(*keyError).detail)
	}
	return key, nil
}

// parseKey returns the key a header value carries, in either of two forms:
//
//   - The draft's: a Structured Field String (RFC 8941, Section 3.3.3), a
//     quoted string whose characters are visible ASCII or spaces, with \"
//     and \\ as escapes: "8e03978e-40d5-43e8-bc93-6894a57f9324". The key
//     is what the quotes enclose, unescaped. Parameters after it are
//     refused: the draft defines none.
//   - The bare form that clients send today (retryfuse's among them):
//     visible ASCII and inner spaces, not beginning with a quote.
//
// Both name the same key when what they carry is equal: "abc" and abc are
// one key. The key is 1 to MaxKeyLen bytes. Spaces and tabs around the
// value are not part of it.
func parseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", malformed("the key is empty")
	}
	if v[0] == '"' {
		return parseSFString(v)
	}
	if len(v) > MaxKeyLen {
		return "", malformed(strconv.Itoa(len(v)) + " bytes; at most " + strconv.Itoa(MaxKeyLen) + " are accepted")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return "", notVisible(c, i)
		}
	}
	return v, nil
}

// parseSFString parses v, which begins with a quote, as an sf-string that
// makes the whole value.
func parseSFString(v string) (string, error) {
	var b []byte // the key, once an escape makes it differ from v's bytes
	start := 1
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			if i != len(v)-1 {
				return "", malformed("text after the closing quote; parameters are not accepted")
			}
			key := v[start:i]
			if b != nil {
				key = string(append(b, v[start:i]...))
			}
			switch {
			case key == "":
				return "", malformed("the key is empty")
			case len(key) > MaxKeyLen:
				return "", malformed(strconv.Itoa(len(key)) + " bytes; at most " + strconv.Itoa(MaxKeyLen) + " are accepted")
			}
			return key, nil
		case c == '\\':
			if i+1 == len(v)-1 || i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", malformed(`a backslash in a quoted key must escape " or \`)
			}
			b = append(b, v[start:i]...)
			i++
			start = i
		case c < 0x20 || c > 0x7e:
			return "", notVisible(c, i)
		}
		if i > 2*MaxKeyLen+1 { // longer than any key, escaped, could be
			return "", malformed("longer than " + strconv.Itoa(MaxKeyLen) + " bytes")
		}
	}
	return "", malformed("a quoted key lacks its closing quote")
}

func notVisible(c byte, at int) error {
	return malformed("byte 0x" + strconv.FormatUint(uint64(c), 16) + " at offset " + strconv.Itoa(at) + " is not visible ASCII")
}
