package pipeline

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/telemetry"
)

// publishEvents is the flush of the event batcher: one ExecutionEventBatch
// message to the executions exchange, routed by execevent.RoutingKey,
// once no request waits for a delivery slot (see backlog).
func (p *Pipeline) publishEvents(ctx context.Context, events []*eventsv1.ExecutionEvent) error {
	p.metrics.eventsHeld.Observe(p.backlog.wait(ctx).Seconds())
	body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	if err != nil {
		return fmt.Errorf("encode %d lifecycle events: %w", len(events), err)
	}
	msg := message.NewMessage(uuid.Must(uuid.NewV7()).String(), body)
	key := execevent.RoutingKey(events)
	ctx, span := p.tracer.Start(ctx, "publish "+p.opts.ExecutionsExchange,
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemRabbitMQ,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("publish"),
			semconv.MessagingDestinationName(p.opts.ExecutionsExchange),
			semconv.MessagingRabbitMQDestinationRoutingKey(key),
			semconv.MessagingMessageID(msg.UUID),
			semconv.MessagingMessageBodySize(len(body)),
			semconv.MessagingBatchMessageCount(len(events)),
		))
	defer span.End()
	if span.IsRecording() {
		// A batch send: its span links every event's creation span (each
		// in its own execution's trace) rather than joining one of them.
		// Read only when recorded: decoding every event's trace context
		// for a span nobody records cost a share of the dispatcher.
		for _, ev := range events {
			if sc := trace.SpanContextFromContext(telemetry.ExtractMap(context.Background(), p.opts.Propagator, ev.GetTraceContext())); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc})
			}
		}
	}
	broker.InjectTrace(ctx, p.opts.Propagator, msg.Metadata)
	msg.SetContext(ctx)
	topic := broker.Route(p.opts.ExecutionsExchange, key)
	if err := p.opts.Publisher.Publish(topic, msg); err != nil {
		span.RecordError(err)
		span.SetAttributes(semconv.ErrorTypeOther)
		span.SetStatus(codes.Error, "publish failed")
		p.metrics.publishFailures.WithLabelValues("events").Inc()
		return fmt.Errorf("publish %d lifecycle events: %w", len(events), err)
	}
	p.metrics.eventBatches.Inc()
	p.metrics.events.Add(float64(len(events)))
	return nil
}

// emit hands ev to the event batcher, first giving it a creation span
// "create <executions exchange>" in ctx's trace (the attempt's), whose
// context the event carries: history and alerting continue each event's
// own execution trace from it, whatever batch it travels in. When ctx's
// trace is not sampled (the usual case without export), no span is made
// and the event carries ctx's own context: the consumers' spans stay in
// the same trace, unrecorded as its sampling says, and two spans per
// attempt that nobody records are not paid for.
func (p *Pipeline) emit(ctx context.Context, ev *eventsv1.ExecutionEvent) <-chan error {
	if telemetry.MayRecord(ctx) {
		var span trace.Span
		ctx, span = p.tracer.Start(ctx, "create "+p.opts.ExecutionsExchange,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				semconv.MessagingSystemRabbitMQ,
				semconv.MessagingOperationTypeCreate,
				semconv.MessagingOperationName("create"),
				semconv.MessagingDestinationName(p.opts.ExecutionsExchange),
				semconv.MessagingMessageID(ev.GetEventId()),
				attribute.String("cronmesh.event.kind", execevent.KindName(ev.GetKind())),
				attribute.String("cronmesh.execution.id", ev.GetExecutionId()),
				attribute.Int("cronmesh.attempt", int(ev.GetAttempt())),
			))
		span.End()
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		ev.TraceContext = map[string]string{}
		telemetry.InjectMap(ctx, p.opts.Propagator, ev.TraceContext)
	}
	return p.events.submit(ev)
}
