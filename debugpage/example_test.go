package debugpage_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/debugpage"
)

// Example mounts the page beside a service's handlers, and watches the
// Transport of its client.
func Example() {
	page := debugpage.New()
	tr := &retryfuse.Transport{}
	tr.Hooks = retryfuse.JoinHooks(tr.Hooks, page.Watch("payments", tr))
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer dep.Close()
	if resp, err := client.Get(dep.URL); err == nil {
		resp.Body.Close()
	}

	mux := http.NewServeMux()
	mux.Handle("/debug/retryfuse", page)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/retryfuse?format=json", nil))
	var s struct {
		Transports []struct {
			Name   string
			Scopes []struct {
				Budget struct{ Requests int }
			}
		}
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &s)
	fmt.Println(s.Transports[0].Name, len(s.Transports[0].Scopes), "scope,", s.Transports[0].Scopes[0].Budget.Requests, "call")
	// Output: payments 1 scope, 1 call
}
