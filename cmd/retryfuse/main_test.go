package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixture is the part of a contract fixture (../../decide/testdata/contract) the
// command needs; the package's own tests check the rest.
type fixture struct {
	name      string
	Input     json.RawMessage `json:"input"`
	InputText *string         `json:"inputText"`
	Want      *struct {
		Decision string `json:"decision"`
		Evidence string `json:"evidence"`
		Rule     int    `json:"rule"`
	} `json:"want"`
	WantError *struct {
		Field string `json:"field"`
	} `json:"wantError"`
}

func loadFixtures(t *testing.T) []fixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "decide", "testdata", "contract", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	var out []fixture
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		var f fixture
		require.NoError(t, json.Unmarshal(b, &f), "fixture %s", p)
		f.name = strings.TrimSuffix(filepath.Base(p), ".json")
		if f.InputText != nil {
			f.Input = []byte(*f.InputText)
		}
		out = append(out, f)
	}
	return out
}

type result struct {
	code           int
	stdout, stderr string
}

func runWith(stdin string, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(args, strings.NewReader(stdin), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func oneLine(s string) bool { return strings.HasSuffix(s, "\n") && strings.Count(s, "\n") == 1 }

func TestDecideFixtures(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			r := runWith(string(f.Input), "decide")
			if f.WantError != nil {
				assert.Equal(t, 2, r.code, "got exit %d, want 2", r.code)
				assert.Empty(t, r.stdout, "got stdout %q, want none", r.stdout)
				assert.True(t, oneLine(r.stderr), "got stderr %q, want one line", r.stderr)
				assert.Contains(t, r.stderr, f.WantError.Field)
				return
			}
			require.Equal(t, 0, r.code, "got exit %d, want 0; stderr %q", r.code, r.stderr)
			assert.Empty(t, r.stderr)
			require.True(t, oneLine(r.stdout), "got stdout %q, want one line", r.stdout)
			var got struct {
				ContractVersion    int
				Decision, Evidence string
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
			var asked struct{ ContractVersion float64 }
			require.NoError(t, json.Unmarshal(f.Input, &asked))
			assert.Equal(t, int(asked.ContractVersion), got.ContractVersion, "the verdict echoes the question's version")
			assert.Equal(t, f.Want.Decision, got.Decision, "got decision %s, want %s", got.Decision, f.Want.Decision)
			assert.Equal(t, f.Want.Evidence, got.Evidence, "got evidence %s, want %s", got.Evidence, f.Want.Evidence)
		})
	}
}

func TestDecideExactOutput(t *testing.T) {
	r := runWith(`{"contractVersion":1,"request":{"method":"POST","idempotencyKey":true},"attempts":[{"outcome":"timeout","phase":"post_write"}]}`, "decide", "-")
	want := `{"contractVersion":1,"decision":"reconcile_required","evidence":"unknown","rule":3,"reason":"the last attempt's outcome is uncertain and the method is not idempotent"}` + "\n"
	assert.Equal(t, result{0, want, ""}, r)
}

func TestDecideInvalidMessage(t *testing.T) {
	r := runWith(`{"contractVersion":1,"attempts":[{"outcome":"failure"},{"outcome":"failure"},{"outcome":"timeout","phase":"response"}]}`, "decide")
	want := "retryfuse decide: invalid input: attempts[2].phase: unknown value \"response\", want pre_write, post_write or unknown\n"
	assert.Equal(t, result{2, "", want}, r)
}

func TestDecideFromFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "in.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"contractVersion":1,"keyState":"conflict"}`), 0o600))
	r := runWith("not read", "decide", file)
	assert.Equal(t, 0, r.code, "got exit %d, want 0; stderr %q", r.code, r.stderr)
	assert.Contains(t, r.stdout, `"decision":"reject_conflict"`)

	r = runWith("", "decide", filepath.Join(t.TempDir(), "missing.json"))
	assert.Equal(t, 1, r.code, "got exit %d, want 1 for a file that cannot be read", r.code)
	assert.Empty(t, r.stdout)
	assert.True(t, oneLine(r.stderr), "got stderr %q, want one line", r.stderr)
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := runWith("", args...)
		assert.Equal(t, 0, r.code, "%v: got exit %d, want 0", args, r.code)
		assert.Contains(t, r.stdout, "retryfuse decide [FILE]", "%v: got %q, want usage on stdout", args, r.stdout)
		assert.Empty(t, r.stderr)
	}

	r := runWith("", "decide", "-h")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "Usage: retryfuse decide [FILE]")
	assert.Contains(t, r.stdout, "attempts[].costUnits")
	assert.Empty(t, r.stderr)

	for _, args := range [][]string{nil, {"frobnicate"}, {"-x"}} {
		r := runWith("", args...)
		assert.Equal(t, 2, r.code, "%v: got exit %d, want 2", args, r.code)
		assert.Empty(t, r.stdout)
		assert.Contains(t, r.stderr, "Usage:", "%v: got %q, want usage on stderr", args, r.stderr)
	}

	for _, args := range [][]string{{"decide", "a.json", "b.json"}, {"decide", "-verbose"}} {
		r := runWith("", args...)
		assert.Equal(t, 2, r.code, "%v: got exit %d, want 2", args, r.code)
		assert.Empty(t, r.stdout)
		assert.True(t, oneLine(r.stderr), "%v: got stderr %q, want one line", args, r.stderr)
	}
}

func TestDecideWriteError(t *testing.T) {
	var stderr bytes.Buffer
	code := run([]string{"decide"}, strings.NewReader(`{"contractVersion":1}`), failWriter{}, &stderr)
	assert.Equal(t, 1, code, "got exit %d, want 1 when the verdict cannot be written", code)
	assert.True(t, oneLine(stderr.String()), "got stderr %q, want one line", stderr.String())
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// FuzzRun checks that the command never panics and keeps its output shape
// whatever it reads.
func FuzzRun(f *testing.F) {
	f.Add([]byte(`{"contractVersion":1}`))
	f.Add([]byte(`{"contractVersion":1,"attempts":[{"outcome":"timeout"}]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := runWith(string(data), "decide")
		switch r.code {
		case 0:
			require.True(t, oneLine(r.stdout), "got stdout %q, want one line", r.stdout)
			require.Empty(t, r.stderr)
		case 2:
			require.Empty(t, r.stdout)
			require.True(t, oneLine(r.stderr), "got stderr %q, want one line", r.stderr)
		default:
			t.Fatalf("got exit %d, want 0 or 2; stderr %q", r.code, r.stderr)
		}
	})
}
