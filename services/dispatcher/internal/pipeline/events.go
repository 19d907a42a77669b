package pipeline

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// KindName is the lower-case name of an event kind as routing keys and
// metrics spell it: "started", "succeeded", "failed", "dead", "cancelled",
// "missed"; "unspecified" otherwise.
func KindName(k eventsv1.ExecutionEventKind) string {
	name, ok := strings.CutPrefix(k.String(), "EXECUTION_EVENT_KIND_")
	if !ok {
		return "unspecified"
	}
	return strings.ToLower(name)
}

// EventRoutingKey is the routing key of a batch whose first event is of
// kind k: "execution.<kind>".
func EventRoutingKey(k eventsv1.ExecutionEventKind) string { return "execution." + KindName(k) }

// MaxEventExcerpt caps the response excerpt of a lifecycle event. Events
// go out for every attempt, so they carry a short excerpt; the dead-letter
// record keeps deliver.MaxExcerpt.
const MaxEventExcerpt = 4 << 10

// attemptInfo is what an event knows of its attempt: nothing for
// CANCELLED, the start for STARTED, the outcome for the others.
type attemptInfo struct {
	start    time.Time // zero: no attempt was made
	duration time.Duration
	status   int
	excerpt  string
	// retry is the delay before the next attempt; 0: none scheduled.
	retry time.Duration
}

// newEvent is the lifecycle event of kind for req's attempt, at now.
// duration is set for SUCCEEDED and FAILED (and DEAD, whose last attempt
// took it); start_time on every event of an attempt (consumers may see the
// outcome before the start, and a quick attempt has no STARTED: its
// outcome carries all a STARTED would); reason and excerpt are made valid protobuf
// strings, the excerpt cut to MaxEventExcerpt on a character boundary.
func newEvent(kind eventsv1.ExecutionEventKind, req *dispatchv1.DispatchRequest, now time.Time, a attemptInfo, reason, traceID string) *eventsv1.ExecutionEvent {
	ev := &eventsv1.ExecutionEvent{
		EventId:         uuid.Must(uuid.NewV7()).String(),
		Kind:            kind,
		ExecutionId:     req.GetExecutionId(),
		JobId:           req.GetJobId(),
		Namespace:       req.GetNamespace(),
		Attempt:         req.GetAttempt(),
		NominalTime:     req.GetNominalTime(),
		OccurTime:       timestamppb.New(now),
		TriggerKind:     req.GetTriggerKind(),
		Reason:          store.CleanText(reason),
		TraceId:         traceID,
		JobDisplayName:  req.GetJobDisplayName(),
		JobLabels:       req.GetJobLabels(),
		FireTime:        req.GetFireTime(),
		ResponseStatus:  int32(a.status),
		ResponseExcerpt: truncateUTF8(store.CleanText(a.excerpt), MaxEventExcerpt),
		// Every event carries them, so that the history has them whichever
		// event of the execution it sees first.
		OverriddenFields:   req.GetOverriddenFields(),
		RerunOfExecutionId: req.GetRerunOfExecutionId(),
	}
	if !a.start.IsZero() {
		ev.StartTime = timestamppb.New(a.start)
	}
	switch kind {
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD:
		ev.Duration = durationpb.New(a.duration)
	}
	if kind == eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED && a.retry > 0 {
		ev.RetryScheduled = true
		ev.RetryDelay = durationpb.New(a.retry)
	}
	return ev
}

// truncateUTF8 cuts valid UTF-8 s to at most n bytes without splitting a
// character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// publishEvents is the flush of the event batcher: one ExecutionEventBatch
// message to the executions exchange, routed by its first event's kind.
func (p *Pipeline) publishEvents(ctx context.Context, events []*eventsv1.ExecutionEvent) error {
	body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	if err != nil {
		return fmt.Errorf("encode %d lifecycle events: %w", len(events), err)
	}
	msg := message.NewMessage(uuid.Must(uuid.NewV7()).String(), body)
	key := EventRoutingKey(events[0].GetKind())
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
				attribute.String("cronmesh.event.kind", KindName(ev.GetKind())),
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
