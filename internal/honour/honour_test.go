package honour

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// problemType is the type of one of package idempotency's refusals.
func problemType(name string) string {
	return "https://pkg.go.dev/github.com/retryfuse/retryfuse/idempotency#" + name
}

// keyedResponse is a response with status, the given header fields (name,
// value, …) and body.
func keyedResponse(status int, body string, fields ...string) *http.Response {
	resp := &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
	for i := 0; i+1 < len(fields); i += 2 {
		resp.Header.Set(fields[i], fields[i+1])
	}
	return resp
}

// Each refusal of a server that honours keys is told by its status and
// problem type together; anything else is the handler's own answer. The
// body read to tell is given back whole.
func TestReadKeyedAnswer(t *testing.T) {
	honoured := []string{HeaderHonoured, "?1", "Content-Type", "application/problem+json"}
	doc := func(name string) string { return `{"type":"` + problemType(name) + `","title":"t","status":409}` }
	for _, tc := range []struct {
		name   string
		status int
		body   string
		fields []string
		want   Answer
	}{
		{"409 in flight", http.StatusConflict, doc(ProblemInFlight), honoured, AnswerInFlight},
		{"409 outcome unknown", http.StatusConflict, doc(ProblemOutcomeUnknown), honoured, AnswerUnknown},
		{"409 not stored", http.StatusConflict, doc(ProblemNotStored), honoured, AnswerNotStored},
		{"422 key reused", http.StatusUnprocessableEntity, doc(ProblemKeyReused), honoured, AnswerReused},
		{"another server's type of the same name", http.StatusConflict, `{"type":"https://api.example/errors#ProblemInFlight"}`, honoured, AnswerInFlight},
		{"media type with parameters", http.StatusConflict, doc(ProblemInFlight),
			[]string{HeaderHonoured, "?1", "Content-Type", "application/problem+json; charset=utf-8"}, AnswerInFlight},
		{"replayed, whatever its status", http.StatusInternalServerError, "boom", []string{HeaderReplayed, "true"}, AnswerReplayed},
		{"replayed 409 in flight", http.StatusConflict, doc(ProblemInFlight), append([]string{HeaderReplayed, "true"}, honoured...), AnswerReplayed},
		{"replay marker not true", http.StatusCreated, "", []string{HeaderReplayed, "1"}, AnswerPlain},
		{"200", http.StatusOK, doc(ProblemInFlight), honoured, AnswerPlain},
		{"in flight answered 422", http.StatusUnprocessableEntity, doc(ProblemInFlight), honoured, AnswerPlain},
		{"key reused answered 409", http.StatusConflict, doc(ProblemKeyReused), honoured, AnswerPlain},
		{"no marker", http.StatusConflict, doc(ProblemInFlight), []string{"Content-Type", "application/problem+json"}, AnswerPlain},
		{"marker not ?1", http.StatusConflict, doc(ProblemInFlight), []string{HeaderHonoured, "?0", "Content-Type", "application/problem+json"}, AnswerPlain},
		{"plain JSON", http.StatusConflict, doc(ProblemInFlight), []string{HeaderHonoured, "?1", "Content-Type", "application/json"}, AnswerPlain},
		{"no media type", http.StatusConflict, doc(ProblemInFlight), []string{HeaderHonoured, "?1"}, AnswerPlain},
		{"a handler's own type", http.StatusUnprocessableEntity, `{"type":"https://api.example/problems/amount"}`, honoured, AnswerPlain},
		{"the name without its #", http.StatusConflict, `{"type":"https://api.example/ProblemInFlight"}`, honoured, AnswerPlain},
		{"not JSON", http.StatusConflict, "ProblemInFlight", honoured, AnswerPlain},
		{"empty body", http.StatusConflict, "", honoured, AnswerPlain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := keyedResponse(tc.status, tc.body, tc.fields...)
			assert.Equal(t, tc.want, Read(resp))
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.body, string(b), "the body is given back whole")
		})
	}
}

// A response without a body, or none at all, is plain.
func TestReadKeyedAnswerWithoutBody(t *testing.T) {
	assert.Equal(t, AnswerPlain, Read(nil))
	for _, body := range []io.ReadCloser{nil, http.NoBody} {
		resp := keyedResponse(http.StatusConflict, "", HeaderHonoured, "?1", "Content-Type", "application/problem+json")
		resp.Body = body
		assert.Equal(t, AnswerPlain, Read(resp))
		assert.Equal(t, body, resp.Body, "a body with nothing to read is left as it was")
	}
}

// countingBody counts the bytes read from it, and whether it was closed.
type countingBody struct {
	r      io.Reader
	n      int
	closed bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += n
	return n, err
}

func (b *countingBody) Close() error { b.closed = true; return nil }

