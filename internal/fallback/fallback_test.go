package fallback

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The Fallback's pure pieces: whether a request needs current data, the
// mark on the Fallback's answer, and the asking of the Fallback.

func TestNeedsCurrent(t *testing.T) {
	tests := []struct {
		name   string
		ctx    context.Context
		header http.Header
		want   bool
	}{
		{"no header, no mark", context.Background(), nil, false},
		{"WithCurrentData", WithCurrentData(context.Background()), nil, true},
		{"WithCurrentData(nil)", WithCurrentData(nil), nil, true}, //nolint:staticcheck // nil is documented
		{"the key with false", context.WithValue(context.Background(), currentDataKey{}, false), nil, false},
		{"the key with a non-bool", context.WithValue(context.Background(), currentDataKey{}, "yes"), nil, false},
		{"WithCurrentData beside max-age=60", WithCurrentData(context.Background()), http.Header{"Cache-Control": {"max-age=60"}}, true},

		{"no-cache", nil, http.Header{"Cache-Control": {"no-cache"}}, true},
		{"No-Cache", nil, http.Header{"Cache-Control": {"No-Cache"}}, true},
		{"NO-CACHE", nil, http.Header{"Cache-Control": {"NO-CACHE"}}, true},
		{"no-cache among others", nil, http.Header{"Cache-Control": {"public, no-cache, no-transform"}}, true},
		{"no-cache without spaces", nil, http.Header{"Cache-Control": {"public,no-cache"}}, true},
		{"no-cache in a second line", nil, http.Header{"Cache-Control": {"no-transform", "no-cache"}}, true},
		{"max-age=0", nil, http.Header{"Cache-Control": {"max-age=0"}}, true},
		{"Max-Age=0", nil, http.Header{"Cache-Control": {"Max-Age=0"}}, true},
		{"MAX-AGE=0", nil, http.Header{"Cache-Control": {"MAX-AGE=0"}}, true},
		{`max-age="0"`, nil, http.Header{"Cache-Control": {`max-age="0"`}}, true},
		{"max-age=00", nil, http.Header{"Cache-Control": {"max-age=00"}}, true},
		{"max-age=0 among others", nil, http.Header{"Cache-Control": {"no-transform, max-age=0, stale-if-error=60"}}, true},
		{"max-age=60", nil, http.Header{"Cache-Control": {"max-age=60"}}, false},
		{"max-age without a value", nil, http.Header{"Cache-Control": {"max-age"}}, false},
		{"max-age not a number", nil, http.Header{"Cache-Control": {"max-age=soon"}}, false},
		{"no-store", nil, http.Header{"Cache-Control": {"no-store"}}, false},
		{"only-if-cached", nil, http.Header{"Cache-Control": {"only-if-cached"}}, false},
		{"min-fresh=0", nil, http.Header{"Cache-Control": {"min-fresh=0"}}, false},
		{"no-cache as part of another name", nil, http.Header{"Cache-Control": {"x-no-cache"}}, false},

		{"Pragma: no-cache", nil, http.Header{"Pragma": {"no-cache"}}, true},
		{"Pragma: No-Cache", nil, http.Header{"Pragma": {"No-Cache"}}, true},
		{"Pragma: no-cache among others", nil, http.Header{"Pragma": {"x-debug, no-cache"}}, true},
		{"Pragma: no-cache in a second line", nil, http.Header{"Pragma": {"x-debug", "no-cache"}}, true},
		{"Pragma: other", nil, http.Header{"Pragma": {"x-debug"}}, false},
		// RFC 9111, 5.4: with a Cache-Control, Pragma is ignored.
		{"Pragma: no-cache under a Cache-Control", nil, http.Header{"Cache-Control": {"max-age=60"}, "Pragma": {"no-cache"}}, false},
		{"Pragma and Cache-Control: no-cache", nil, http.Header{"Cache-Control": {"no-cache"}, "Pragma": {"no-cache"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != nil {
				req.Header = tt.header
			}
			if got := NeedsCurrent(req); got != tt.want {
				t.Errorf("NeedsCurrent(ctx, %v) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
}

func TestWithCurrentDataKeepsTheContextsValues(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "kept"))
	ctx := WithCurrentData(parent)
	if got := ctx.Value(key{}); got != "kept" {
		t.Errorf("value of the parent: got %v, want kept", got)
	}
	cancel()
	if got := ctx.Err(); got != context.Canceled {
		t.Errorf("after the parent's cancel: got %v, want %v", got, context.Canceled)
	}
}

func TestMarkSetsTheHeaderOnACopy(t *testing.T) {
	kept := http.Header{"Content-Type": {"text/plain"}, markHeader: {"set by the Fallback", "twice"}}
	resp := &http.Response{Header: kept}
	Mark(resp, "exhausted")
	if got := resp.Header.Values(markHeader); len(got) != 1 || got[0] != "exhausted" {
		t.Errorf("mark: got %q, want [exhausted]", got)
	}
	if got := resp.Header.Get("Content-Type"); got != "text/plain" {
		t.Errorf("other header: got %q, want text/plain", got)
	}
	// The Fallback's own map is untouched: it may hand it out again.
	if got := kept.Values(markHeader); len(got) != 2 || got[0] != "set by the Fallback" {
		t.Errorf("the original header: got %q, want it untouched", got)
	}
	if len(kept) != 2 {
		t.Errorf("the original header: got %d names, want 2", len(kept))
	}
}

func TestMarkWithoutAHeader(t *testing.T) {
	resp := &http.Response{}
	Mark(resp, "breaker_open")
	if got := resp.Header.Get(markHeader); got != "breaker_open" {
		t.Errorf("mark on a nil header: got %q, want breaker_open", got)
	}
}

// body is a response body that records whether it was closed.
type body struct {
	io.Reader
	closed bool
}

func (b *body) Close() error { b.closed = true; return nil }

func newResponse() (*http.Response, *body) {
	b := &body{Reader: strings.NewReader("stale")}
	return &http.Response{StatusCode: http.StatusOK, Body: b}, b
}

func TestAsk(t *testing.T) {
	callErr := errors.New("the call's error")
	fbErr := errors.New("the Fallback's error")
	req, err := http.NewRequest(http.MethodGet, "http://example.com/", nil)
	if err != nil {
		t.Fatal(err)
	}
	callResp := &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody}
	served, servedBody := newResponse()
	extra, extraBody := newResponse()

	tests := []struct {
		name        string
		fb          func(*http.Request, *http.Response, error) (*http.Response, error)
		resp        *http.Response
		err         error
		wantResp    *http.Response
		wantErr     error
		wantFailure bool // a failure other than errEmpty
		wantEmpty   bool
		closed      *body // closed by Ask
		open        *body // left open by Ask
	}{
		{
			name:     "a response",
			fb:       func(*http.Request, *http.Response, error) (*http.Response, error) { return served, nil },
			err:      callErr,
			wantResp: served,
			open:     servedBody,
		},
		{
			name:    "an error",
			fb:      func(*http.Request, *http.Response, error) (*http.Response, error) { return nil, fbErr },
			resp:    callResp,
			wantErr: fbErr,
		},
		{
			name:    "the call's own error",
			fb:      func(_ *http.Request, _ *http.Response, err error) (*http.Response, error) { return nil, err },
			err:     callErr,
			wantErr: callErr,
		},
		{
			name:      "neither",
			fb:        func(*http.Request, *http.Response, error) (*http.Response, error) { return nil, nil },
			err:       callErr,
			wantEmpty: true,
		},
		{
			name:    "a response beside an error: the error stands, the response is closed",
			fb:      func(*http.Request, *http.Response, error) (*http.Response, error) { return extra, fbErr },
			err:     callErr,
			wantErr: fbErr,
			closed:  extraBody,
		},
		{
			name:    "the call's response beside an error: left to the caller",
			fb:      func(_ *http.Request, resp *http.Response, _ error) (*http.Response, error) { return resp, fbErr },
			resp:    served,
			wantErr: fbErr,
			open:    servedBody,
		},
		{
			name:        "a panic",
			fb:          func(*http.Request, *http.Response, error) (*http.Response, error) { panic("boom") },
			err:         callErr,
			wantFailure: true,
		},
		{
			name:        "a panic with nil",
			fb:          func(*http.Request, *http.Response, error) (*http.Response, error) { panic(nil) },
			err:         callErr,
			wantFailure: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			servedBody.closed, extraBody.closed = false, false
			fresp, ferr, failure := Ask(tt.fb, req, tt.resp, tt.err)
			if fresp != tt.wantResp {
				t.Errorf("response: got %v, want %v", fresp, tt.wantResp)
			}
			if ferr != tt.wantErr {
				t.Errorf("error: got %v, want %v", ferr, tt.wantErr)
			}
			switch {
			case tt.wantEmpty:
				if !errors.Is(failure, errEmpty) {
					t.Errorf("failure: got %v, want %v", failure, errEmpty)
				}
			case tt.wantFailure:
				if failure == nil || errors.Is(failure, errEmpty) {
					t.Errorf("failure: got %v, want the panic's", failure)
				}
			default:
				if failure != nil {
					t.Errorf("failure: got %v, want none", failure)
				}
			}
			if tt.closed != nil && !tt.closed.closed {
				t.Error("the response dropped beside the error was not closed")
			}
			if tt.open != nil && tt.open.closed {
				t.Error("a response Ask does not own was closed")
			}
		})
	}
}

func TestAskHandsTheFallbackTheCall(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "http://example.com/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{StatusCode: http.StatusServiceUnavailable}
	callErr := errors.New("the call's error")
	var gotReq *http.Request
	var gotResp *http.Response
	var gotErr error
	_, _, _ = Ask(func(r *http.Request, p *http.Response, e error) (*http.Response, error) {
		gotReq, gotResp, gotErr = r, p, e
		return nil, e
	}, req, resp, callErr)
	if gotReq != req || gotResp != resp || gotErr != callErr {
		t.Errorf("the Fallback got (%p, %p, %v), want (%p, %p, %v)", gotReq, gotResp, gotErr, req, resp, callErr)
	}
}

func TestAskPanicNamesTheValue(t *testing.T) {
	_, _, failure := Ask(func(*http.Request, *http.Response, error) (*http.Response, error) {
		panic("the disk is full")
	}, &http.Request{}, nil, nil)
	if failure == nil || !strings.Contains(failure.Error(), "the disk is full") {
		t.Errorf("failure: got %v, want one naming the panic's value", failure)
	}
}
