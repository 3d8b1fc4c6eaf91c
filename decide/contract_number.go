package decide

import (
	"math"
	"strconv"
	"strings"
)

// decimal is a JSON number literal read exactly, without rounding: its value
// is ±digits × 10^(point-len(digits)). digits has neither leading nor
// trailing zeros, so the value zero has no digits. It lets the decoder tell
// 2.5 from an integer and 1e400 from a float64 without trusting a rounded
// float.
type decimal struct {
	neg    bool
	digits string
	point  int // where the decimal point falls in digits
}

// parseDecimal reads a literal that the JSON scanner has already accepted.
func parseDecimal(lit string) decimal {
	var d decimal
	if strings.HasPrefix(lit, "-") {
		d.neg, lit = true, lit[1:]
	}
	mant, exp := lit, 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant = lit[:i]
		e := lit[i+1:]
		sign := 1
		switch {
		case strings.HasPrefix(e, "-"):
			sign, e = -1, e[1:]
		case strings.HasPrefix(e, "+"):
			e = e[1:]
		}
		for _, c := range e {
			if exp < 1e9 { // saturate: beyond this only the sign matters
				exp = exp*10 + int(c-'0')
			}
		}
		exp *= sign
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	all := intPart + frac
	d.point = len(intPart) + exp
	for len(all) > 0 && all[0] == '0' {
		all = all[1:]
		d.point--
	}
	d.digits = strings.TrimRight(all, "0")
	return d
}

func (d decimal) zero() bool { return d.digits == "" }

// integral reports whether the value has no fractional part.
func (d decimal) integral() bool { return d.zero() || d.point >= len(d.digits) }

// clampedInt returns a non-negative integral value as an int, or
// math.MaxInt when it does not fit.
func (d decimal) clampedInt() int {
	if d.zero() {
		return 0
	}
	if d.point > 19 {
		return math.MaxInt
	}
	n, err := strconv.ParseInt(d.digits+strings.Repeat("0", d.point-len(d.digits)), 10, 0)
	if err != nil {
		return math.MaxInt
	}
	return int(n)
}
