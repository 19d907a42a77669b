package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// TestRelayPublishSpans: a row written with a trace context is published
// under a producer span in that trace, with the messaging attributes, and
// the message carries the publish span's context; a row without one gets
// no span and keeps its headers.
func TestRelayPublishSpans(t *testing.T) {
	t.Parallel()
	// grouped: the two messages share a row of WriteGrouped, and keep
	// their own trace contexts.
	for _, grouped := range []bool{false, true} {
		t.Run(map[bool]string{false: "rows", true: "grouped"}[grouped], func(t *testing.T) {
			t.Parallel()
			testRelayPublishSpans(t, grouped)
		})
	}
}

func testRelayPublishSpans(t *testing.T, grouped bool) {
	pool := testPool(t)
	top := newTopology(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r, _ := newRelay(t, RelayOptions{
		Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange), TracerProvider: tp,
		Destination: func(topic string) (string, string) { return top.exchange, topic },
	})

	ctx, parent := tp.Tracer("test").Start(context.Background(), "trigger.execution")
	parent.End()
	headers := map[string]string{"x-tenant": "t1"}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(headers))
	writeWith(grouped)(t, pool,
		Message{AggregateID: "job-1", RoutingKey: "dispatch.normal", MessageID: "exec-1", Payload: []byte("abc"), Headers: headers},
		Message{AggregateID: "job-2", RoutingKey: "dispatch.normal", MessageID: "exec-2", Headers: map[string]string{"x-tenant": "t2"}},
	)
	if grouped {
		require.Equal(t, 1, countRows(t, pool))
	}
	stop := runRelay(t, r)
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	stop()

	var publish []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if strings.HasPrefix(s.Name, "publish ") {
			publish = append(publish, s)
		}
	}
	require.Len(t, publish, 1, "one span: the untraced row gets none")
	span := publish[0]
	require.Equal(t, "publish "+top.exchange, span.Name)
	require.Equal(t, trace.SpanKindProducer, span.SpanKind)
	require.Equal(t, parent.SpanContext().TraceID(), span.SpanContext.TraceID())
	require.Equal(t, parent.SpanContext().SpanID(), span.Parent.SpanID())
	require.Subset(t, span.Attributes, []attribute.KeyValue{
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.operation.name", "publish"),
		attribute.String("messaging.destination.name", top.exchange),
		attribute.String("messaging.rabbitmq.destination.routing_key", "dispatch.normal"),
		attribute.String("messaging.message.id", "exec-1"),
		attribute.Int("messaging.message.body.size", 3),
	})

	got := amqptest.Drain(t, top.queue)
	require.Len(t, got, 2)
	for _, d := range got {
		switch d.MessageId {
		case "exec-1":
			require.Equal(t, "t1", d.Headers["x-tenant"])
			want := "00-" + span.SpanContext.TraceID().String() + "-" + span.SpanContext.SpanID().String() + "-01"
			require.Equal(t, want, d.Headers["traceparent"], "the consumer continues from the publish span")
		case "exec-2":
			require.Equal(t, "t2", d.Headers["x-tenant"])
			require.NotContains(t, d.Headers, "traceparent")
		}
	}
}
