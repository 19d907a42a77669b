package evaluate

import (
	"context"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
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
	end := time.Now()
	for i, events := range byMessage {
		e.messageEventSpans(msgs[i].Context(), events, start, end, err)
	}
}

func (e *Evaluator) messageEventSpans(ctx context.Context, events []*eventsv1.ExecutionEvent, start, end time.Time, err error) {
	spans := broker.EventSpans{Tracer: e.tracer, Name: "alerting.evaluate", Start: start, End: end, Err: err, Failed: "evaluation failed; the message is redelivered"}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		spans.Links = []trace.Link{{SpanContext: sc}}
	}
	for _, ev := range events {
		parent, ok := broker.EventParent(context.Background(), e.opts.Propagator, ev.GetTraceContext())
		if !ok {
			continue
		}
		spans.Record(parent, func() []attribute.KeyValue {
			return append(broker.ProcessAttributes(e.opts.Exchange, e.opts.Queue, ev.GetEventId()),
				attribute.String("cronmesh.execution.id", ev.GetExecutionId()),
				attribute.String("cronmesh.job.id", ev.GetJobId()),
				attribute.String("cronmesh.event.kind", strings.ToLower(strings.TrimPrefix(ev.GetKind().String(), "EXECUTION_EVENT_KIND_"))),
				attribute.Int("cronmesh.attempt", int(ev.GetAttempt())),
			)
		})
	}
}
