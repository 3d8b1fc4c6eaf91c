package retryfuseotel

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// NewTransport returns a RoundTripper that traces each call through next
// (a retryfuse Transport) by the HTTP semantic conventions, when next's
// Base is otelhttp's Transport and its Hooks are NewHooks':
//
//	hooks, err := retryfuseotel.NewHooks()
//	rf := &retryfuse.Transport{
//		Base:  otelhttp.NewTransport(base), // a CLIENT span per request sent
//		Hooks: hooks,                       // events on the span they concern
//	}
//	client := &http.Client{Transport: retryfuseotel.NewTransport(rf)}
//
// Each call is an INTERNAL span that carries no HTTP attributes, named by
// WithSpanName (by default the request's method). It records the call's
// error, if any, and ends when the response body is closed or read to its
// end, or with the error. Under it, otelhttp makes a CLIENT span with the
// HTTP attributes for each request sent, and NewTransport sets
// http.request.resend_count on every one after the first: 1 on the first
// resend, 2 on the second, counting every request of the call whatever sent
// it again (a retry, a hedge, a redirect that http.Client follows). It
// does so through the call span's TracerProvider, which otelhttp uses when
// it is given none: give the otelhttp Transport below no
// otelhttp.WithTracerProvider (set the provider here, WithTracerProvider).
//
// NewHooks' events go to the span they concern: an attempt's result
// (retryfuse.attempt) and the base's own re-sends within it
// (retryfuse.hidden_resend) to that attempt's CLIENT span; the decisions of
// the call (retryfuse.decision, retryfuse.retry, retryfuse.give_up,
// retryfuse.reconcile_required, retryfuse.policy, a breaker's refusal) to
// the call's span. otelhttp ends an attempt's span as its error returns,
// before retryfuse has classified it: that span's end is held, with the
// time otelhttp ended it, until its retryfuse.attempt event is added, and
// at the latest until the call returns.
//
// The propagated trace context is each attempt's, as otelhttp injects it.
// The returned RoundTripper forwards CloseIdleConnections to next. A nil
// next fails every call with an error.
func NewTransport(next http.RoundTripper, opts ...Option) http.RoundTripper {
	var c config
	for _, o := range opts {
		o(&c)
	}
	tp := c.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &callTransport{next: next, tracer: tp.Tracer(ScopeName), name: c.name}
}

// callTransport starts the span of each call; see NewTransport.
type callTransport struct {
	next   http.RoundTripper
	tracer trace.Tracer
	name   func(*http.Request) string
}

var (
	errNilRequest = errors.New("retryfuseotel: nil Request")
	errNilNext    = errors.New("retryfuseotel: NewTransport was given a nil RoundTripper")
)

func (t *callTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errNilRequest
	}
	if t.next == nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errNilNext
	}
	st := &callState{}
	if req.Response != nil && req.Response.Request != nil {
		// A redirect http.Client follows: its requests count on from
		// those of the call that was redirected.
		if prev := stateOf(req.Response.Request.Context()); prev != nil {
			st.sent = prev.count()
		}
	}
	ctx, span := t.tracer.Start(req.Context(), t.spanName(req), trace.WithSpanKind(trace.SpanKindInternal))
	ctx = trace.ContextWithSpan(ctx, &callSpan{Span: span, st: st})
	returned := false
	defer func() {
		if !returned { // next panicked: the spans end on the way up
			st.close()
			span.End()
		}
	}()
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	returned = true
	st.close()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return resp, err
	}
	if resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		span.End()
		return resp, err
	}
	resp.Body = endOnClose(resp.Body, span)
	return resp, nil
}

// spanName names the call's span: WithSpanName's, else the method (HTTP
// for one the semantic conventions do not know).
func (t *callTransport) spanName(req *http.Request) string {
	if t.name != nil {
		if n := t.name(req); n != "" {
			return n
		}
	}
	m := req.Method
	if m == "" {
		m = http.MethodGet
	}
	if !knownMethod(m) {
		return "HTTP"
	}
	return m
}

func (t *callTransport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := t.next.(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

// endOnClose returns body, which ends span when it is closed or read to
// its end. A body that can be written to (a protocol switch) stays one.
func endOnClose(body io.ReadCloser, span trace.Span) io.ReadCloser {
	b := &spanBody{body: body, span: span}
	if _, ok := body.(io.ReadWriteCloser); ok {
		return &spanBodyRW{b}
	}
	return b
}

type spanBody struct {
	body  io.ReadCloser
	span  trace.Span
	ended atomic.Bool
}

func (b *spanBody) end() {
	if b.ended.CompareAndSwap(false, true) {
		b.span.End()
	}
}

func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.end()
	}
	return n, err
}

// Close closes the body, which ends the attempt's span below, then ends
// the call's: a parent ends after its child.
func (b *spanBody) Close() error {
	err := b.body.Close()
	b.end()
	return err
}

type spanBodyRW struct{ *spanBody }

func (b *spanBodyRW) Write(p []byte) (int, error) { return b.body.(io.Writer).Write(p) }
