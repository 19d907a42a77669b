package pipeline

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
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

// newEvent is the lifecycle event of kind for req's attempt, at now.
// duration is set for SUCCEEDED and FAILED (and DEAD, whose last attempt
// took it); reason is made a valid protobuf string.
func newEvent(kind eventsv1.ExecutionEventKind, req *dispatchv1.DispatchRequest, now time.Time, duration time.Duration, reason, traceID string) *eventsv1.ExecutionEvent {
	ev := &eventsv1.ExecutionEvent{
		EventId:        uuid.Must(uuid.NewV7()).String(),
		Kind:           kind,
		ExecutionId:    req.GetExecutionId(),
		JobId:          req.GetJobId(),
		Namespace:      req.GetNamespace(),
		Attempt:        req.GetAttempt(),
		NominalTime:    req.GetNominalTime(),
		OccurTime:      timestamppb.New(now),
		TriggerKind:    req.GetTriggerKind(),
		Reason:         store.CleanText(reason),
		TraceId:        traceID,
		JobDisplayName: req.GetJobDisplayName(),
		JobLabels:      req.GetJobLabels(),
	}
	switch kind {
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD:
		ev.Duration = durationpb.New(duration)
	}
	return ev
}

// publishEvents is the flush of the event batcher: one ExecutionEventBatch
// message to the executions exchange, routed by its first event's kind.
func (p *Pipeline) publishEvents(ctx context.Context, events []*eventsv1.ExecutionEvent) error {
	body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	if err != nil {
		return fmt.Errorf("encode %d lifecycle events: %w", len(events), err)
	}
	msg := message.NewMessage(uuid.Must(uuid.NewV7()).String(), body)
	msg.SetContext(ctx)
	topic := broker.Route(p.opts.ExecutionsExchange, EventRoutingKey(events[0].GetKind()))
	if err := p.opts.Publisher.Publish(topic, msg); err != nil {
		p.metrics.publishFailures.WithLabelValues("events").Inc()
		return fmt.Errorf("publish %d lifecycle events: %w", len(events), err)
	}
	p.metrics.eventBatches.Inc()
	p.metrics.events.Add(float64(len(events)))
	return nil
}
