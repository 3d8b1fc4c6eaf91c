package retryfuse

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/internal/honour"
)

// This file holds the package's test seams: what its tests need to reach
// that its users do not.

// testEnvs holds, per Transport, what its tests put in place of the real
// clock, randomness and drain bound. A Transport reads its env when its
// settings are resolved (its first use): set it before.
var testEnvs sync.Map // *Transport → *testEnv

type testEnv struct {
	now          func() time.Time
	sleep        func(ctx context.Context, d time.Duration) error
	randN        func(n int64) int64
	maxDrainTime time.Duration
}

func init() {
	real := environment
	environment = func(t *Transport) env {
		e := real(t)
		v, ok := testEnvs.Load(t)
		if !ok {
			return e
		}
		te := v.(*testEnv)
		if te.now != nil || te.sleep != nil {
			e.clock = funcClock{te.now, te.sleep}
		}
		if te.randN != nil {
			e.randN = te.randN
		}
		if te.maxDrainTime != 0 {
			e.maxDrainTime = te.maxDrainTime
		}
		return e
	}
}

func testEnvOf(tr *Transport) *testEnv {
	v, _ := testEnvs.LoadOrStore(tr, &testEnv{})
	return v.(*testEnv)
}

// setClock makes tr tell the time with now and wait with sleep; a nil one
// stays real.
func setClock(tr *Transport, now func() time.Time, sleep func(context.Context, time.Duration) error) {
	e := testEnvOf(tr)
	e.now, e.sleep = now, sleep
}

// setSleep makes tr wait with sleep, keeping its time.
func setSleep(tr *Transport, sleep func(context.Context, time.Duration) error) {
	testEnvOf(tr).sleep = sleep
}

// SloghooksNew is sloghooks.New. The package's own tests cannot import
// sloghooks, which imports the package; sloghooks_bridge_test.go, a file of
// the external test package, sets it before any test runs.
var SloghooksNew func(*slog.Logger) Hooks

// setRandN makes tr draw its jitter from randN.
func setRandN(tr *Transport, randN func(n int64) int64) { testEnvOf(tr).randN = randN }

// setMaxDrainTime bounds in time the read of tr's discarded bodies.
func setMaxDrainTime(tr *Transport, d time.Duration) { testEnvOf(tr).maxDrainTime = d }

// funcClock is a clock made of functions; a nil one is the real clock's.
type funcClock struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

func (c funcClock) Now() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

func (c funcClock) Sleep(ctx context.Context, d time.Duration) error {
	if c.sleep == nil {
		return realClock{}.Sleep(ctx, d)
	}
	return c.sleep(ctx, d)
}

// confirmServerKeys makes tr's scope of rawURL known to honour keys, as
// a marked response to a keyed request does (learnHonour) for a Transport
// that declares ServerHonoursKeys: for tests whose subject is what comes
// after.
func confirmServerKeys(t testing.TB, tr *Transport, rawURL string) {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.scopes.find(req, &tr.p)
	if err != nil {
		t.Fatal(err)
	}
	marked := &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}}
	marked.Header.Set(honour.HeaderHonoured, "?1")
	st.honour.Learn(marked, true, tr.p.clock.Now(), tr.p.honourMemory, true)
}
