package main

import (
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"sync"

	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/ledger"
)

// downstream is the fake API the servers' handlers call (POST /charges):
// behind the idempotency middleware on a ledger.Memory of its own, in the
// harness's process (never killed), it records every charge it applies,
// by its key and by the server's request it was made for.
type downstream struct {
	mu     sync.Mutex
	byKey  map[string]int             // charges applied, by the downstream key (the step's)
	byFor  map[string]map[string]bool // the downstream keys charged, by the server's request key
	srv    *http.Server
	addr   string
	served chan struct{}
}

func startDownstream() (*downstream, error) {
	d := &downstream{byKey: map[string]int{}, byFor: map[string]map[string]bool{}, served: make(chan struct{})}
	h, err := idempotency.New(http.HandlerFunc(d.charge), idempotency.Config{Ledger: &ledger.Memory{MaxEntries: 1 << 20}, ErrorLog: log.New(io.Discard, "", 0)})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d.addr = ln.Addr().String()
	d.srv = &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { d.srv.Serve(ln); close(d.served) }()
	return d, nil
}

func (d *downstream) charge(w http.ResponseWriter, r *http.Request) {
	var body struct{ For string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	d.mu.Lock()
	d.byKey[key]++
	if d.byFor[body.For] == nil {
		d.byFor[body.For] = map[string]bool{}
	}
	d.byFor[body.For][key] = true
	d.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"charged":true}`)
}

func (d *downstream) close() {
	d.srv.Close()
	<-d.served
}

// downCounts are the downstream's own records at the end.
type downCounts struct {
	charges int // charges applied
	twice   int // downstream keys charged more than once, and requests charged under more than one key
	forKeys map[string]bool
}

func (d *downstream) counts() downCounts {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := downCounts{forKeys: map[string]bool{}}
	for _, n := range d.byKey {
		c.charges += n
		if n > 1 {
			c.twice++
		}
	}
	for k, keys := range d.byFor {
		c.forKeys[k] = true
		if len(keys) > 1 {
			c.twice++
		}
	}
	return c
}
