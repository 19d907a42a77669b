// Package execevent builds the lifecycle events of an execution's attempts
// (cronmesh.events.v1.ExecutionEvent) as the dispatcher publishes them. It
// is the one definition of what an event carries: the dispatcher emits
// them, and the benchmarks that feed history and alerting without a
// dispatcher make the same events.
package execevent

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
)

// MaxExcerpt caps the response excerpt of an event. Events go out for
// every attempt, so they carry a short excerpt; the dead-letter record
// keeps the dispatcher's longer one.
const MaxExcerpt = 4 << 10

// Attempt is what an event knows of its attempt: nothing for CANCELLED,
// SKIPPED and BUFFERED, the start for STARTED, the outcome for the others.
type Attempt struct {
	Start    time.Time // zero: no attempt was made
	Duration time.Duration
	Status   int
	Excerpt  string
	// Retry is the delay before the next attempt; 0: none scheduled.
	Retry time.Duration
}

// New is the lifecycle event of kind for req's attempt a, at now.
// Duration is set for SUCCEEDED and FAILED (and DEAD, whose last attempt
// took it); start_time on every event of an attempt (consumers may see the
// outcome before the start, and a quick attempt has no STARTED: its
// outcome carries all a STARTED would); reason and excerpt are made valid
// protobuf strings (CleanText), the excerpt cut to MaxExcerpt on a
// character boundary. The trace context is the emitter's to add.
func New(kind eventsv1.ExecutionEventKind, req *dispatchv1.DispatchRequest, now time.Time, a Attempt, reason, traceID string) *eventsv1.ExecutionEvent {
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
		Reason:          CleanText(reason),
		TraceId:         traceID,
		JobDisplayName:  req.GetJobDisplayName(),
		JobLabels:       req.GetJobLabels(),
		FireTime:        req.GetFireTime(),
		ResponseStatus:  int32(a.Status),
		ResponseExcerpt: truncateUTF8(CleanText(a.Excerpt), MaxExcerpt),
		// Every event carries them, so that the history has them whichever
		// event of the execution it sees first.
		OverriddenFields:   req.GetOverriddenFields(),
		RerunOfExecutionId: req.GetRerunOfExecutionId(),
		// It decides the batch's routing key (RoutingKey).
		PauseAfterDeadLetters: req.GetPauseAfterDeadLetters(),
	}
	if !a.Start.IsZero() {
		ev.StartTime = timestamppb.New(a.Start)
	}
	switch kind {
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD:
		ev.Duration = durationpb.New(a.Duration)
	}
	if kind == eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED && a.Retry > 0 {
		ev.RetryScheduled = true
		ev.RetryDelay = durationpb.New(a.Retry)
	}
	return ev
}

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

// PauseOnFailureBindingKey takes the batches that hold an event of a job
// with pause_after_dead_letters (see RoutingKey): the registry's pause on
// failure binds it, and so reads none of the other jobs' events.
const PauseOnFailureBindingKey = "execution.*." + pauseOnFailureSuffix

const pauseOnFailureSuffix = "pause-on-failure"

// RoutingKey is the routing key of a batch of events: "execution.<kind>"
// of its first event, and "execution.<kind>.pause-on-failure" when any
// event of the batch has pause_after_dead_letters. "execution.#" takes
// every batch.
func RoutingKey(batch []*eventsv1.ExecutionEvent) string {
	key := "execution." + KindName(batch[0].GetKind())
	for _, ev := range batch {
		if ev.GetPauseAfterDeadLetters() > 0 {
			return key + "." + pauseOnFailureSuffix
		}
	}
	return key
}

// CleanText makes s a valid protobuf and PostgreSQL text: invalid UTF-8
// and NUL bytes become U+FFFD. Reasons and response excerpts come from
// targets, which may answer anything.
func CleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
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
