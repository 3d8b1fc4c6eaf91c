package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
)

// This file runs the keys commands on an opened store and prints what
// they find: a table a person reads, or JSON.

func runKeysCommand(ctx context.Context, cmd string, f *keysFlags, stdout io.Writer) error {
	var res *ledger.StoredResponse
	if cmd == "settle" && f.status != 0 {
		var err error
		if res, err = f.storedResponse(); err != nil {
			return err
		}
	}
	st, closeStore, err := f.store.open(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	switch cmd {
	case "list":
		return runList(ctx, st, f, stdout)
	case "show":
		k, err := st.Lookup(ctx, f.key)
		if err != nil {
			return err
		}
		if err := printKey(stdout, f.json, k); err != nil {
			return err
		}
		if k.State == ledger.StateFree {
			return errNotFound
		}
		return nil
	case "settle":
		return runSettle(ctx, st, f, res, stdout)
	}
	n, err := st.Reap(ctx, f.limit)
	if err != nil {
		return err
	}
	if f.json {
		return json.NewEncoder(stdout).Encode(map[string]int{"reaped": n})
	}
	_, err = fmt.Fprintf(stdout, "reaped %d expired records\n", n)
	return err
}

// storedResponse reads the result given with --applied.
func (f *keysFlags) storedResponse() (*ledger.StoredResponse, error) {
	res := &ledger.StoredResponse{StatusCode: f.status}
	for _, h := range f.headers {
		name, value, _ := strings.Cut(h, ":")
		if res.Header == nil {
			res.Header = http.Header{}
		}
		res.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if f.bodyFile != "" {
		b, err := os.ReadFile(f.bodyFile)
		if err != nil {
			return nil, err
		}
		res.Body = b
	}
	return res, nil
}

func runList(ctx context.Context, st store, f *keysFlags, stdout io.Writer) error {
	state, _ := parseListState(f.state)
	q := ledger.Query{State: state, MinAge: f.olderThan, Limit: f.page}
	var keys []ledger.KeyInfo
	more := false
	for {
		p, err := st.List(ctx, q)
		if err != nil {
			return err
		}
		for _, k := range p.Keys {
			if f.state == "stuck" && k.State != ledger.StateInFlight && k.State != ledger.StateUncertain {
				continue
			}
			if len(keys) == f.max {
				more = true
				break
			}
			keys = append(keys, k)
		}
		if more || p.Cursor == "" {
			break
		}
		q.Cursor = p.Cursor
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		for _, k := range keys {
			if err := enc.Encode(view(k)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tAGE\tSINCE\tEXPIRES\tSTORED\tVERSION")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Key, stateText(k), age(k), stamp(k.Since), stamp(k.Expires), storedText(k), k.Version)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	what := f.state + " keys"
	if f.state == "any" {
		what = "keys"
	}
	if f.olderThan > 0 {
		what += " older than " + f.olderThan.String()
	}
	if more {
		_, err := fmt.Fprintf(stdout, "%d %s shown; more remain (raise --max)\n", len(keys), what)
		return err
	}
	_, err := fmt.Fprintf(stdout, "%d %s\n", len(keys), what)
	return err
}

func runSettle(ctx context.Context, st store, f *keysFlags, res *ledger.StoredResponse, stdout io.Writer) error {
	seen, err := st.Lookup(ctx, f.key)
	if err != nil {
		return err
	}
	version := f.version
	switch {
	case f.expect != "" && seen.State.String() != f.expect:
		return refused(stdout, f, &ledger.SettleRefusedError{Found: seen, Version: version}, "is "+seen.State.String()+", not "+f.expect)
	case version == "":
		version = seen.Version
	}
	s := ledger.Settlement{Outcome: ledger.NotApplied}
	if f.applied {
		s = ledger.Settlement{Outcome: ledger.Applied, Stored: res}
	}
	after, err := st.Settle(ctx, f.key, version, s)
	var r *ledger.SettleRefusedError
	if errors.As(err, &r) {
		return refused(stdout, f, r, "changed")
	}
	if err != nil {
		return err
	}
	if f.json {
		return json.NewEncoder(stdout).Encode(map[string]any{"settled": true, "before": view(seen), "after": view(after)})
	}
	_, err = fmt.Fprintf(stdout, "settled %q: %s (version %s) -> %s\n", f.key, stateText(seen), seen.Version, describeSettled(after))
	return err
}

// refused prints a refused settle and returns its error (exit status 1).
func refused(stdout io.Writer, f *keysFlags, r *ledger.SettleRefusedError, why string) error {
	if f.json {
		_ = json.NewEncoder(stdout).Encode(map[string]any{"settled": false, "found": view(r.Found)})
	} else {
		_ = printKey(stdout, false, r.Found)
	}
	if why == "changed" {
		return r
	}
	return fmt.Errorf("%w: key %q %s: nothing done", ledger.ErrSettleRefused, f.key, why)
}

// keyView is a KeyInfo as JSON.
type keyView struct {
	Key          string       `json:"key"`
	State        ledger.State `json:"state"`
	Lapsed       bool         `json:"lapsed,omitempty"`
	Fingerprint  string       `json:"fingerprint,omitempty"`
	Since        *time.Time   `json:"since,omitempty"`
	AgeSeconds   float64      `json:"ageSeconds,omitempty"`
	Expires      *time.Time   `json:"expires,omitempty"`
	HasStored    bool         `json:"hasStored,omitempty"`
	StoredStatus int          `json:"storedStatus,omitempty"`
	Version      string       `json:"version,omitempty"`
}

func view(k ledger.KeyInfo) keyView {
	v := keyView{Key: k.Key, State: k.State, Lapsed: k.Lapsed, HasStored: k.HasStored, StoredStatus: k.StoredStatus, Version: k.Version}
	if k.State != ledger.StateFree {
		since, expires := k.Since.UTC(), k.Expires.UTC()
		v.Fingerprint, v.Since, v.Expires = hex.EncodeToString(k.Fingerprint[:]), &since, &expires
		v.AgeSeconds = k.Age().Seconds()
	}
	return v
}

func printKey(w io.Writer, asJSON bool, k ledger.KeyInfo) error {
	if asJSON {
		return json.NewEncoder(w).Encode(view(k))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s\nstate\t%s\n", k.Key, stateText(k))
	if k.State != ledger.StateFree {
		fmt.Fprintf(tw, "since\t%s (%s ago)\nexpires\t%s\nstored\t%s\nfingerprint\t%x\nversion\t%s\n",
			stamp(k.Since), age(k), stamp(k.Expires), storedText(k), k.Fingerprint, k.Version)
	}
	return tw.Flush()
}

func stateText(k ledger.KeyInfo) string {
	if k.Lapsed {
		return "uncertain (claim expired)"
	}
	return k.State.String()
}

func describeSettled(k ledger.KeyInfo) string {
	if k.State == ledger.StateCompleted {
		return "completed, stored: " + storedText(k)
	}
	return k.State.String()
}

func storedText(k ledger.KeyInfo) string {
	switch {
	case k.State != ledger.StateCompleted:
		return "-"
	case k.HasStored:
		return fmt.Sprint(k.StoredStatus)
	}
	return "none"
}

func age(k ledger.KeyInfo) string {
	a := k.Age()
	if a >= time.Second {
		return a.Round(time.Second).String()
	}
	return a.Round(time.Millisecond).String()
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
