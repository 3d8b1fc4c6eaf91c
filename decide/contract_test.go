package decide

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A contract fixture pins one input of contract v1 to its verdict, or to the
// field its error must name. Each file in testdata/contract holds one.
type contractFixture struct {
	About     string          `json:"about"`
	Input     json.RawMessage `json:"input"`     // the input as JSON, kept byte for byte
	InputText *string         `json:"inputText"` // or as text, for input that is not JSON
	Want      *struct {
		Decision string `json:"decision"`
		Evidence string `json:"evidence"`
		Rule     int    `json:"rule"`
	} `json:"want"`
	WantError *struct {
		Field string `json:"field"` // "" for the document as a whole
	} `json:"wantError"`

	name string
}

func (f contractFixture) input() []byte {
	if f.InputText != nil {
		return []byte(*f.InputText)
	}
	return f.Input
}

func loadContractFixtures(t testing.TB) []contractFixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "contract", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no fixtures in testdata/contract")
	var out []contractFixture
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var f contractFixture
		require.NoError(t, dec.Decode(&f), "fixture %s", p)
		f.name = strings.TrimSuffix(filepath.Base(p), ".json")
		require.True(t, (f.Input != nil) != (f.InputText != nil), "fixture %s: want exactly one of input and inputText", p)
		require.True(t, (f.Want != nil) != (f.WantError != nil), "fixture %s: want exactly one of want and wantError", p)
		require.NotEmpty(t, f.About, "fixture %s: say what it pins in about", p)
		out = append(out, f)
	}
	return out
}

func TestContractFixtures(t *testing.T) {
	for _, f := range loadContractFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			in, err := DecodeInput(bytes.NewReader(f.input()))
			if f.WantError != nil {
				require.Error(t, err, "got a valid input %+v, want an error naming %q (%s)", in, f.WantError.Field, f.About)
				var ie *InputError
				require.ErrorAs(t, err, &ie)
				assert.ErrorIs(t, err, ErrInvalidInput)
				assert.Equal(t, f.WantError.Field, ie.Field, "got field %q, want %q: %v", ie.Field, f.WantError.Field, err)
				assert.NotContains(t, err.Error(), "\n", "got a message of several lines, want one")
				assert.Contains(t, err.Error(), f.WantError.Field)
				return
			}
			require.NoError(t, err, "got an error, want a verdict (%s)", f.About)
			v := Decide(in)
			got := [3]any{v.Decision.String(), v.Evidence.String(), int(v.Rule)}
			want := [3]any{f.Want.Decision, f.Want.Evidence, f.Want.Rule}
			assert.Equal(t, want, got, "got %v, want %v (%s)", got, want, f.About)
		})
	}
}

