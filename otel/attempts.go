package retryfuseotel

import (
	"context"
	"slices"
	"sync"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Below are the spans of one call that NewTransport traces: the call's
// own, whose TracerProvider starts the attempts' CLIENT spans (otelhttp
// asks the span in the request's context for it), and the attempts'
// spans, numbered as retryfuse numbers its attempts.
//
// The attempt a CLIENT span is for is the one AttemptStart reported last
// and no span has taken yet: retryfuse reports an attempt on the goroutine
// that sends it, just before it sends it, so the two meet in order. Only
// hedged branches are sent from goroutines of their own; two branches
// whose goroutines start in the reverse order of their launch swap their
// numbers (not their resend counts, which follow the order of sending).

// callState is what the spans of one call share. It is safe for
// concurrent use: hedged attempts start on goroutines of their own, and a
// response body may end its attempt's span on any goroutine.
type callState struct {
	mu       sync.Mutex
	sent     int            // CLIENT spans started: the resend count of the next
	pending  []int          // attempts reported (AttemptStart) whose span has not started
	attempts []*attemptSpan // by start
	closed   bool           // the call has returned: nothing is held any more
}

// count returns the requests the call sent.
func (st *callState) count() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.sent
}

// starting records that attempt n is about to be sent.
func (st *callState) starting(n int) {
	st.mu.Lock()
	st.pending = append(st.pending, n)
	st.mu.Unlock()
}

// begin numbers a CLIENT span about to start: its resend count, and the
// attempt it is for (0 when none was reported).
func (st *callState) begin() (resends, attempt int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	resends = st.sent
	st.sent++
	if len(st.pending) > 0 {
		attempt = st.pending[0]
		st.pending = st.pending[1:]
	}
	return resends, attempt
}

func (st *callState) add(s *attemptSpan) {
	st.mu.Lock()
	st.attempts = append(st.attempts, s)
	st.mu.Unlock()
}

// span returns the span of attempt n, or nil, and, when its end is held,
// the time it ended.
func (st *callState) span(n int) (*attemptSpan, time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, s := range st.attempts {
		if s.number == n && !s.reported {
			return s, s.endAt
		}
	}
	return nil, time.Time{}
}

// reported records that attempt n has its result, and ends its span if
// its end was held. An attempt that started no span is no longer pending.
func (st *callState) reported(n int) {
	st.mu.Lock()
	if i := slices.Index(st.pending, n); i >= 0 {
		st.pending = slices.Delete(st.pending, i, i+1)
	}
	var end *attemptSpan
	for _, s := range st.attempts {
		if s.number == n && !s.reported {
			s.reported = true
			if s.held {
				end, s.held = s, false
			}
			break
		}
	}
	st.mu.Unlock()
	if end != nil {
		end.endNow()
	}
}

// close ends the spans still held: the call has returned, and no result
// will come for them.
func (st *callState) close() {
	st.mu.Lock()
	st.closed = true
	var held []*attemptSpan
	for _, s := range st.attempts {
		if s.held {
			s.held = false
			held = append(held, s)
		}
	}
	st.mu.Unlock()
	for _, s := range held {
		s.endNow()
	}
}

// stateOf returns the state of the call whose span, or one of whose
// attempts' spans, ctx carries; nil when none does.
func stateOf(ctx context.Context) *callState {
	switch s := trace.SpanFromContext(ctx).(type) {
	case *callSpan:
		return s.st
	case *attemptSpan:
		return s.st
	}
	return nil
}

// callSpan is a call's span. Its TracerProvider starts the attempts'
// spans.
type callSpan struct {
	trace.Span
	st *callState
}

func (s *callSpan) TracerProvider() trace.TracerProvider {
	return &attemptProvider{TracerProvider: s.Span.TracerProvider(), st: s.st}
}

type attemptProvider struct {
	trace.TracerProvider
	st *callState
}

func (p *attemptProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &attemptTracer{Tracer: p.TracerProvider.Tracer(name, opts...), st: p.st}
}

type attemptTracer struct {
	trace.Tracer
	st *callState
}

// Start starts a CLIENT span as an attempt's: a request sent, with its
// resend count. Spans of any other kind are not requests.
func (t *attemptTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if cfg := trace.NewSpanStartConfig(opts...); cfg.SpanKind() != trace.SpanKindClient {
		return t.Tracer.Start(ctx, name, opts...)
	}
	resends, n := t.st.begin()
	if resends > 0 {
		opts = append(opts[:len(opts):len(opts)], trace.WithAttributes(semconv.HTTPRequestResendCount(resends)))
	}
	ctx, span := t.Tracer.Start(ctx, name, opts...)
	s := &attemptSpan{Span: span, st: t.st, number: n}
	t.st.add(s)
	return trace.ContextWithSpan(ctx, s), s
}

// attemptSpan is the CLIENT span of one attempt. Its end waits for the
// attempt's result (see NewTransport).
type attemptSpan struct {
	trace.Span
	st     *callState
	number int // the attempt's number; 0 when retryfuse did not report it

	// Guarded by st.mu.
	reported bool      // its result was reported: End ends it
	held     bool      // End was called before its result was reported
	endAt    time.Time // when End was called, when held or was
	endOpts  []trace.SpanEndOption
}

func (s *attemptSpan) End(opts ...trace.SpanEndOption) {
	st := s.st
	st.mu.Lock()
	if s.held {
		st.mu.Unlock()
		return // it ends once, when its result comes
	}
	if s.number > 0 && !s.reported && !st.closed && s.endAt.IsZero() {
		s.held, s.endAt, s.endOpts = true, time.Now(), opts
		st.mu.Unlock()
		return
	}
	st.mu.Unlock()
	s.Span.End(opts...)
}

// endNow ends a span whose end was held, at the time it was asked to end
// (unless its own options set one).
func (s *attemptSpan) endNow() {
	s.Span.End(append([]trace.SpanEndOption{trace.WithTimestamp(s.endAt)}, s.endOpts...)...)
}
