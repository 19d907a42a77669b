package evaluate

import (
	"context"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/telemetry"
)

// eventSpans records, in each event's own execution trace (from the trace
// context the event carries; events without one get no span), a span
// "alerting.evaluate" for its evaluation, which ran from start to now in
// one transaction with the rest of the batch (err nil: committed). The
// span links to the consumer span of the message that carried the event
// (its Context); a broker message carries events of many executions, so
// that span cannot be in all of their traces. byMessage holds each
// message's events.
func (e *Evaluator) eventSpans(msgs []*message.Message, byMessage [][]*eventsv1.ExecutionEvent, start time.Time, err error) {
	for i, events := range byMessage {
		e.messageEventSpans(msgs[i].Context(), events, start, err)
	}
}

func (e *Evaluator) messageEventSpans(ctx context.Context, events []*eventsv1.ExecutionEvent, start time.Time, err error) {
	end := time.Now()
	var links []trace.Link
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		links = []trace.Link{{SpanContext: sc}}
	}
	for _, ev := range events {
		if len(ev.GetTraceContext()) == 0 {
			continue
		}
		parent := telemetry.ExtractMap(context.Background(), e.opts.Propagator, ev.GetTraceContext())
		if !trace.SpanContextFromContext(parent).IsValid() {
			continue
		}
		_, span := e.tracer.Start(parent, "alerting.evaluate",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithTimestamp(start),
			trace.WithLinks(links...))
		if !span.IsRecording() {
			// Unsampled (the usual case without export): the span only
			// carries ids, so its attributes would be built for nothing.
			span.End()
			continue
		}
		span.SetAttributes(append(broker.ProcessAttributes(e.opts.Exchange, e.opts.Queue, ev.GetEventId()),
			attribute.String("cronmesh.execution.id", ev.GetExecutionId()),
			attribute.String("cronmesh.job.id", ev.GetJobId()),
			attribute.String("cronmesh.event.kind", strings.ToLower(strings.TrimPrefix(ev.GetKind().String(), "EXECUTION_EVENT_KIND_"))),
			attribute.Int("cronmesh.attempt", int(ev.GetAttempt())),
		)...)
		if err != nil {
			span.RecordError(err)
			span.SetAttributes(semconv.ErrorTypeOther)
			span.SetStatus(codes.Error, "evaluation failed; the message is redelivered")
		}
		span.End(trace.WithTimestamp(end))
	}
}
