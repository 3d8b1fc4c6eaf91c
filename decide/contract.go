package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// This file is the JSON form of contract v1: DecodeInput reads one
// question, EncodeVerdict writes one answer. The decision itself stays in
// decide.go.

// ErrInvalidInput is wrapped by every error DecodeInput
// returns for input that breaks contract v1. The error is a
// *InputError.
var ErrInvalidInput = errors.New("retryfuse: invalid contract input")

// InputError says which field of a contract input is invalid and why.
// errors.Is(err, ErrInvalidInput) holds. Its message is one line.
type InputError struct {
	// Field is the path of the offending field, for example
	// "attempts[2].phase". It is empty when the problem is the document as a
	// whole: empty input, not an object, trailing data.
	Field string
	// Problem says what is wrong, for example `unknown value "response"`.
	Problem string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return ErrInvalidInput.Error() + ": " + e.Problem
	}
	return ErrInvalidInput.Error() + ": " + e.Field + ": " + e.Problem
}

// Is reports whether target is ErrInvalidInput.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

func invalidf(field, format string, args ...any) error {
	problem := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, fmt.Sprintf(format, args...))
	return &InputError{Field: field, Problem: problem}
}

// DecodeInput reads exactly one contract v1 input, a JSON object, from
// r, checks it strictly and applies the contract's defaults to absent fields.
//
// Field names and enumeration values are case-sensitive. An unknown or
// duplicate field, a value of the wrong type, null, an unknown enumeration
// value, a missing required field, a threshold or budget that is not
// positive, a negative cost, a number too large for a float64, malformed JSON
// and anything after the object but white space are rejected with a
// *InputError. Numbers follow JSON's model: an integer field accepts
// any number with no fractional part (5, 5.0, 5e0); a failureThreshold too
// large for an int is taken as the largest int, which no streak can reach.
//
// An input longer than MaxInputBytes is invalid. An error reading r
// is returned as it is, wrapped but without
// ErrInvalidInput.
func DecodeInput(r io.Reader) (Input, error) {
	rec := &readRecorder{r: r}
	d := &contractDecoder{dec: json.NewDecoder(rec), rec: rec}
	d.dec.UseNumber()
	in := Input{
		Policy:  DefaultPolicy(),
		Request: Request{Method: "GET", ReplayableBody: true},
	}
	if err := d.root(&in); err != nil {
		return Input{}, err
	}
	if _, err := d.dec.Token(); err != io.EOF {
		if rec.err != nil {
			return Input{}, rec.readError()
		}
		return Input{}, invalidf("", "trailing data after the object at byte %d", d.dec.InputOffset())
	}
	return in, nil
}

// EncodeVerdict writes v as one line of JSON in the contract's output form,
// the same for versions 1 and 2, with the version of the question (v.Version;
// zero counts as 1):
//
//	{"contractVersion":1,"decision":"brake","evidence":"fail","rule":6,"reason":"..."}
//
// decision and evidence are the contract's answer. rule (the number of the
// rule that decided, left out when zero) and reason (a short sentence) are
// informative: they are not part of the compatibility promise. A Verdict
// whose Decision or Evidence is not a known value is not written.
func EncodeVerdict(w io.Writer, v Verdict) error {
	decision, err := v.Decision.MarshalText()
	if err != nil {
		return err
	}
	evidence, err := v.Evidence.MarshalText()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(struct {
		Version  int    `json:"contractVersion"`
		Decision string `json:"decision"`
		Evidence string `json:"evidence"`
		Rule     int    `json:"rule,omitempty"`
		Reason   string `json:"reason"`
	}{max(v.Version, 1), string(decision), string(evidence), int(v.Rule), v.Reason})
}

// The text forms below are the contract's names. They let the
// values appear in JSON, logs and flags; MarshalText refuses a value that
// has no name, UnmarshalText a name that is not known. Both are exact and
// case-sensitive.

func marshalName(names []string, i int, typ string) ([]byte, error) {
	if i < len(names) && names[i] != "" {
		return []byte(names[i]), nil
	}
	return nil, fmt.Errorf("retryfuse: %s(%d) has no text form", typ, i)
}

func unmarshalName(names []string, text []byte, typ string) (int, error) {
	for i, n := range names {
		if n != "" && n == string(text) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("retryfuse: unknown %s %q", typ, text)
}

// MarshalText implements encoding.TextMarshaler.
func (p Phase) MarshalText() ([]byte, error) { return marshalName(phaseNames[:], int(p), "Phase") }

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *Phase) UnmarshalText(text []byte) error {
	i, err := unmarshalName(phaseNames[:], text, "Phase")
	if err == nil {
		*p = Phase(i)
	}
	return err
}

// MarshalText implements encoding.TextMarshaler.
func (o Outcome) MarshalText() ([]byte, error) {
	return marshalName(outcomeNames[:], int(o), "Outcome")
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (o *Outcome) UnmarshalText(text []byte) error {
	i, err := unmarshalName(outcomeNames[:], text, "Outcome")
	if err == nil {
		*o = Outcome(i)
	}
	return err
}

// MarshalText implements encoding.TextMarshaler.
func (k KeyState) MarshalText() ([]byte, error) {
	return marshalName(keyStateNames[:], int(k), "KeyState")
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *KeyState) UnmarshalText(text []byte) error {
	i, err := unmarshalName(keyStateNames[:], text, "KeyState")
	if err == nil {
		*k = KeyState(i)
	}
	return err
}

// MarshalText implements encoding.TextMarshaler.
func (d Decision) MarshalText() ([]byte, error) {
	return marshalName(decisionNames[:], int(d), "Decision")
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Decision) UnmarshalText(text []byte) error {
	i, err := unmarshalName(decisionNames[:], text, "Decision")
	if err == nil {
		*d = Decision(i)
	}
	return err
}

// MarshalText implements encoding.TextMarshaler.
func (e Evidence) MarshalText() ([]byte, error) {
	return marshalName(evidenceNames[:], int(e), "Evidence")
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (e *Evidence) UnmarshalText(text []byte) error {
	i, err := unmarshalName(evidenceNames[:], text, "Evidence")
	if err == nil {
		*e = Evidence(i)
	}
	return err
}
