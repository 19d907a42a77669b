// Package dispatchreq builds the DispatchRequest the trigger publishes for
// one slot of a job. It is one definition so that what imitates the
// trigger's messages (the benchmarks' broker ceiling, which must send
// messages of the same size) cannot drift from what the trigger sends.
package dispatchreq

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// Slot is one slot of a job to dispatch.
type Slot struct {
	ExecutionID string
	JobID       string
	Version     int64 // the job version the slot was computed from
	Nominal     time.Time
	Fire        time.Time
	Kind        dispatchv1.TriggerKind
	// NextSlotFire is when the job's next slot fires (its nominal time
	// plus the job's spread offset), for a scheduled or catch-up slot;
	// zero for other kinds and for the schedule's last slot. It bounds the
	// execution's retries when the job stops retries at its next slot.
	NextSlotFire time.Time
	// NotBefore is the slot's firing time when the trigger fires it ahead
	// of it; zero otherwise. The dispatcher holds the request until then.
	NotBefore time.Time
	// RerunOf is the execution a manual run re-runs (RerunExecution);
	// empty otherwise.
	RerunOf string
	// Overridden names what a manual run's request overrode of the job
	// ("target", "body", "headers"); never values.
	Overridden []string
}

// New is the first attempt's request for slot of job. It carries the job's
// namespace, target, retry policy, overlap policy, priority, display name,
// labels and pause_after_dead_letters, so that the dispatcher, the history,
// the alerting and the registry's pause on failure need not read the
// registry to deliver, describe and count it, and the execution's deadlines
// (execution_deadline from the nominal time; the next slot's firing time
// when the job stops retries at its next slot), so that the dispatcher
// enforces them without knowing the schedule.
func New(job *registryv1.Job, slot Slot) *dispatchv1.DispatchRequest {
	req := &dispatchv1.DispatchRequest{
		ExecutionId:    slot.ExecutionID,
		JobId:          slot.JobID,
		Namespace:      job.GetNamespace(),
		Attempt:        1,
		NominalTime:    timestamppb.New(slot.Nominal),
		FireTime:       timestamppb.New(slot.Fire),
		TriggerKind:    slot.Kind,
		Target:         job.GetTarget(),
		RetryPolicy:    job.GetRetryPolicy(),
		Priority:       job.GetPriority(),
		JobVersion:     slot.Version,
		JobDisplayName: job.GetDisplayName(),
		JobLabels:      job.GetLabels(),
		// The history shows them: which execution a run re-runs, and
		// what of the job it did not take from the stored definition.
		RerunOfExecutionId: slot.RerunOf,
		OverriddenFields:   slot.Overridden,
		OverlapPolicy:      job.GetOverlapPolicy(),
		// Its events carry it on and route the batches that reach the
		// registry's pause on failure.
		PauseAfterDeadLetters: job.GetPauseAfterDeadLetters(),
	}
	if d := job.GetExecutionDeadline(); d != nil {
		req.DeadlineTime = timestamppb.New(deadlineBase(slot).Add(d.AsDuration()))
	}
	if !slot.NotBefore.IsZero() {
		req.NotBefore = timestamppb.New(slot.NotBefore)
	}
	if job.GetStopRetriesAtNextSlot() && !slot.NextSlotFire.IsZero() {
		req.NextSlotTime = timestamppb.New(slot.NextSlotFire)
	}
	return req
}

// deadlineBase is the instant an execution's deadline counts from: its
// nominal time, except for a backfill, which fires long-past slots on
// purpose and would otherwise be dead-lettered before its first attempt;
// its age counts from when the backfill fired it.
func deadlineBase(slot Slot) time.Time {
	if slot.Kind == dispatchv1.TriggerKind_TRIGGER_KIND_BACKFILL {
		return slot.Fire
	}
	return slot.Nominal
}
