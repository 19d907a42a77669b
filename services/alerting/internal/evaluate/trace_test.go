package evaluate_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/alerting/internal/evaluate"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// TestHandleRecordsAnEvaluationSpanPerTracedEvent: each event carrying its
// execution's trace context gets an "alerting.evaluate" span there, a
// child of the event's creation, linked to the message's consumer span;
// an event without one gets none.
func TestHandleRecordsAnEvaluationSpanPerTracedEvent(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.Migrated(t, store.Migrations)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ev, err := evaluate.New(evaluate.Options{
		Store: store.New(store.Options{Pool: pool}), TracerProvider: tp, Exchange: "cronmesh.executions", Queue: "cronmesh.alerting.executions",
	})
	require.NoError(t, err)

	now := time.Now().UTC().Truncate(time.Second)
	cctx, creator := tp.Tracer("dispatcher").Start(context.Background(), "create cronmesh.executions")
	creator.End()
	traced := &eventsv1.ExecutionEvent{
		EventId: uuid.NewString(), Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, ExecutionId: uuid.NewString(),
		JobId: uuid.NewString(), Namespace: "ns", Attempt: 1, NominalTime: timestamppb.New(now), OccurTime: timestamppb.New(now),
		TraceContext: map[string]string{},
	}
	propagation.TraceContext{}.Inject(cctx, propagation.MapCarrier(traced.TraceContext))
	untraced := proto.Clone(traced).(*eventsv1.ExecutionEvent)
	untraced.EventId, untraced.ExecutionId, untraced.TraceContext = uuid.NewString(), uuid.NewString(), nil
	body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: []*eventsv1.ExecutionEvent{traced, untraced}})
	require.NoError(t, err)

	hctx, consumer := tp.Tracer("consume").Start(t.Context(), "process cronmesh.executions", trace.WithNewRoot())
	msg := message.NewMessage(uuid.NewString(), body)
	msg.SetContext(hctx) // as broker.Consumer hands it over
	errs, err := ev.Handle(t.Context(), []*message.Message{msg})
	require.NoError(t, err)
	require.Nil(t, errs)
	consumer.End()

	var got []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "alerting.evaluate" {
			got = append(got, s)
		}
	}
	require.Len(t, got, 1, "one span: the untraced event gets none")
	s := got[0]
	require.Equal(t, creator.SpanContext().TraceID(), s.SpanContext.TraceID())
	require.Equal(t, creator.SpanContext().SpanID(), s.Parent.SpanID())
	require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
	require.Subset(t, s.Attributes, []attribute.KeyValue{
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", "cronmesh.executions"),
		attribute.String("messaging.destination.subscription.name", "cronmesh.alerting.executions"),
		attribute.String("messaging.message.id", traced.EventId),
		attribute.String("cronmesh.execution.id", traced.ExecutionId),
		attribute.String("cronmesh.event.kind", "failed"),
	})
	require.Len(t, s.Links, 1)
	require.Equal(t, consumer.SpanContext().SpanID(), s.Links[0].SpanContext.SpanID(), "linked to the message's span")
}
