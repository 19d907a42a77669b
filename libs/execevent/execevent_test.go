package execevent_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// TestEventExcerpt: an event's excerpt is valid UTF-8 of at most
// execevent.MaxExcerpt bytes, cut before a character that would straddle the
// limit.
func TestEventExcerpt(t *testing.T) {
	t.Parallel()
	euro := "€" // 3 bytes
	tests := []struct {
		name, in, want string
	}{
		{"short", "ok", "ok"},
		{"exactly the cap", strings.Repeat("a", execevent.MaxExcerpt), strings.Repeat("a", execevent.MaxExcerpt)},
		{"cut between characters", strings.Repeat("a", execevent.MaxExcerpt-1) + euro, strings.Repeat("a", execevent.MaxExcerpt-1)},
		{"invalid bytes replaced first", "a\xffb\x00", "a\uFFFDb\uFFFD"},
		{"64 KiB of multi-byte characters", strings.Repeat(euro, 64<<10/3), strings.Repeat(euro, execevent.MaxExcerpt/3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := execevent.New(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, &dispatchv1.DispatchRequest{}, time.Now(),
				execevent.Attempt{Start: time.Now(), Status: 500, Excerpt: tt.in}, "", "")
			require.Equal(t, tt.want, ev.ResponseExcerpt)
			require.LessOrEqual(t, len(ev.ResponseExcerpt), execevent.MaxExcerpt)
			require.True(t, utf8.ValidString(ev.ResponseExcerpt))
			require.False(t, ev.RetryScheduled, "no retry given")
		})
	}
}

// TestEventCarriesTheRunsOrigin: every event of an execution carries what
// its request says of a manual run (the execution it re-runs, what it
// overrode), whatever the kind, so the history has them from the first
// event it sees.
func TestEventCarriesTheRunsOrigin(t *testing.T) {
	t.Parallel()
	req := &dispatchv1.DispatchRequest{
		ExecutionId: "0190f0c4-6c1e-7a00-8000-000000000002", RerunOfExecutionId: "0190f0c4-6c1e-7a00-8000-000000000001",
		OverriddenFields: []string{"target", "headers"},
	}
	for _, kind := range []eventsv1.ExecutionEventKind{
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED,
	} {
		ev := execevent.New(kind, req, time.Now(), execevent.Attempt{}, "", "")
		require.Equal(t, req.RerunOfExecutionId, ev.RerunOfExecutionId, kind.String())
		require.Equal(t, req.OverriddenFields, ev.OverriddenFields, kind.String())
	}
	plain := execevent.New(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, &dispatchv1.DispatchRequest{}, time.Now(), execevent.Attempt{}, "", "")
	require.Empty(t, plain.RerunOfExecutionId)
	require.Empty(t, plain.OverriddenFields)
}

// TestOutcomeCarriesWhatStartedTold: an attempt quicker than
// the dispatcher's --started-event-after emits its outcome alone, so every field a STARTED of
// the attempt sets is set alike on each outcome (but the event's own id,
// kind and occur time).
func TestOutcomeCarriesWhatStartedTold(t *testing.T) {
	t.Parallel()
	nominal := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	req := &dispatchv1.DispatchRequest{
		ExecutionId: "0190f0c4-6c1e-7a00-8000-000000000002", JobId: "0190f0c4-6c1e-7a00-8000-000000000003", Namespace: "alpha", Attempt: 2,
		NominalTime: timestamppb.New(nominal), FireTime: timestamppb.New(nominal.Add(time.Millisecond)),
		TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP, JobDisplayName: "nightly report", JobLabels: map[string]string{"team": "data"},
		RerunOfExecutionId: "0190f0c4-6c1e-7a00-8000-000000000001", OverriddenFields: []string{"target"},
	}
	start := nominal.Add(2 * time.Millisecond)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	started := execevent.New(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, req, start, execevent.Attempt{Start: start}, "", traceID)
	own := map[protoreflect.Name]bool{"event_id": true, "kind": true, "occur_time": true}
	for _, kind := range []eventsv1.ExecutionEventKind{
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED,
	} {
		out := execevent.New(kind, req, start.Add(time.Second), execevent.Attempt{Start: start, Duration: time.Second, Status: 500}, "HTTP 500", traceID)
		var checked int
		started.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if own[fd.Name()] {
				return true
			}
			checked++
			require.True(t, out.ProtoReflect().Has(fd), "%s lacks %s", kind, fd.Name())
			require.True(t, v.Equal(out.ProtoReflect().Get(fd)), "%s: %s differs", kind, fd.Name())
			return true
		})
		require.GreaterOrEqual(t, checked, 12, "the fields of the request and the start were compared")
	}
}

// TestRoutingKey: a batch is routed by its first event's kind, and marked
// for the pause on failure when any of its events, not only the first, is
// of a job with pause_after_dead_letters: the registry binds only the
// marked keys and must still see every such event.
func TestRoutingKey(t *testing.T) {
	t.Parallel()
	event := func(kind eventsv1.ExecutionEventKind, pauseAfter int32) *eventsv1.ExecutionEvent {
		return execevent.New(kind, &dispatchv1.DispatchRequest{PauseAfterDeadLetters: pauseAfter}, time.Now(), execevent.Attempt{}, "", "")
	}
	succeeded, dead := eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD
	require.Equal(t, int32(3), event(dead, 3).GetPauseAfterDeadLetters(), "the event carries the request's option")
	require.Equal(t, "execution.succeeded", execevent.RoutingKey([]*eventsv1.ExecutionEvent{event(succeeded, 0), event(dead, 0)}))
	require.Equal(t, "execution.dead.pause-on-failure", execevent.RoutingKey([]*eventsv1.ExecutionEvent{event(dead, 2)}))
	require.Equal(t, "execution.succeeded.pause-on-failure",
		execevent.RoutingKey([]*eventsv1.ExecutionEvent{event(succeeded, 0), event(succeeded, 0), event(dead, 1)}))
}

// TestPauseOnFailureBindingKeyTakesTheMarkedBatches: a queue bound with
// PauseOnFailureBindingKey, as the registry's is, receives every batch
// RoutingKey marks, whatever its first event's kind, and no other.
func TestPauseOnFailureBindingKeyTakesTheMarkedBatches(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "executions")
	queue := amqptest.DeclareTopicQueue(t, exchange, execevent.PauseOnFailureBindingKey)
	batch := func(kind eventsv1.ExecutionEventKind, pauseAfter int32) string {
		return execevent.RoutingKey([]*eventsv1.ExecutionEvent{
			execevent.New(kind, &dispatchv1.DispatchRequest{PauseAfterDeadLetters: pauseAfter}, time.Now(), execevent.Attempt{}, "", ""),
		})
	}
	ch := amqptest.Channel(t)
	keys := []string{
		batch(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD, 0),
		batch(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD, 1),
		batch(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, 0),
		batch(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, 5),
	}
	// Published in order on one channel: an unmarked batch the binding
	// took would be queued ahead of the marked one after it.
	for _, key := range keys {
		require.NoError(t, ch.PublishWithContext(t.Context(), exchange, key, false, false, amqp091.Publishing{Body: []byte(key)}))
	}
	var got []string
	for _, d := range amqptest.Consume(t, queue, 2, 10*time.Second) {
		got = append(got, string(d.Body))
	}
	require.Equal(t, []string{"execution.dead.pause-on-failure", "execution.succeeded.pause-on-failure"}, got)
}