// Problem details longer than MaxProblemBytes are not read past the bound:
// the type is not told, and the body is given back whole, its close
// reaching the original.
func TestReadKeyedAnswerBoundedByMaxProblemBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		pad  int
		want Answer
	}{
		{"within the bound", MaxProblemBytes - 200, AnswerInFlight},
		{"beyond the bound", MaxProblemBytes, AnswerPlain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"detail":"` + strings.Repeat("x", tc.pad) + `","type":"` + problemType(ProblemInFlight) + `"}`
			orig := &countingBody{r: strings.NewReader(body)}
			resp := keyedResponse(http.StatusConflict, "", HeaderHonoured, "?1", "Content-Type", "application/problem+json")
			resp.Body = orig
			assert.Equal(t, tc.want, Read(resp))
			assert.LessOrEqual(t, orig.n, MaxProblemBytes, "read at most MaxProblemBytes")
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, body, string(b), "the body is given back whole")
			require.NoError(t, resp.Body.Close())
			assert.True(t, orig.closed, "closing the body given back closes the original")
		})
	}
}

// failingBody gives its bytes, then an error.
type failingBody struct {
	r   io.Reader
	err error
}

func (b *failingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		err = b.err
	}
	return n, err
}

func (b *failingBody) Close() error { return nil }

// A body whose read fails is plain; what was read is given back, then the
// error again.
func TestReadKeyedAnswerBodyReadFails(t *testing.T) {
	lost := errors.New("connection reset")
	part := `{"type":"` + problemType(ProblemInFlight) + `"}`
	resp := keyedResponse(http.StatusConflict, "", HeaderHonoured, "?1", "Content-Type", "application/problem+json")
	resp.Body = &failingBody{r: strings.NewReader(part), err: lost}
	assert.Equal(t, AnswerPlain, Read(resp))
	b, err := io.ReadAll(resp.Body)
	assert.ErrorIs(t, err, lost)
	assert.Equal(t, part, string(b))
}

func TestReplayed(t *testing.T) {
	assert.False(t, Replayed(nil))
	assert.False(t, Replayed(keyedResponse(http.StatusOK, "")))
	assert.False(t, Replayed(keyedResponse(http.StatusOK, "", HeaderReplayed, "false")))
	assert.True(t, Replayed(keyedResponse(http.StatusOK, "", HeaderReplayed, "true")))
	assert.True(t, Replayed(keyedResponse(http.StatusServiceUnavailable, "", HeaderReplayed, "true")))
}

// What a scope knows of its server's keys, step by step: a marker confirms
// for the memory from the response, renewed by each; an unmarked answer
// of the server itself to a write revokes; a read's, a 5xx's, a 408's or a
// 429's does not; the memory runs out. Each change is reported once.
func TestStateLearnsFromMarker(t *testing.T) {
	const memory = 10 * time.Minute
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	marked := keyedResponse(http.StatusCreated, "", HeaderHonoured, "?1")
	var s State
	for i, step := range []struct {
		at     time.Duration // since start
		resp   *http.Response
		write  bool
		change Change
		known  bool // at the step's time, after it
	}{
		{0, keyedResponse(http.StatusCreated, ""), true, Unchanged, false},
		{0, marked, true, Confirmed, true},
		{time.Minute, marked, false, Unchanged, true}, // renewed by a read's marker too
		{10 * time.Minute, nil, false, Unchanged, true},
		{11 * time.Minute, nil, false, Unchanged, false}, // a minute past the renewal's memory
		{11 * time.Minute, marked, true, Confirmed, true},
		{12 * time.Minute, keyedResponse(http.StatusOK, ""), false, Unchanged, true},
		{12 * time.Minute, keyedResponse(http.StatusServiceUnavailable, ""), true, Unchanged, true},
		{12 * time.Minute, keyedResponse(http.StatusBadGateway, ""), true, Unchanged, true},
		{12 * time.Minute, keyedResponse(http.StatusRequestTimeout, ""), true, Unchanged, true},
		{12 * time.Minute, keyedResponse(http.StatusTooManyRequests, ""), true, Unchanged, true},
		{12 * time.Minute, keyedResponse(http.StatusCreated, ""), true, Revoked, false},
		{12 * time.Minute, keyedResponse(http.StatusBadRequest, ""), true, Unchanged, false},
		{13 * time.Minute, marked, true, Confirmed, true},
	} {
		now := start.Add(step.at)
		if step.resp != nil {
			assert.Equal(t, step.change, s.Learn(step.resp, step.write, now, memory, false), "step %d: the change", i)
		}
		assert.Equal(t, step.known, s.Known(now), "step %d: known at %v", i, step.at)
	}
}

// Declared, a confirmed server is known to honour keys for ever, until an
// answer revokes it.
func TestStateDeclaredKnownForEver(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var s State
	assert.False(t, s.Known(now), "the zero value knows nothing")
	assert.Equal(t, Confirmed, s.Learn(keyedResponse(http.StatusCreated, "", HeaderHonoured, "?1"), true, now, 0, true))
	assert.True(t, s.Known(now.Add(100*365*24*time.Hour)))
	assert.Equal(t, Unchanged, s.Learn(keyedResponse(http.StatusCreated, "", HeaderHonoured, "?1"), true, now.Add(time.Hour), time.Minute, true))
	assert.Equal(t, Revoked, s.Learn(keyedResponse(http.StatusCreated, ""), true, now.Add(time.Hour), 0, true))
	assert.False(t, s.Known(now.Add(time.Hour)))
}
