package retryfuse

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
			in, err := DecodeContractInput(bytes.NewReader(f.input()))
			if f.WantError != nil {
				require.Error(t, err, "got a valid input %+v, want an error naming %q (%s)", in, f.WantError.Field, f.About)
				var ie *ContractInputError
				require.ErrorAs(t, err, &ie)
				assert.ErrorIs(t, err, ErrInvalidContractInput)
				assert.Equal(t, f.WantError.Field, ie.Field, "got field %q, want %q: %v", ie.Field, f.WantError.Field, err)
				assert.NotContains(t, err.Error(), "\n", "got a message of several lines, want one")
				assert.Contains(t, err.Error(), f.WantError.Field)
				return
			}
			require.NoError(t, err, "got an error, want a verdict (%s)", f.About)
			v := Decide(in)
			got := [3]any{v.Decision.String(), v.Evidence.String(), v.Rule}
			want := [3]any{f.Want.Decision, f.Want.Evidence, f.Want.Rule}
			assert.Equal(t, want, got, "got %v, want %v (%s)", got, want, f.About)
		})
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// retryfuseBinary builds the command once per test run.
func retryfuseBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build the command with")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "retryfuse-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "retryfuse")
		out, err := exec.Command(goTool, "build", "-o", binPath, "./cmd/retryfuse").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	require.NoError(t, buildErr, "building the command")
	return binPath
}

// removeContractBinary removes the command built for the fixture tests.
func removeContractBinary() {
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
}

// TestCommandFixtures runs every fixture through the real binary, once on
// stdin and, for a few, from a file.
func TestCommandFixtures(t *testing.T) {
	bin := retryfuseBinary(t)
	for i, f := range loadContractFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			args := []string{"decide"}
			cmd := exec.Command(bin)
			if i%10 == 0 {
				file := filepath.Join(t.TempDir(), "input.json")
				require.NoError(t, os.WriteFile(file, f.input(), 0o600))
				args = append(args, file)
			} else {
				cmd.Stdin = bytes.NewReader(f.input())
			}
			cmd.Args = append(cmd.Args, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}

			if f.WantError != nil {
				assert.Equal(t, 2, code, "got exit %d, want 2; stderr %q", code, stderr.String())
				assert.Empty(t, stdout.String(), "got output on stdout, want none")
				line := stderr.String()
				assert.True(t, strings.HasSuffix(line, "\n") && strings.Count(line, "\n") == 1, "got stderr %q, want one line", line)
				assert.Contains(t, line, f.WantError.Field)
				return
			}
			assert.Equal(t, 0, code, "got exit %d, want 0; stderr %q", code, stderr.String())
			assert.Empty(t, stderr.String(), "got output on stderr, want none")
			got := parseVerdictLine(t, stdout.Bytes())
			assert.Equal(t, f.Want.Decision, got.Decision.String(), "got decision %s, want %s", got.Decision, f.Want.Decision)
			assert.Equal(t, f.Want.Evidence, got.Evidence.String(), "got evidence %s, want %s", got.Evidence, f.Want.Evidence)
			assert.Equal(t, f.Want.Rule, got.Rule, "got rule %d, want %d", got.Rule, f.Want.Rule)
		})
	}
}

// parseVerdictLine checks that b is one line of JSON in the output form of
// contract v1, with exactly its fields, and returns the verdict.
func parseVerdictLine(t testing.TB, b []byte) Verdict {
	t.Helper()
	require.True(t, bytes.HasSuffix(b, []byte("\n")) && bytes.Count(b, []byte("\n")) == 1, "got %q, want one line", b)
	var out struct {
		ContractVersion *int      `json:"contractVersion"`
		Decision        *Decision `json:"decision"`
		Evidence        *Evidence `json:"evidence"`
		Rule            int       `json:"rule"`
		Reason          string    `json:"reason"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&out), "verdict %s", b)
	require.NotNil(t, out.ContractVersion, "verdict %s has no contractVersion", b)
	require.Equal(t, ContractVersion, *out.ContractVersion)
	require.NotNil(t, out.Decision, "verdict %s has no decision", b)
	require.NotNil(t, out.Evidence, "verdict %s has no evidence", b)
	require.NotEmpty(t, out.Reason, "verdict %s has no reason", b)
	return Verdict{Decision: *out.Decision, Evidence: *out.Evidence, Rule: out.Rule, Reason: out.Reason}
}

func TestDecodeContractInputDefaults(t *testing.T) {
	in, err := DecodeContractInput(strings.NewReader(`{"contractVersion":1,"attempts":[{"outcome":"failure"}]}`))
	require.NoError(t, err)
	want := DecisionInput{
		Policy:   DecisionPolicy{FailureThreshold: 5, BudgetUnits: 100},
		Request:  RequestFacts{Method: "GET", IdempotencyKey: false, ReplayableBody: true},
		KeyState: KeyNone,
		Attempts: []Attempt{{Outcome: OutcomeFailure, Phase: PhaseUnknown, Cost: 1}},
	}
	assert.Equal(t, want, in, "got %+v, want %+v", in, want)
}

func TestDecodeContractInputReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	_, err := DecodeContractInput(iotest.ErrReader(boom))
	require.Error(t, err)
	assert.ErrorIs(t, err, boom, "got %v, want the reader's error", err)
	assert.NotErrorIs(t, err, ErrInvalidContractInput, "got %v: a read error is not invalid input", err)

	// The same after a valid start: the object is cut by the reader.
	_, err = DecodeContractInput(iotest.DataErrReader(iotest.TimeoutReader(strings.NewReader(`{"contractVersion":1,`))))
	require.Error(t, err)
	assert.ErrorIs(t, err, iotest.ErrTimeout)
	assert.NotErrorIs(t, err, ErrInvalidContractInput)
}

func TestDecodeContractInputOneByteAtATime(t *testing.T) {
	in, err := DecodeContractInput(iotest.OneByteReader(strings.NewReader(`{"contractVersion":1,"keyState":"in_flight"}`)))
	require.NoError(t, err)
	assert.Equal(t, KeyInFlight, in.KeyState, "got %v, want in_flight", in.KeyState)
}

func TestEncodeVerdict(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, EncodeVerdict(&b, Verdict{ReconcileRequired, EvidenceUnknown, 3, "a <write> & more"}))
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
	for _, s := range []string{"unknown", "pre_write", "post_write", "response"} {
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

func TestDecodeContractInputRejectsOversizedInput(t *testing.T) {
	// A valid object followed by enough white space to pass the limit.
	in := `{"contractVersion":1}` + strings.Repeat(" ", MaxContractInputBytes)
	_, err := DecodeContractInput(strings.NewReader(in))
	var cie *ContractInputError
	if !errors.As(err, &cie) {
		t.Fatalf("got %v, want a *ContractInputError", err)
	}
	if !strings.Contains(cie.Problem, "larger than") {
		t.Errorf("got problem %q, want it to say the input is too large", cie.Problem)
	}
	if _, err := DecodeContractInput(strings.NewReader(`{"contractVersion":1}` + strings.Repeat(" ", 1000))); err != nil {
		t.Errorf("got %v for a small input, want nil", err)
	}
}
