package ingest

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
)

// tracedEvent is an event that carries its execution's trace context.
type tracedEvent struct {
	parent      context.Context // holds the remote span context of the event's creation
	eventID     string
	executionID string
	kind        string
	attempt     int
}

// tracedEvent reads pb's trace context; false when it has none.
func (c *Consumer) tracedEvent(ctx context.Context, pb *eventsv1.ExecutionEvent) (tracedEvent, bool) {
	parent, ok := broker.EventParent(context.WithoutCancel(ctx), c.opts.Propagator, pb.GetTraceContext())
	if !ok {
		return tracedEvent{}, false
	}
	return tracedEvent{
		parent: parent, eventID: pb.GetEventId(), executionID: pb.GetExecutionId(),
		kind: strings.ToLower(strings.TrimPrefix(pb.GetKind().String(), "EXECUTION_EVENT_KIND_")), attempt: int(pb.GetAttempt()),
	}, true
}

// eventSpans records, in each traced event's own execution trace, a span
// "history.write" for its part in the batch write that ends now (err nil:
// committed). A batch is one transaction for events of many executions, so
// the transaction and its SQL spans live in the batch's span (batch), which
// each event's span links to: the execution's trace shows when its event
// was written and where to find the statement.
func (c *Consumer) eventSpans(batch []inHand, batchSpan trace.Span, start time.Time, err error) {
	spans := broker.EventSpans{
		Tracer: c.tracer, Name: "history.write", Start: start, End: time.Now(),
		Links: []trace.Link{{SpanContext: batchSpan.SpanContext()}}, Err: err, Failed: "not written; requeued",
	}
	for _, h := range batch {
		for _, ev := range h.traced {
			spans.Record(ev.parent, func() []attribute.KeyValue {
				return append(broker.ProcessAttributes(c.opts.Exchange, c.opts.Queue, ev.eventID),
					semconv.DBSystemNamePostgreSQL,
					semconv.DBOperationName("INSERT"),
					semconv.DBCollectionName("executions"),
					attribute.String("cronmesh.execution.id", ev.executionID),
					attribute.String("cronmesh.event.kind", ev.kind),
					attribute.Int("cronmesh.attempt", ev.attempt),
				)
			})
		}
	}
}
