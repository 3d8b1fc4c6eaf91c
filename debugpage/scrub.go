package debugpage

import "strings"

// This file hides what may be a credential in an error's text wherever
// it is, whether or not it is within a URL that parses (redact.go renders
// those). A separator, an '@' and an '=' are found as they are or
// percent-encoded once ("%3A%2F%2F", "%40", "%3D"), for a URL quoted
// within another's query or path is.

// hidden replaces what is hidden.
const hidden = "REDACTED"

// hideUserinfo returns s with the user information after each "://"
// hidden: what lies between it and the last '@' before the next "://"
// (or the end of s), whatever it holds (spaces, quotes, slashes), is
// replaced by hidden. An '@' after a URL's host (in its path, or in the
// text after it) hides more than the user information, never less.
func hideUserinfo(s string) string {
	var b strings.Builder
	done := 0 // s[:done] is written to b
	for i := 0; i < len(s); {
		n := separatorAt(s, i)
		if n == 0 {
			i++
			continue
		}
		from, end := i+n, len(s)
		for j := from; j < len(s); j++ {
			if separatorAt(s, j) > 0 {
				end = j
				break
			}
		}
		at := lastAt(s, from, end)
		if at < 0 {
			i = end
			continue
		}
		b.WriteString(s[done:from])
		b.WriteString(hidden)
		done, i = at, end
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// separatorAt returns the length of the "://" at s[i:], as it is or
// percent-encoded, or 0.
func separatorAt(s string, i int) int {
	n := 0
	for _, c := range [...]byte{':', '/', '/'} {
		m := byteAt(s, i+n, c)
		if m == 0 {
			return 0
		}
		n += m
	}
	return n
}

// byteAt returns the length of c at s[i:], as it is (1) or
// percent-encoded (3), or 0.
func byteAt(s string, i int, c byte) int {
	switch {
	case i < len(s) && s[i] == c:
		return 1
	case i+3 <= len(s) && s[i] == '%' && strings.EqualFold(s[i+1:i+3], hexByte(c)):
		return 3
	}
	return 0
}

// hexByte is c percent-encoded, without its '%'.
func hexByte(c byte) string {
	const digits = "0123456789ABCDEF"
	return string([]byte{digits[c>>4], digits[c&15]})
}

// lastAt returns the index of the last '@' (or "%40") within s[from:end],
// or -1.
func lastAt(s string, from, end int) int {
	for j := end - 1; j >= from; j-- {
		if s[j] == '@' || j+3 <= end && byteAt(s, j, '@') == 3 {
			return j
		}
	}
	return -1
}

// hideParams returns s with the value of each of the query parameters
// params hidden wherever the parameter is named (its name, in any case,
// then '=' or "%3D"): up to the next '&' or '#', an unquoted '"', a line's
// end or s's end ("%26" and "%23" too after "%3D"). A value with a space
// in a URL that is not quoted hides the rest of its line.
func hideParams(s string, params []string) string {
	for _, p := range params {
		if p == "" {
			continue
		}
		for i := 0; ; {
			j := indexFold(s, p, i)
			if j < 0 {
				break
			}
			eq := byteAt(s, j+len(p), '=')
			if eq == 0 {
				i = j + 1
				continue
			}
			from := j + len(p) + eq
			end := valueEnd(s, from, eq == 3)
			if s[from:end] != hidden {
				s = s[:from] + hidden + s[end:]
			}
			i = from + len(hidden)
		}
	}
	return s
}

// indexFold returns the index of the first p in s[from:], in any case, or
// -1.
func indexFold(s, p string, from int) int {
	for j := from; j+len(p) <= len(s); j++ {
		if strings.EqualFold(s[j:j+len(p)], p) {
			return j
		}
	}
	return -1
}

// valueEnd returns where the query parameter's value that starts at
// s[from] ends; encoded says it was named as "%3D".
func valueEnd(s string, from int, encoded bool) int {
	for j := from; j < len(s); j++ {
		switch s[j] {
		case '&', '#', '\n', '\r':
			return j
		case '"':
			if !escaped(s, j) {
				return j
			}
		case '%':
			if encoded && (byteAt(s, j, '&') == 3 || byteAt(s, j, '#') == 3) {
				return j
			}
		}
	}
	return len(s)
}

// escaped reports whether s[j] follows an odd number of backslashes: a
// quoted string's escape.
func escaped(s string, j int) bool {
	n := 0
	for j--; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// quotedFragments are the messages of url.Parse's errors that quote a
// URL that does not parse (url.Error's "parse", which quotes it up to a
// '#', so that a password with one shows without its '@'), or a piece of
// it (their causes), which may be a piece of its user information.
var quotedFragments = [...]string{"parse ", "invalid port ", "invalid character ", "invalid URL escape "}

// hideQuoted returns s with what url.Parse's errors quote hidden.
func hideQuoted(s string) string {
	for _, m := range quotedFragments {
		for i := 0; ; {
			j := strings.Index(s[i:], m)
			if j < 0 {
				break
			}
			from := i + j + len(m) + 1 // after the opening quote
			if from > len(s) || s[from-1] != '"' {
				i += j + len(m)
				continue
			}
			end := from
			for end < len(s) && (s[end] != '"' || escaped(s, end)) {
				end++
			}
			s = s[:from] + hidden + s[end:]
			i = from + len(hidden)
		}
	}
	return s
}
