package retryfuseredis

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

// A Transport whose Redis goes away and comes back empty.

// TestRedisDownAndBack kills Redis mid-run: the budget falls back to its
// local budget and the ledger refuses, both reported through
// EvidenceUnavailable; once Redis is back on the same port, the transport
// uses it again.
func TestRedisDownAndBack(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s.Addr())
	prefix := uniq(t)
	budgets, err := RatioBudgets(c, budget.RatioConfig{}, BudgetOptions{Prefix: prefix, Timeout: time.Second, SyncInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = budgets.Close(bg()) }) // Redis may be down by then
	var lost atomic.Int64
	ledger, err := NewLedger(c, LedgerConfig{
		Prefix: prefix, Timeout: time.Second, AllowWithoutPersistence: true,
		Quarantine: 300 * time.Millisecond, OnDataLost: func(error) { lost.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	closeLedger(t, ledger)
	var failing, charges atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /flaky", func(w http.ResponseWriter, _ *http.Request) {
		failing.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	mux.HandleFunc("POST /charge", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		charges.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	var ev evidence
	client := newTransport(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{MaxAttempts: 3, NewBudget: budgets.New}, Keys: retryfuse.KeyPolicy{Ledger: ledger}, Hooks: retryfuse.Hooks{EvidenceUnavailable: ev.hook}})
	budgetKey := prefix + "{http://" + srv.Listener.Addr().String() + "}"

	getFlaky := func() {
		t.Helper()
		resp, err := client.Get(srv.URL + "/flaky")
		if err != nil {
			t.Fatalf("GET /flaky: %v", err)
		}
		resp.Body.Close()
	}
	// until calls getFlaky until an event comes (at most 10s), and
	// returns the events.
	until := func(what string) []retryfuse.EvidenceUnavailableInfo {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			getFlaky()
			if evs := ev.take(); len(evs) != 0 {
				return evs
			}
			if time.Now().After(deadline) {
				t.Fatalf("no EvidenceUnavailable event in 10s: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Redis up: the shared budget answers, nothing to report.
	getFlaky()
	if status, _, err := post(client, srv.URL+"/charge", "up", "x"); err != nil || status != http.StatusCreated {
		t.Fatalf("keyed POST with Redis up: got %d %v, want 201", status, err)
	}
	if evs := ev.take(); len(evs) != 0 {
		t.Fatalf("Redis up: EvidenceUnavailable fired: %+v", evs[0])
	}
	waitExists(t, c, budgetKey)

	s.Stop()

	// Redis down: once a sync has failed, the budget answers from its local
	// fallback, and says so once.
	evs := until("Redis down")
	if len(evs) != 1 || evs[0].Source != "budget" || !errors.Is(evs[0].Err, ErrUnavailable) {
		t.Fatalf("Redis down: got events %+v, want one from \"budget\" wrapping ErrUnavailable", evs)
	}
	before := failing.Load()
	getFlaky()
	if n := failing.Load() - before; n != 3 {
		t.Fatalf("Redis down: server saw %d attempts, want 3: the local budget grants the two retries", n)
	}
	if evs := ev.take(); len(evs) != 0 {
		t.Fatalf("Redis down, reported already: got %d more events, want none", len(evs))
	}
	// The ledger refuses to treat the key as free.
	if _, _, err := post(client, srv.URL+"/charge", "down", "x"); !errors.Is(err, retryfuse.ErrLedgerUnavailable) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("keyed POST with Redis down: got %v, want ErrLedgerUnavailable wrapping ErrUnavailable", err)
	}
	if n := charges.Load(); n != 1 {
		t.Fatalf("Redis down: server saw %d charges, want still 1: nothing is sent without the ledger", n)
	}
	evs = ev.take()
	if len(evs) != 1 || evs[0].Source != "ledger" || !errors.Is(evs[0].Err, ErrUnavailable) {
		t.Fatalf("ledger events with Redis down: got %+v, want one from \"ledger\"", evs)
	}

	s.Start()

	// Redis back: the budget resumes by itself, and says so once.
	evs = until("Redis back")
	if len(evs) != 1 || evs[0].Source != "budget" || !errors.Is(evs[0].Err, ErrRecovered) {
		t.Fatalf("Redis back: got events %+v, want one from \"budget\" wrapping ErrRecovered", evs)
	}
	waitExists(t, c, budgetKey)
	// Redis came back without its data: the ledger notices, reports it
	// once, and refuses keyed requests for its quarantine.
	for range 2 {
		if _, _, err := post(client, srv.URL+"/charge", "back", "x"); !errors.Is(err, ErrDataLost) || !errors.Is(err, retryfuse.ErrLedgerUnavailable) {
			t.Fatalf("keyed POST after Redis came back empty: got %v, want ErrLedgerUnavailable wrapping ErrDataLost", err)
		}
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("OnDataLost called %d times, want once", n)
	}
	ev.take()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		status, _, err := post(client, srv.URL+"/charge", "back", "x")
		if err == nil && status == http.StatusCreated {
			break
		}
		if !errors.Is(err, ErrDataLost) || time.Now().After(deadline) {
			t.Fatalf("keyed POST after the quarantine: got %d %v, want 201", status, err)
		}
	}
	ev.take()
	for i := range 2 {
		status, body, err := post(client, srv.URL+"/charge", "back", "x")
		if err != nil || status != http.StatusCreated || body != "charged" {
			t.Fatalf("keyed POST %d after recovery: got %d %q %v, want 201 \"charged\"", i, status, body, err)
		}
	}
	if n := charges.Load(); n != 2 {
		t.Fatalf("after recovery: server saw %d charges, want 2 (the later POSTs under \"back\" replayed from Redis)", n)
	}
	getFlaky()
	if evs := ev.take(); len(evs) != 0 {
		t.Fatalf("after recovery: EvidenceUnavailable fired: %+v", evs[0])
	}
}
