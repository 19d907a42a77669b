package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/telemetry"
)

// TestEventSpans: an event's span is a child of its creation, in its trace,
// linked to the batch's span, bounded by the batch's work and, when the
// batch failed, marked failed; an event without a trace context has no
// parent to record under.
func TestEventSpans(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracer := tp.Tracer("test")
	prop := propagation.TraceContext{}

	created, creation := tracer.Start(context.Background(), "created")
	creation.End()
	carried := map[string]string{}
	telemetry.InjectMap(created, prop, carried)
	_, batch := tracer.Start(context.Background(), "batch")
	batch.End()

	_, ok := broker.EventParent(context.Background(), prop, nil)
	require.False(t, ok, "no trace context")
	_, ok = broker.EventParent(context.Background(), prop, map[string]string{"traceparent": "garbage"})
	require.False(t, ok, "an invalid trace context")
	parent, ok := broker.EventParent(context.Background(), prop, carried)
	require.True(t, ok)

	start := time.Now().Add(-time.Second)
	end := time.Now()
	spans := broker.EventSpans{
		Tracer: tracer, Name: "event.handle", Start: start, End: end,
		Links: []trace.Link{{SpanContext: batch.SpanContext()}}, Err: errors.New("boom"), Failed: "not handled",
	}
	spans.Record(parent, func() []attribute.KeyValue { return []attribute.KeyValue{attribute.String("k", "v")} })

	got := exp.GetSpans()
	require.Len(t, got, 3)
	span := got[2]
	require.Equal(t, "event.handle", span.Name)
	require.Equal(t, trace.SpanKindConsumer, span.SpanKind)
	require.Equal(t, creation.SpanContext().TraceID(), span.SpanContext.TraceID())
	require.Equal(t, creation.SpanContext().SpanID(), span.Parent.SpanID())
	require.Equal(t, batch.SpanContext().SpanID(), span.Links[0].SpanContext.SpanID())
	require.True(t, span.StartTime.Equal(start) && span.EndTime.Equal(end))
	require.Contains(t, span.Attributes, attribute.String("k", "v"))
	require.Equal(t, codes.Error, span.Status.Code)
	require.Equal(t, "not handled", span.Status.Description)
}