// parseVerdictLine checks that b is one line of JSON in the output form of
// contract v1, with exactly its fields, and returns the verdict.
func parseVerdictLine(t testing.TB, b []byte) Verdict {
	t.Helper()
	require.True(t, bytes.HasSuffix(b, []byte("\n")) && bytes.Count(b, []byte("\n")) == 1, "got %q, want one line", b)
	var out struct {
		Version  *int      `json:"contractVersion"`
		Decision *Decision `json:"decision"`
		Evidence *Evidence `json:"evidence"`
		Rule     int       `json:"rule"`
		Reason   string    `json:"reason"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&out), "verdict %s", b)
	require.NotNil(t, out.Version, "verdict %s has no contractVersion", b)
	require.Contains(t, []int{1, 2}, *out.Version, "verdict %s: contractVersion", b)
	require.NotNil(t, out.Decision, "verdict %s has no decision", b)
	require.NotNil(t, out.Evidence, "verdict %s has no evidence", b)
	require.NotEmpty(t, out.Reason, "verdict %s has no reason", b)
	return Verdict{Decision: *out.Decision, Evidence: *out.Evidence, Rule: Rule(out.Rule), Reason: out.Reason, Version: *out.Version}
}

func TestDecodeInputDefaults(t *testing.T) {
	in, err := DecodeInput(strings.NewReader(`{"contractVersion":1,"attempts":[{"outcome":"failure"}]}`))
	require.NoError(t, err)
	want := Input{
		Version:  1,
		Policy:   Policy{FailureThreshold: 5, BudgetUnits: 100},
		Request:  Request{Method: "GET", IdempotencyKey: false, ReplayableBody: true},
		KeyState: KeyNone,
		Attempts: []Attempt{{Outcome: OutcomeFailure, Phase: PhaseUnknown, Cost: 1}},
	}
	assert.Equal(t, want, in, "got %+v, want %+v", in, want)
}

func TestDecodeInputReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	_, err := DecodeInput(iotest.ErrReader(boom))
	require.Error(t, err)
	assert.ErrorIs(t, err, boom, "got %v, want the reader's error", err)
	assert.NotErrorIs(t, err, ErrInvalidInput, "got %v: a read error is not invalid input", err)

	// The same after a valid start: the object is cut by the reader.
	_, err = DecodeInput(iotest.DataErrReader(iotest.TimeoutReader(strings.NewReader(`{"contractVersion":1,`))))
	require.Error(t, err)
	assert.ErrorIs(t, err, iotest.ErrTimeout)
	assert.NotErrorIs(t, err, ErrInvalidInput)
}

func TestDecodeInputOneByteAtATime(t *testing.T) {
	in, err := DecodeInput(iotest.OneByteReader(strings.NewReader(`{"contractVersion":1,"keyState":"in_flight"}`)))
	require.NoError(t, err)
	assert.Equal(t, KeyInFlight, in.KeyState, "got %v, want in_flight", in.KeyState)
}

func TestEncodeVerdict(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, EncodeVerdict(&b, Verdict{Decision: ReconcileRequired, Evidence: EvidenceUnknown, Rule: 3, Reason: "a <write> & more"}))
	want := `{"contractVersion":1,"decision":"reconcile_required","evidence":"unknown","rule":3,"reason":"a <write> & more"}` + "\n"
	assert.Equal(t, want, b.String())

	b.Reset()
	require.NoError(t, EncodeVerdict(&b, Verdict{Decision: Brake, Evidence: EvidencePass, Reason: "r"}))
	assert.Equal(t, `{"contractVersion":1,"decision":"brake","evidence":"pass","reason":"r"}`+"\n", b.String(), "got %s, want rule left out when zero", b.String())

	for _, v := range []Verdict{{}, {Decision: Brake}, {Evidence: EvidencePass}, {Decision: 9, Evidence: EvidencePass}} {
		b.Reset()
		assert.Error(t, EncodeVerdict(&b, v), "got no error for %+v, want one", v)
		assert.Zero(t, b.Len(), "got %q written for an invalid verdict, want nothing", b.String())
	}
}

func TestTextForms(t *testing.T) {
	for _, s := range []string{"unknown", "pre_write", "post_write"} {
		var p Phase
		require.NoError(t, p.UnmarshalText([]byte(s)))
		got, err := p.MarshalText()
		require.NoError(t, err)
		assert.Equal(t, s, string(got))
	}
	var o Outcome
	assert.Error(t, o.UnmarshalText([]byte("Success")), "got no error, want names to be case-sensitive")
	assert.Error(t, o.UnmarshalText(nil), "got no error for an empty name")
	_, err := Outcome(0).MarshalText()
	assert.Error(t, err, "got no error, want the zero Outcome to have no text form")
	_, err = KeyState(7).MarshalText()
	assert.Error(t, err)
}

func TestDecodeInputRejectsOversizedInput(t *testing.T) {
	// A valid object followed by enough white space to pass the limit.
	in := `{"contractVersion":1}` + strings.Repeat(" ", MaxInputBytes)
	_, err := DecodeInput(strings.NewReader(in))
	var cie *InputError
	if !errors.As(err, &cie) {
		t.Fatalf("got %v, want a *InputError", err)
	}
	if !strings.Contains(cie.Problem, "larger than") {
		t.Errorf("got problem %q, want it to say the input is too large", cie.Problem)
	}
	if _, err := DecodeInput(strings.NewReader(`{"contractVersion":1}` + strings.Repeat(" ", 1000))); err != nil {
		t.Errorf("got %v for a small input, want nil", err)
	}
}
