package decide

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// This file holds the schema of the contract's input (versions 1 and 2):
// each field, its type, its default and its checks.

func (d *contractDecoder) root(in *Input) error {
	if err := d.object(""); err != nil {
		return err
	}
	haveVersion := false
	err := d.members("", func(key, kp string) error {
		switch key {
		case "contractVersion":
			n, dec, err := d.number(kp)
			if err != nil {
				return err
			}
			if dec.neg || !dec.integral() || dec.clampedInt() < 1 || dec.clampedInt() > Version {
				return invalidf(kp, "unsupported version %s, want 1 or %d", shortNumber(n), Version)
			}
			in.Version = dec.clampedInt()
			haveVersion = true
			return nil
		case "policy":
			return d.policy(kp, &in.Policy)
		case "request":
			return d.request(kp, &in.Request)
		case "keyState":
			s, err := d.str(kp)
			if err != nil {
				return err
			}
			if err := in.KeyState.UnmarshalText([]byte(s)); err != nil {
				return invalidf(kp, "unknown value %s, want none, in_flight, completed or conflict", short(s))
			}
			return nil
		case "attempts":
			var err error
			in.Attempts, err = d.attempts(kp)
			return err
		}
		return unknownField(kp)
	})
	if err != nil {
		return err
	}
	if !haveVersion {
		return invalidf("contractVersion", "is required")
	}
	if d.sawHonours && in.Version < 2 {
		return invalidf("request.serverHonoursKeys", "needs contractVersion 2")
	}
	return nil
}

func (d *contractDecoder) policy(path string, p *Policy) error {
	if err := d.object(path); err != nil {
		return err
	}
	return d.members(path, func(key, kp string) error {
		switch key {
		case "failureThreshold":
			n, dec, err := d.number(kp)
			if err != nil {
				return err
			}
			if dec.neg || dec.zero() || !dec.integral() {
				return invalidf(kp, "must be a positive integer, got %s", shortNumber(n))
			}
			p.FailureThreshold = dec.clampedInt()
			return nil
		case "budgetUnits":
			n, dec, err := d.number(kp)
			if err != nil {
				return err
			}
			if dec.neg || dec.zero() {
				return invalidf(kp, "must be a positive number, got %s", shortNumber(n))
			}
			f, err := strconv.ParseFloat(string(n), 64)
			switch {
			case err != nil || math.IsInf(f, 0):
				return invalidf(kp, "is too large for a float64, got %s", shortNumber(n))
			case f == 0:
				return invalidf(kp, "is too small for a float64, got %s", shortNumber(n))
			}
			p.BudgetUnits = f
			return nil
		}
		return unknownField(kp)
	})
}

func (d *contractDecoder) request(path string, r *Request) error {
	if err := d.object(path); err != nil {
		return err
	}
	return d.members(path, func(key, kp string) error {
		var err error
		switch key {
		case "method":
			if r.Method, err = d.str(kp); err == nil && !isToken(r.Method) {
				err = invalidf(kp, "must be an HTTP method token, got %s", short(r.Method))
			}
			return err
		case "idempotencyKey":
			r.IdempotencyKey, err = d.boolean(kp)
			return err
		case "replayableBody":
			r.ReplayableBody, err = d.boolean(kp)
			return err
		case "serverHonoursKeys":
			d.sawHonours = true
			r.ServerHonoursKeys, err = d.boolean(kp)
			return err
		}
		return unknownField(kp)
	})
}

// isToken reports whether s is an RFC 9110 token, the syntax of a method.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func (d *contractDecoder) attempts(path string) ([]Attempt, error) {
	t, err := d.token(path)
	if err != nil {
		return nil, err
	}
	if t != json.Delim('[') {
		return nil, wrongType(path, "an array", t)
	}
	var out []Attempt // nil when empty, as when absent
	for i := 0; ; i++ {
		t, err := d.token(path)
		if err != nil {
			return nil, err
		}
		if t == json.Delim(']') {
			return out, nil
		}
		ap := path + "[" + strconv.Itoa(i) + "]"
		if t != json.Delim('{') {
			return nil, wrongType(ap, "an object", t)
		}
		a, err := d.attempt(ap)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
}

// attempt reads one attempt whose '{' was just read.
func (d *contractDecoder) attempt(path string) (Attempt, error) {
	a := Attempt{Phase: PhaseUnknown, Cost: 1}
	err := d.members(path, func(key, kp string) error {
		switch key {
		case "outcome":
			s, err := d.str(kp)
			if err != nil {
				return err
			}
			if err := a.Outcome.UnmarshalText([]byte(s)); err != nil {
				return invalidf(kp, "unknown value %s, want success, failure, timeout or unknown", short(s))
			}
			return nil
		case "phase":
			s, err := d.str(kp)
			if err != nil {
				return err
			}
			if err := a.Phase.UnmarshalText([]byte(s)); err != nil {
				return invalidf(kp, "unknown value %s, want pre_write, post_write or unknown", short(s))
			}
			return nil
		case "costUnits":
			n, dec, err := d.number(kp)
			if err != nil {
				return err
			}
			if dec.neg && !dec.zero() {
				return invalidf(kp, "must not be negative, got %s", shortNumber(n))
			}
			f, err := strconv.ParseFloat(string(n), 64)
			if err != nil || math.IsInf(f, 0) {
				return invalidf(kp, "is too large for a float64, got %s", shortNumber(n))
			}
			a.Cost = math.Abs(f) // -0 is 0
			return nil
		}
		return unknownField(kp)
	})
	if err != nil {
		return Attempt{}, err
	}
	if a.Outcome == 0 {
		return Attempt{}, invalidf(path+".outcome", "is required")
	}
	return a, nil
}
