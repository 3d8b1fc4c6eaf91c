package retryfuseredis

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retryfuse/retryfuse"
)

// BenchmarkSuccessPath is a GET through a retryfuse.Transport to a healthy
// loopback server, with an in-memory ratio budget per scope and with the
// Redis one. Each round runs both, memory first then Redis, and -count
// repeats the rounds: so the two alternate, and their ratio within one
// round is the figure. The parallel variant is several callers on one
// Transport.
func BenchmarkSuccessPath(b *testing.B) {
	benchSuccess(b, false)
}

func BenchmarkSuccessPathParallel(b *testing.B) {
	benchSuccess(b, true)
}

func benchSuccess(b *testing.B, parallel bool) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	b.Cleanup(srv.Close)
	memory := func(string) (retryfuse.Budget, error) { return retryfuse.NewRatioBudget(retryfuse.RatioBudgetConfig{}) }
	b.Run("memory", func(b *testing.B) { runGets(b, srv.URL, memory, parallel) })
	b.Run("redis", func(b *testing.B) {
		f, err := RatioBudgets(sharedClient(b), retryfuse.RatioBudgetConfig{}, BudgetOptions{Prefix: uniq(b), Timeout: benchTimeout})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Close(bg()) })
		runGets(b, srv.URL, f.New, parallel)
	})
}

func runGets(b *testing.B, url string, newBudget func(string) (retryfuse.Budget, error), parallel bool) {
	tr := &retryfuse.Transport{NewBudget: newBudget}
	b.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	get := func() {
		resp, err := c.Get(url)
		if err != nil {
			b.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.ReportAllocs()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				get()
			}
		})
		return
	}
	for b.Loop() {
		get()
	}
}
