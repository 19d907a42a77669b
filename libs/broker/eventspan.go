package broker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cronmesh/cronmesh/libs/clock"
)

// OrDefaults returns tp, prop and clk, each nil one replaced by what a
// Consumer uses by default: no tracing, the W3C trace context, the real
// clock. A service's consumer fills its options with it before it passes
// them on, since it traces and tells the time itself too.
func OrDefaults(tp trace.TracerProvider, prop propagation.TextMapPropagator, clk clock.Clock) (trace.TracerProvider, propagation.TextMapPropagator, clock.Clock) {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return tp, prop, clk
}

// EventParent is ctx carrying the remote span context of an event's
// creation, read by prop from the trace context the event carries (a
// lifecycle event carries its execution's); false when it carries none
// that is valid.
func EventParent(ctx context.Context, prop propagation.TextMapPropagator, traceContext map[string]string) (context.Context, bool) {
	if len(traceContext) == 0 {
		return nil, false
	}
	parent := prop.Extract(ctx, propagation.MapCarrier(traceContext))
	return parent, trace.SpanContextFromContext(parent).IsValid()
}

// EventSpans records the spans of a batch's events, each in its own
// execution's trace (under its EventParent). The batch's work (one
// transaction, one evaluation) serves events of many executions, so its
// own span cannot be in all of their traces: each event's span links to
// it instead.
type EventSpans struct {
	Tracer trace.Tracer
	// Name is every span's name.
	Name string
	// Start and End bound every span: the batch's work.
	Start, End time.Time
	// Links are every span's links: the batch's own span.
	Links []trace.Link
	// Err is the batch's error, nil when it succeeded; Failed is then
	// every span's status description.
	Err    error
	Failed string
}

// Record records the consumer span of one event under parent, with the
// attributes attrs returns. It asks for them only when the span is
// recorded: an unsampled span (the usual case without export) carries
// only ids, so they would be built for nothing.
func (s EventSpans) Record(parent context.Context, attrs func() []attribute.KeyValue) {
	_, span := s.Tracer.Start(parent, s.Name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(s.Start),
		trace.WithLinks(s.Links...))
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attrs()...)
	if s.Err != nil {
		span.RecordError(s.Err)
		span.SetAttributes(semconv.ErrorTypeOther)
		span.SetStatus(codes.Error, s.Failed)
	}
	span.End(trace.WithTimestamp(s.End))
}
