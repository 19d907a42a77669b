package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/services/history/internal/ingest"
)

// TestConsumerWritesEachEventInItsTrace: events of two executions in one
// message each get a "history.write" span in their own trace, a child of
// the span that created the event, linked to the batch write; an event
// without a trace context gets none.
func TestConsumerWritesEachEventInItsTrace(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	st := newStore(t, now)
	exchange, queue := names(t)
	ch := amqptest.Channel(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	c, err := ingest.New(ingest.Options{AMQPURL: amqptest.URL(), Store: st, Exchange: exchange, Queue: queue, TracerProvider: tp})
	require.NoError(t, err)
	stop := run(t, c)

	job := uuid.NewString()
	nominal := now.Add(-time.Hour).Truncate(time.Second)
	var creators []trace.Span
	var events []*eventsv1.ExecutionEvent
	for i := range 3 {
		n := nominal.Add(time.Duration(i) * time.Second)
		ev := &eventsv1.ExecutionEvent{
			EventId: uuid.NewString(), Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED,
			ExecutionId: execid.For(job, n), JobId: job, Namespace: "ns", Attempt: 1,
			NominalTime: timestamppb.New(n), OccurTime: timestamppb.New(now), StartTime: timestamppb.New(now),
		}
		if i < 2 { // the third one is untraced
			cctx, span := tp.Tracer("dispatcher").Start(context.Background(), "create executions", trace.WithSpanKind(trace.SpanKindProducer))
			span.End()
			ev.TraceContext = map[string]string{}
			propagation.TraceContext{}.Inject(cctx, propagation.MapCarrier(ev.TraceContext))
			ev.TraceId = span.SpanContext().TraceID().String()
			creators = append(creators, span)
		}
		events = append(events, ev)
	}
	publish(t, ch, exchange, batch(t, events...))
	require.Eventually(t, func() bool {
		for _, ev := range events {
			if _, _, err := st.Get(t.Context(), "ns", ev.ExecutionId); err != nil {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, stop())

	var writes []tracetest.SpanStub
	var batchSpan tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "history.write":
			writes = append(writes, s)
		case "history.write_batch":
			batchSpan = s
		}
	}
	require.Len(t, writes, 2, "one span per traced event")
	require.True(t, batchSpan.SpanContext.IsValid(), "the batch span")
	for i, creator := range creators {
		var w tracetest.SpanStub
		for _, s := range writes {
			if s.Parent.SpanID() == creator.SpanContext().SpanID() {
				w = s
			}
		}
		require.True(t, w.SpanContext.IsValid(), "event %d's write span is a child of its creation", i)
		require.Equal(t, creator.SpanContext().TraceID(), w.SpanContext.TraceID())
		require.Equal(t, trace.SpanKindConsumer, w.SpanKind)
		require.Subset(t, w.Attributes, []attribute.KeyValue{
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", exchange),
			attribute.String("messaging.destination.subscription.name", queue),
			attribute.String("messaging.message.id", events[i].EventId),
			attribute.String("db.system.name", "postgresql"),
			attribute.String("db.operation.name", "INSERT"),
			attribute.String("cronmesh.execution.id", events[i].ExecutionId),
			attribute.String("cronmesh.event.kind", "started"),
		})
		require.Len(t, w.Links, 1)
		require.Equal(t, batchSpan.SpanContext.SpanID(), w.Links[0].SpanContext.SpanID(), "linked to the batch write")
		require.False(t, w.StartTime.After(w.EndTime))
	}
}
