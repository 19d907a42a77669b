package pipeline_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
)

// TestRetryAndEventsStayInTheExecutionsTrace: the retry is published under
// a span of the first attempt, and the second attempt continues from it
// across the delay queue; every lifecycle event is created under a span of
// its attempt whose context it carries; the batch send links them.
func TestRetryAndEventsStayInTheExecutionsTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var n atomic.Int32
	f := &fake{fn: func(context.Context, *dispatchv1.DispatchRequest) deliver.Outcome {
		if n.Add(1) == 1 {
			return deliver.Outcome{Result: deliver.Retryable, StatusCode: 500, Reason: "HTTP 500"}
		}
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200, Reason: "HTTP 200"}
	}}
	r := e.start(f, func(o *pipeline.Options) { o.TracerProvider = tp })

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(amqp091.Table{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}, req)
	e.waitFor(req.ExecutionId, succeeded, 2)
	e.waitFor(req.ExecutionId, started, 2)
	e.waitFor(req.ExecutionId, failed, 1)
	e.waitFor(req.ExecutionId, started, 1)
	r.stop(t)

	spans := exp.GetSpans()
	byName := func(prefix string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range spans {
			if strings.HasPrefix(s.Name, prefix) && s.SpanContext.TraceID().String() == traceID {
				out = append(out, s)
			}
		}
		return out
	}
	process := byName("process ")
	require.Len(t, process, 2)
	if process[0].StartTime.After(process[1].StartTime) {
		process[0], process[1] = process[1], process[0]
	}
	retry := byName("publish " + e.opts.RetryExchange)
	require.Len(t, retry, 1)
	require.Equal(t, trace.SpanKindProducer, retry[0].SpanKind)
	require.Equal(t, process[0].SpanContext.SpanID(), retry[0].Parent.SpanID(), "the retry is published by attempt 1")
	require.Equal(t, retry[0].SpanContext.SpanID(), process[1].Parent.SpanID(), "attempt 2 continues from the retry's publish")
	require.Subset(t, retry[0].Attributes, []attribute.KeyValue{
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", e.opts.RetryExchange),
		attribute.String("messaging.message.id", req.ExecutionId),
	})

	creates := byName("create " + e.opts.ExecutionsExchange)
	require.Len(t, creates, 4, "started and an outcome per attempt")
	createByID := map[trace.SpanID]tracetest.SpanStub{}
	for _, c := range creates {
		createByID[c.SpanContext.SpanID()] = c
		require.Contains(t, []trace.SpanID{process[0].SpanContext.SpanID(), process[1].SpanContext.SpanID()}, c.Parent.SpanID())
		require.Subset(t, c.Attributes, []attribute.KeyValue{
			attribute.String("messaging.operation.type", "create"),
			attribute.String("messaging.destination.name", e.opts.ExecutionsExchange),
		})
	}
	events := e.events.of(req.ExecutionId)
	require.Len(t, events, 4)
	var linked int
	for _, s := range spans {
		if s.Name == "publish "+e.opts.ExecutionsExchange {
			for _, l := range s.Links {
				if _, ok := createByID[l.SpanContext.SpanID()]; ok {
					linked++
				}
			}
		}
	}
	require.Equal(t, 4, linked, "the batch sends link every event's creation")
	for _, ev := range events {
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(ev.TraceContext)))
		require.True(t, sc.IsValid(), "event %s carries a trace context", ev.Kind)
		c, ok := createByID[sc.SpanID()]
		require.True(t, ok, "event %s carries its creation span", ev.Kind)
		require.Contains(t, c.Attributes, attribute.String("messaging.message.id", ev.EventId))
		require.Equal(t, traceID, ev.TraceId)
	}
}

// TestEventsOfAnUnsampledTraceCarryTheAttemptsContext: under a trace that
// is not sampled no creation span is made (the parent-based sampler would
// not record it); each event still carries its attempt's trace, whose id
// the history links to.
func TestEventsOfAnUnsampledTraceCarryTheAttemptsContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := &fake{fn: func(context.Context, *dispatchv1.DispatchRequest) deliver.Outcome {
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200, Reason: "HTTP 200"}
	}}
	r := e.start(f, func(o *pipeline.Options) { o.TracerProvider = tp })

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(amqp091.Table{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-00"}, req)
	e.waitFor(req.ExecutionId, succeeded, 1)
	e.waitFor(req.ExecutionId, started, 1)
	r.stop(t)

	require.Empty(t, exp.GetSpans(), "nothing of an unsampled trace is recorded")
	events := e.events.of(req.ExecutionId)
	require.Len(t, events, 2)
	for _, ev := range events {
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(ev.TraceContext)))
		require.True(t, sc.IsValid(), "event %s carries a trace context", ev.Kind)
		require.Equal(t, traceID, sc.TraceID().String())
		require.False(t, sc.IsSampled())
		require.Equal(t, traceID, ev.TraceId)
	}
}
