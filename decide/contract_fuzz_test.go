package decide

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeInput checks, for any bytes: no panic; either a valid
// input or an error wrapping ErrInvalidInput whose message is one
// line; the same bytes give the same result twice; the verdict encodes the
// same way twice and reads back as itself; an accepted input survives a
// round trip through its canonical JSON form.
func FuzzDecodeInput(f *testing.F) {
	for _, fx := range loadContractFixtures(f) {
		f.Add(fx.input())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := DecodeInput(bytes.NewReader(data))
		in2, err2 := DecodeInput(bytes.NewReader(data))
		if err != nil {
			var ie *InputError
			require.ErrorAs(t, err, &ie, "got %v, want a *InputError", err)
			require.ErrorIs(t, err, ErrInvalidInput)
			require.NotContains(t, err.Error(), "\n", "got a message of several lines, want one")
			require.NotContains(t, err.Error(), "\r", "got a message of several lines, want one")
			require.Error(t, err2, "got a verdict the second time, an error the first")
			require.Equal(t, err.Error(), err2.Error(), "got two different errors for the same input")
			return
		}
		require.NoError(t, err2, "got an error the second time, a verdict the first")
		require.Equal(t, in, in2, "got two different inputs from the same bytes")
		require.True(t, json.Valid(bytes.TrimSpace(data)), "accepted %q, which encoding/json calls invalid", data)
		require.Positive(t, in.Policy.FailureThreshold)
		require.Positive(t, in.Policy.BudgetUnits)

		v := Decide(in)
		require.Equal(t, v, Decide(in2), "got two verdicts for the same input")
		require.True(t, v.Rule >= 1 && v.Rule <= 8, "got rule %d, want 1 to 8", v.Rule)
		var b1, b2 bytes.Buffer
		require.NoError(t, EncodeVerdict(&b1, v))
		require.NoError(t, EncodeVerdict(&b2, v))
		require.Equal(t, b1.String(), b2.String(), "got two encodings of one verdict")
		require.Equal(t, v, parseVerdictLine(t, b1.Bytes()), "got a verdict that does not read back as itself")

		canon := encodeContractInput(in)
		in3, err := DecodeInput(bytes.NewReader(canon))
		require.NoError(t, err, "canonical form %s", canon)
		require.Equal(t, in, in3, "got a different input back from %s", canon)
		require.Equal(t, string(canon), string(encodeContractInput(in3)), "got a canonical form that is not stable")
	})
}

// encodeContractInput writes in as contract input of its version with
// every field of that version given.
func encodeContractInput(in Input) []byte {
	var b strings.Builder
	method, _ := json.Marshal(in.Request.Method)
	fmt.Fprintf(&b, `{"contractVersion":%d,"policy":{"failureThreshold":%d,"budgetUnits":%s},`,
		in.Version, in.Policy.FailureThreshold, strconv.FormatFloat(in.Policy.BudgetUnits, 'g', -1, 64))
	fmt.Fprintf(&b, `"request":{"method":%s,"idempotencyKey":%t,"replayableBody":%t`,
		method, in.Request.IdempotencyKey, in.Request.ReplayableBody)
	if in.Version >= 2 {
		fmt.Fprintf(&b, `,"serverHonoursKeys":%t`, in.Request.ServerHonoursKeys)
	}
	fmt.Fprintf(&b, `},"keyState":"%s","attempts":[`, in.KeyState)
	for i, a := range in.Attempts {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"outcome":"%s","phase":"%s","costUnits":%s}`, a.Outcome, a.Phase, strconv.FormatFloat(a.Cost, 'g', -1, 64))
	}
	b.WriteString("]}")
	return []byte(b.String())
}

func TestDecodeInputReadErrorInsideAValue(t *testing.T) {
	// A read error never passes for invalid input, even inside a value.
	_, err := DecodeInput(&failAfter{data: []byte(`{"contractVersion":1,"attempts":[{"outcome":"fai`)})
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrInvalidInput), "got %v, want a read error", err)
}

// failAfter gives data, then an error that is not io.EOF.
type failAfter struct{ data []byte }

func (r *failAfter) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, errors.New("connection reset")
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}
