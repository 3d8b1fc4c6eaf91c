package retryfuse

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What makes two reads identical, at the Transport: the requests that never
// share, and a ShareKey that panics or names nothing. The default key's own
// test is internal/share's.

func TestShareReadsOnlyGETAndHEADWithoutBody(t *testing.T) {
	for _, tt := range []struct {
		method, body string
		header       []string
	}{
		{http.MethodPost, "same", nil},
		{http.MethodPut, "same", nil},
		{http.MethodDelete, "", nil},
		{http.MethodPost, "same", []string{"Idempotency-Key", "k1"}},
		{http.MethodGet, "a body", nil},
		{http.MethodGet, "", []string{"Upgrade", "websocket"}},
	} {
		t.Run(tt.method+" "+tt.body+" "+strings.Join(tt.header, ":"), func(t *testing.T) {
			srv := newHeldServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {})
			log := newShareLog()
			tr := shareTransport(t, log, &Transport{Retry: RetryPolicy{MaxAttempts: 1}})
			var calls []*asyncCall
			for range 2 {
				req := newRequest(t, testCtx(t), tt.method, srv.URL, tt.body)
				for i := 0; i+1 < len(tt.header); i += 2 {
					req.Header.Set(tt.header[i], tt.header[i+1])
				}
				calls = append(calls, goDo(tr, req))
			}
			require.True(t, poll(settleBound, func() bool { return srv.count() == 2 }), "both requests at the server")
			srv.open()
			for _, c := range calls {
				c.wait(t)
			}
			assert.Empty(t, log.events())
		})
	}
}

func TestShareReadsGETAndHEADDoNotShare(t *testing.T) {
	srv := newHeldServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "body") })
	log := newShareLog()
	tr := shareTransport(t, log, &Transport{Reads: ReadPolicy{ShareKey: func(*http.Request) string { return "everything" }}})
	head := goDo(tr, newRequest(t, testCtx(t), http.MethodHead, srv.URL, ""))
	get := goDo(tr, getReq(t, testCtx(t), srv.URL))
	log.await(t, actionLed, 2)
	srv.open()
	assert.Equal(t, "", head.wait(t).body)
	assert.Equal(t, "body", get.wait(t).body)
	assert.Equal(t, 2, srv.count())
}

func TestShareKeyThatPanicsOrIsEmptySharesNothing(t *testing.T) {
	for name, key := range map[string]func(*http.Request) string{
		"panics": func(*http.Request) string { panic("no key") },
		"empty":  func(*http.Request) string { return "" },
	} {
		t.Run(name, func(t *testing.T) {
			srv := newHeldServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
			log := newShareLog()
			tr := shareTransport(t, log, &Transport{Reads: ReadPolicy{ShareKey: key}})
			calls := []*asyncCall{goDo(tr, getReq(t, testCtx(t), srv.URL)), goDo(tr, getReq(t, testCtx(t), srv.URL))}
			require.True(t, poll(settleBound, func() bool { return srv.count() == 2 }), "both requests at the server")
			srv.open()
			for _, c := range calls {
				c.wait(t)
				require.NoError(t, c.err)
				assert.Equal(t, "ok", c.body)
			}
			if name == "panics" {
				require.Equal(t, 2, log.count(actionUnshared))
				for _, e := range log.events() {
					assert.ErrorContains(t, e.Err, "ShareKey panicked: no key")
				}
			} else {
				assert.Empty(t, log.events())
			}
		})
	}
}
