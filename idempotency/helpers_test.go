package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter is a handler that counts its runs, reads the body and answers
// 201 with "created <body>" and a header of its own.
type counter struct {
	runs atomic.Int64
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Run", "run-"+itoa(n))
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "created "+string(body))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// newMemoryLedger returns a ledger.Memory with its defaults.
func newMemoryLedger(t testing.TB) *ledger.Memory {
	t.Helper()
	return &ledger.Memory{}
}

// quiet is a logger that keeps what it is told, for tests to look at.
type quiet struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (q *quiet) Write(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.buf.Write(p)
}

func (q *quiet) String() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.buf.String()
}

// newHandler returns New(next, cfg) with a ledger.Memory unless cfg has a
// Ledger, and a logger kept in the returned quiet.
func newHandler(t testing.TB, next http.Handler, cfg Config) (*Handler, *quiet) {
	t.Helper()
	q := &quiet{}
	if cfg.ErrorLog == nil {
		cfg.ErrorLog = log.New(q, "", 0)
	}
	if cfg.Ledger == nil {
		cfg.Ledger = newMemoryLedger(t)
	}
	h, err := New(next, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h, q
}

// post returns a POST to path with body and, when key is not empty, the
// key header set to key as it is.
func post(path, key, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return r
}

// serve runs r through h and returns the response.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// problemOf decodes w's problem details, failing the test unless w is one
// of type typ and status.
func problemOf(t *testing.T, w *httptest.ResponseRecorder, typ string, status int) problem {
	t.Helper()
	if w.Code != status {
		t.Errorf("status %d, want %d (body %s)", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem details: %v (body %s)", err, w.Body)
	}
	if p.Type != typ || p.Status != status || p.Title == "" || !strings.Contains(p.Detail, draft+", Section") {
		t.Errorf("problem %+v, want type %s, status %d, a title and a detail that names the draft's section", p, typ, status)
	}
	return p
}

// stubLedger is a Ledger whose every step fails with err.
type stubLedger struct{ err error }

func (l stubLedger) Begin(context.Context, string, ledger.Fingerprint) (ledger.Claim, error) {
	return ledger.Claim{}, l.err
}
func (l stubLedger) Complete(context.Context, string, string, *ledger.StoredResponse) error {
	return l.err
}
func (l stubLedger) Release(context.Context, string, string) error   { return l.err }
func (l stubLedger) Uncertain(context.Context, string, string) error { return l.err }

var errLedgerDown = errors.New("ledger down")

// spyLedger passes every step to a Ledger and records the fingerprints
// Begin is given, and the steps that end claims.
type spyLedger struct {
	ledger.Ledger
	mu    sync.Mutex
	fps   []ledger.Fingerprint
	keys  []string
	steps []string
	ctxs  []stepContext
}

// stepContext is what a step's context was when the step was called.
type stepContext struct {
	err      error
	deadline time.Time
	hasDL    bool
}

func (l *spyLedger) Begin(ctx context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, error) {
	l.mu.Lock()
	l.fps = append(l.fps, fp)
	l.keys = append(l.keys, key)
	l.mu.Unlock()
	return l.Ledger.Begin(ctx, key, fp)
}

func (l *spyLedger) record(ctx context.Context, step string) {
	l.mu.Lock()
	l.steps = append(l.steps, step)
	dl, ok := ctx.Deadline()
	l.ctxs = append(l.ctxs, stepContext{ctx.Err(), dl, ok})
	l.mu.Unlock()
}

func (l *spyLedger) Complete(ctx context.Context, key, token string, res *ledger.StoredResponse) error {
	l.record(ctx, "complete")
	return l.Ledger.Complete(ctx, key, token, res)
}

func (l *spyLedger) Release(ctx context.Context, key, token string) error {
	l.record(ctx, "release")
	return l.Ledger.Release(ctx, key, token)
}

func (l *spyLedger) Uncertain(ctx context.Context, key, token string) error {
	l.record(ctx, "uncertain")
	return l.Ledger.Uncertain(ctx, key, token)
}
