package outbox

import (
	"context"
	"maps"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracing makes the relay's publish spans; a nil *tracing makes none.
type tracing struct {
	tracer      trace.Tracer
	prop        propagation.TextMapPropagator
	destination func(topic string) (exchange, routingKey string)
}

func newTracing(opts RelayOptions) *tracing {
	if opts.TracerProvider == nil {
		return nil
	}
	t := &tracing{
		tracer:      opts.TracerProvider.Tracer("github.com/cronmesh/cronmesh/libs/outbox"),
		prop:        opts.Propagator,
		destination: opts.Destination,
	}
	if t.prop == nil {
		t.prop = propagation.TraceContext{}
	}
	if t.destination == nil {
		t.destination = func(topic string) (string, string) { return topic, topic }
	}
	return t
}

// publishSpans are the spans of one pipelined chunk, nil where a message
// carried no trace context.
type publishSpans []trace.Span

// start opens a publish span for every message whose metadata carries a
// trace context, as a child of it, and writes the span's own context into
// a copy of the metadata (rows share their headers map with nothing else,
// but the copy keeps the row as read).
func (t *tracing) start(topics []string, msgs []*message.Message) publishSpans {
	if t == nil {
		return nil
	}
	var spans publishSpans
	for i, msg := range msgs {
		if len(msg.Metadata) == 0 {
			continue
		}
		parent := t.prop.Extract(context.Background(), propagation.MapCarrier(msg.Metadata))
		if !trace.SpanContextFromContext(parent).IsValid() {
			continue
		}
		exchange, key := t.destination(topics[i])
		ctx, span := t.tracer.Start(parent, "publish "+exchange, trace.WithSpanKind(trace.SpanKindProducer))
		if span.IsRecording() {
			// A span of an unsampled trace (every one without export)
			// records nothing: its attributes are not built.
			span.SetAttributes(
				semconv.MessagingSystemRabbitMQ,
				semconv.MessagingOperationTypeSend,
				semconv.MessagingOperationName("publish"),
				semconv.MessagingDestinationName(exchange),
				semconv.MessagingRabbitMQDestinationRoutingKey(key),
				semconv.MessagingMessageID(msg.UUID),
				semconv.MessagingMessageBodySize(len(msg.Payload)),
			)
		}
		md := maps.Clone(msg.Metadata)
		t.prop.Inject(ctx, propagation.MapCarrier(md))
		msg.Metadata = md
		if spans == nil {
			spans = make(publishSpans, len(msgs))
		}
		spans[i] = span
	}
	return spans
}

// end ends the spans once the publisher returned: the first confirmed
// messages succeeded, the rest failed with err (or were not attempted).
func (s publishSpans) end(confirmed int, err error) {
	for i, span := range s {
		if span == nil {
			continue
		}
		if i >= confirmed {
			if err != nil {
				span.RecordError(err)
			}
			span.SetAttributes(semconv.ErrorTypeOther)
			span.SetStatus(codes.Error, "not confirmed by the broker")
		}
		span.End()
	}
}
