package otlptest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/libs/testkit/otlptest"
)

// TestReceiverStoresExportedSpans exports through the same path the
// services use (libs/telemetry's OTLP/gRPC exporter, flushed by Shutdown)
// and checks what the queries return.
func TestReceiverStoresExportedSpans(t *testing.T) {
	t.Parallel()
	rcv := otlptest.New(t)
	ctx := t.Context()

	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "svc-a", OTLPEndpoint: rcv.Endpoint()})
	require.NoError(t, err)
	tracer := tel.Tracer("otlptest-test")
	pctx, parent := tracer.Start(ctx, "parent", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("s", "x"), attribute.Int("n", 7), attribute.Bool("b", true), attribute.StringSlice("l", []string{"p", "q"})))
	_, child := tracer.Start(pctx, "child", trace.WithSpanKind(trace.SpanKindConsumer))
	child.End()
	parent.End()
	_, other := tracer.Start(ctx, "other")
	other.End()
	// Shutdown must flush the batch: this is what a service does on SIGTERM.
	require.NoError(t, tel.Shutdown(ctx))

	traceID := parent.SpanContext().TraceID().String()
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, rcv.Wait(wait, func(s []otlptest.Span) bool { return len(s) >= 3 }), "spans: %s", otlptest.Dump(rcv.Spans()))

	got := rcv.Trace(traceID)
	require.Len(t, got, 2, otlptest.Dump(rcv.Spans()))
	require.Equal(t, "parent", got[0].Name)
	require.Equal(t, "child", got[1].Name)
	require.Equal(t, got[0].SpanID, got[1].ParentSpanID)
	require.Empty(t, got[0].ParentSpanID)
	require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, got[0].Kind)
	require.Equal(t, "svc-a", got[0].Service)
	require.Equal(t, "svc-a", got[0].Resource["service.name"])
	require.Equal(t, map[string]any{"s": "x", "n": int64(7), "b": true, "l": []any{"p", "q"}}, got[0].Attributes)
	v, ok := got[0].Attr("n")
	require.True(t, ok)
	require.Equal(t, "7", v)

	require.Len(t, rcv.Service("svc-a"), 3)
	require.Empty(t, rcv.Service("svc-b"))
	require.Len(t, rcv.Named("other"), 1)
	require.NotEqual(t, traceID, rcv.Named("other")[0].TraceID)
	require.Contains(t, got[0].String(), `svc-a "parent" producer`)
}

// TestWaitEndsWithContext shows Wait gives up when its context ends.
func TestWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	rcv := otlptest.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, rcv.Wait(ctx, func(s []otlptest.Span) bool { return len(s) > 0 }), context.DeadlineExceeded)
}
