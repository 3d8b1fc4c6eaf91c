package main

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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// retryfuseBinary builds the command once per test run, into a directory
// that the test run removes (see TestMain).
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
		out, err := exec.Command(goTool, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	require.NoError(t, buildErr, "building the command")
	return binPath
}

// removeBinary removes the command built for TestBinaryFixtures.
func removeBinary() {
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
}

// TestBinaryFixtures runs every contract fixture through the built binary,
// on stdin and, for every tenth, from a file: exit status, the streams and
// the verdict (decision, evidence and rule) are those of the contract.
func TestBinaryFixtures(t *testing.T) {
	bin := retryfuseBinary(t)
	for i, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			cmd := exec.Command(bin, "decide")
			if i%10 == 0 {
				file := filepath.Join(t.TempDir(), "input.json")
				require.NoError(t, os.WriteFile(file, f.Input, 0o600))
				cmd.Args = append(cmd.Args, file)
			} else {
				cmd.Stdin = bytes.NewReader(f.Input)
			}
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
				assert.True(t, oneLine(stderr.String()), "got stderr %q, want one line", stderr.String())
				assert.Contains(t, stderr.String(), f.WantError.Field)
				return
			}
			assert.Equal(t, 0, code, "got exit %d, want 0; stderr %q", code, stderr.String())
			assert.Empty(t, stderr.String(), "got output on stderr, want none")
			require.True(t, oneLine(stdout.String()), "got stdout %q, want one line", stdout.String())
			var got struct {
				ContractVersion    int
				Decision, Evidence string
				Rule               int
			}
			dec := json.NewDecoder(strings.NewReader(stdout.String()))
			require.NoError(t, dec.Decode(&got))
			var asked struct{ ContractVersion float64 }
			require.NoError(t, json.Unmarshal(f.Input, &asked))
			assert.Equal(t, int(asked.ContractVersion), got.ContractVersion, "the verdict echoes the question's version")
			assert.Equal(t, f.Want.Decision, got.Decision, "got decision %s, want %s", got.Decision, f.Want.Decision)
			assert.Equal(t, f.Want.Evidence, got.Evidence, "got evidence %s, want %s", got.Evidence, f.Want.Evidence)
			assert.Equal(t, f.Want.Rule, got.Rule, "got rule %d, want %d", got.Rule, f.Want.Rule)
		})
	}
}
