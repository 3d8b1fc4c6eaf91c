// Package browser tests retryfuse's pages in a real browser: headless
// Chromium, driven by chromedp, against loopback servers. It is a module
// of its own so that the core never depends on chromedp; scripts/browser-test
// installs Chromium where it is missing and runs it.
package browser

import (
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/debugpage"
)

// screenshot, when set, is where the test writes a PNG of the page as it
// ends: go test -run TestLivePage -args -screenshot ../docs/live-page.png
var screenshot = flag.String("screenshot", "", "write a PNG of the live page here")

// browserWait bounds each wait for the browser: it loads, renders and
// refreshes the page on the wall clock.
const browserWait = 60 * time.Second

// dependency is a loopback dependency: /charges answers 200, /refunds the
// status set (200 at first), /fx 429 with Retry-After: 5, a POST to
// /orders is read and its connection closed without an answer (its
// outcome uncertain), and /hold waits until released.
type dependency struct {
	*httptest.Server
	mu      sync.Mutex
	status  int
	once    sync.Once
	held    chan struct{} // closed: /hold answers
	arrived chan struct{} // a /hold request is in
}

func newDependency(t *testing.T) *dependency {
	d := &dependency{status: http.StatusOK, held: make(chan struct{}), arrived: make(chan struct{}, 16)}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/refunds":
			d.mu.Lock()
			code := d.status
			d.mu.Unlock()
			w.WriteHeader(code)
		case "/fx":
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/orders":
			_, _ = io.Copy(io.Discard, r.Body)
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		case "/hold":
			d.arrived <- struct{}{}
			<-d.held
		}
	}))
	t.Cleanup(func() {
		d.release()
		d.Close()
	})
	return d
}

func (d *dependency) setRefunds(code int) {
	d.mu.Lock()
	d.status = code
	d.mu.Unlock()
}

func (d *dependency) release() { d.once.Do(func() { close(d.held) }) }

// byService names a request's scope after its path, as a service
// calling several dependencies through one gateway might.
func byService(r *http.Request) string {
	return "https://" + strings.Trim(r.URL.Path, "/") + ".internal:443"
}

func call(c *http.Client, method, url string) {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"amount":1200}`)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return
	}
	if resp, err := c.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// newBrowser starts headless Chromium, and returns a context of its tab.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: scripts/browser-test installs it and runs this test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1360, 900), chromedp.UserDataDir(t.TempDir()))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // the browser starts
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// waitFor waits until the page shows an element that matches css.
func waitFor(t *testing.T, tab context.Context, css, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(css))); err != nil {
		html, _ := chromedp.Run(tab, chromedp.OuterHTML(chromedp.CSS("body")))
		t.Fatalf("%s: no %s on the page within %v (%v); the page:\n%s", why, css, browserWait, err, html)
	}
}

// The page loads in Chromium, shows the scopes of the Transports it
// watches with each control's state, and, refreshing itself, shows a
// breaker that opens and the calls that gave up.
func TestLivePageShowsScopesAndUpdatesWhenABreakerOpens(t *testing.T) {
	dep := newDependency(t)
	page := debugpage.New()

	b, err := breaker.New(breaker.Settings{FailureThreshold: 3, OpenTimeout: 30 * time.Second, Version: 4})
	if err != nil {
		t.Fatal(err)
	}
	payments := &retryfuse.Transport{
		Brake: retryfuse.BrakePolicy{Breaker: b},
		Retry: retryfuse.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond, MaxRetryAfter: time.Second},
		Load:  retryfuse.LoadPolicy{MaxInFlight: 16, Throttle: retryfuse.ThrottlePolicy{On: true}, Pace: true},
		Scope: retryfuse.ScopePolicy{Of: byService},
	}
	payments.Hooks = retryfuse.JoinHooks(payments.Hooks, page.Watch("payments", payments))
	search := &retryfuse.Transport{
		Load:  retryfuse.LoadPolicy{Adaptive: true, MinInFlight: 4, MaxInFlight: 64, RateLimit: 200},
		Scope: retryfuse.ScopePolicy{Of: func(*http.Request) string { return "https://search.internal:443" }},
	}
	search.Hooks = page.Watch("search", search)
	for _, tr := range []*retryfuse.Transport{payments, search} {
		t.Cleanup(tr.CloseIdleConnections)
	}
	pc, sc := &http.Client{Transport: payments}, &http.Client{Transport: search}

	call(pc, http.MethodGet, dep.URL+"/charges")
	call(pc, http.MethodGet, dep.URL+"/refunds")
	call(sc, http.MethodGet, dep.URL+"/charges")

	mux := http.NewServeMux()
	mux.Handle("/debug/retryfuse", page)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tab := newBrowser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/debug/retryfuse?refresh=1")); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	refunds := `tr[data-scope="https://refunds.internal:443"]`
	waitFor(t, tab, refunds+`[data-breaker="closed"]`, "a scope that answered 200")
	waitFor(t, tab, `tr[data-scope="https://charges.internal:443"][data-breaker="closed"]`, "another scope of the Transport")
	waitFor(t, tab, `tr[data-scope="https://search.internal:443"][data-breaker="off"]`, "a Transport without a breaker")

	// The dependency fails: the breaker opens, the calls give up.
	dep.setRefunds(http.StatusServiceUnavailable)
	for range 3 {
		call(pc, http.MethodGet, dep.URL+"/refunds")
	}
	waitFor(t, tab, refunds+`[data-breaker="open"]`, "the breaker opened")
	waitFor(t, tab, `#events tr[data-kind="give_up"]`, "the calls that gave up")

	text, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(refunds)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"open", "v4"} {
		if !strings.Contains(text, want) {
			t.Errorf("the open scope's row reads %q, want it to hold %q", text, want)
		}
	}

	if *screenshot != "" {
		takeScreenshot(t, tab, dep, pc, srv.URL)
	}
}

// takeScreenshot adds what the page shows beside the breaker (a pace
// learnt from 429s, an uncertain write, an attempt in flight), then
// writes a PNG of the page.
func takeScreenshot(t *testing.T, tab context.Context, dep *dependency, pc *http.Client, pageURL string) {
	call(pc, http.MethodGet, dep.URL+"/fx")
	call(pc, http.MethodPost, dep.URL+"/orders")
	done := make(chan struct{})
	go func() {
		defer close(done)
		call(pc, http.MethodGet, dep.URL+"/hold")
	}()
	<-dep.arrived
	defer func() {
		dep.release()
		<-done
	}()
	if err := chromedp.Do(tab, chromedp.Navigate(pageURL+"/debug/retryfuse")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tab, `#events tr[data-kind="reconcile"]`, "the uncertain write")
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
