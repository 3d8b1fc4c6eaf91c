package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// This file reads JSON for DecodeInput token by token, so that every
// error can name the path of the field where it happened and no field is
// matched case-insensitively, as encoding/json would.

// readRecorder remembers the reader's own error, so that an I/O failure is
// not mistaken for malformed JSON.
// It also enforces MaxInputBytes.
type readRecorder struct {
	r    io.Reader
	err  error
	read int64
}

// MaxInputBytes bounds one contract input: a larger one is invalid.
const MaxInputBytes = 1 << 20

var errContractTooLarge = errors.New("input larger than the limit")

func (rr *readRecorder) Read(p []byte) (int, error) {
	if rr.read >= MaxInputBytes {
		rr.err = errContractTooLarge
		return 0, rr.err
	}
	if left := MaxInputBytes - rr.read; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := rr.r.Read(p)
	rr.read += int64(n)
	if err != nil && err != io.EOF {
		rr.err = err
	}
	return n, err
}

// readError turns the reader's error into the decoder's: an input over the
// limit is invalid input, any other failure an I/O error.
func (rr *readRecorder) readError() error {
	if rr.err == errContractTooLarge {
		return invalidf("", "input larger than %d bytes", MaxInputBytes)
	}
	return fmt.Errorf("retryfuse: reading contract input: %w", rr.err)
}

type contractDecoder struct {
	dec        *json.Decoder
	rec        *readRecorder
	started    bool // a token was read
	sawHonours bool // request.serverHonoursKeys was given (version 2 only)
}

// token reads the next token; path names where the reader stands.
func (d *contractDecoder) token(path string) (json.Token, error) {
	t, err := d.dec.Token()
	if err == nil {
		d.started = true
		return t, nil
	}
	if d.rec.err != nil {
		return nil, d.rec.readError()
	}
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return nil, invalidf(path, "malformed JSON at byte %d: %s", se.Offset, se.Error())
	case err == io.EOF && !d.started:
		return nil, invalidf(path, "the input is empty, want a JSON object")
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return nil, invalidf(path, "malformed JSON: unexpected end of input")
	}
	return nil, invalidf(path, "malformed JSON: %s", err.Error())
}

// kind names the JSON type of the value a token starts.
func kind(t json.Token) string {
	switch t := t.(type) {
	case json.Delim:
		if t == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

func wrongType(path, want string, t json.Token) error {
	return invalidf(path, "must be %s, got %s", want, kind(t))
}

// members reads the members of an object whose '{' was just read and hands
// each to member. It rejects duplicate fields.
func (d *contractDecoder) members(path string, member func(key, keyPath string) error) error {
	var seen []string
	for {
		t, err := d.token(path)
		if err != nil {
			return err
		}
		if t == json.Delim('}') {
			return nil
		}
		key, _ := t.(string) // the decoder only gives strings in key position
		kp := fieldPath(path, key)
		for _, s := range seen {
			if s == key {
				return invalidf(kp, "duplicate field")
			}
		}
		seen = append(seen, key)
		if err := member(key, kp); err != nil {
			return err
		}
	}
}

func unknownField(path string) error { return invalidf(path, "unknown field") }

// fieldPath appends key to path, quoting a key that is not a plain name.
func fieldPath(path, key string) string {
	plain := key != ""
	for _, c := range key {
		if !(c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return path + "[" + short(key) + "]"
	case path == "":
		return key
	}
	return path + "." + key
}

// short quotes s for a message, cut to a readable length.
func short(s string) string {
	const max = 40
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && s[cut]&0xc0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// shortNumber gives a number literal for a message, cut to a readable length.
func shortNumber(n json.Number) string {
	if len(n) <= 40 {
		return string(n)
	}
	return string(n[:40]) + "..."
}

func (d *contractDecoder) object(path string) error {
	t, err := d.token(path)
	if err != nil {
		return err
	}
	if t != json.Delim('{') {
		return wrongType(path, "an object", t)
	}
	return nil
}

func (d *contractDecoder) str(path string) (string, error) {
	t, err := d.token(path)
	if err != nil {
		return "", err
	}
	s, ok := t.(string)
	if !ok {
		return "", wrongType(path, "a string", t)
	}
	return s, nil
}

func (d *contractDecoder) boolean(path string) (bool, error) {
	t, err := d.token(path)
	if err != nil {
		return false, err
	}
	b, ok := t.(bool)
	if !ok {
		return false, wrongType(path, "a boolean", t)
	}
	return b, nil
}

func (d *contractDecoder) number(path string) (json.Number, decimal, error) {
	t, err := d.token(path)
	if err != nil {
		return "", decimal{}, err
	}
	n, ok := t.(json.Number)
	if !ok {
		return "", decimal{}, wrongType(path, "a number", t)
	}
	return n, parseDecimal(string(n)), nil
}
