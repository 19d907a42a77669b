package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
)

// limitedEvent is jobEvent (every minute from anchor) with max_runs n,
// occurring at occur.
func limitedEvent(id string, version int64, kind eventsv1.JobEventKind, anchor time.Time, n int64, occur time.Time) *eventsv1.JobEvent {
	ev := jobEvent(id, version, kind, anchor, time.Minute)
	ev.Job.MaxRuns = n
	ev.OccurTime = timestamppb.New(occur)
	return ev
}

// slotEvent is an execution event of job's scheduled slot at nominal.
func slotEvent(job string, kind eventsv1.ExecutionEventKind, nominal time.Time) *eventsv1.ExecutionEvent {
	return &eventsv1.ExecutionEvent{
		EventId: uuid.NewString(), Kind: kind, ExecutionId: job + nominal.String(), JobId: job, Namespace: "ns",
		Attempt: 1, NominalTime: timestamppb.New(nominal), OccurTime: timestamppb.New(nominal),
		TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
	}
}

func runsSeen(t *testing.T, pool *pgxpool.Pool, id string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT runs_seen FROM jobs WHERE id = $1`, id).Scan(&n))
	return n
}

// TestLimitedJobLeavesTheWatchdog: alerting counts a limited job's runs
// from the execution events, each slot once however many events it has
// (missed slots and manual runs not at all), and once the job has run its
// max_runs the watchdog no longer expects a slot of it, so nothing is
// reported missing; raising the limit makes it watched again.
func TestLimitedJobLeavesTheWatchdog(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	slot := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	none := rules.NewSet(nil)
	rule := &rules.Rule{ID: uuid.NewString(), Namespace: "ns", Kind: rules.MissedSchedule, Tolerance: 10 * time.Second}
	watching := rules.NewSet([]*rules.Rule{rule})

	_, err := s.ApplyJobEvents(ctx, []*eventsv1.JobEvent{
		limitedEvent("lim", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, 2, t0),
	}, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, slot(1), readJob(t, pool, "lim").NextSlot.UTC())

	apply := func(events ...*eventsv1.ExecutionEvent) {
		t.Helper()
		_, err := s.ApplyExecutions(ctx, events, none, t0)
		require.NoError(t, err)
	}
	apply(slotEvent("lim", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, slot(1)),
		slotEvent("lim", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, slot(1)))
	apply(slotEvent("lim", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, slot(1))) // redelivered
	manual := slotEvent("lim", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, slot(1).Add(20*time.Second))
	manual.TriggerKind = dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL
	apply(manual, slotEvent("lim", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED, slot(2)))
	require.EqualValues(t, 1, runsSeen(t, pool, "lim"), "one run: slot 1's events count once, manual runs and missed slots not at all")
	require.NotNil(t, readJob(t, pool, "lim").CheckTime, "still watched")

	apply(slotEvent("lim", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, slot(3)))
	require.EqualValues(t, 2, runsSeen(t, pool, "lim"))
	j := readJob(t, pool, "lim")
	require.Nil(t, j.NextSlot, "the job has run its limit")
	require.Nil(t, j.CheckTime)
	res, err := s.Watch(ctx, watching, slot(30), 100)
	require.NoError(t, err)
	require.Zero(t, res.Checked)

	// Raised at 12:10: watched again from its next slot, 12:11.
	_, err = s.ApplyJobEvents(ctx, []*eventsv1.JobEvent{
		limitedEvent("lim", 2, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, t0, 3, slot(10)),
	}, slot(10))
	require.NoError(t, err)
	require.EqualValues(t, 2, runsSeen(t, pool, "lim"), "a changed limit keeps the count")
	require.Equal(t, slot(11), readJob(t, pool, "lim").NextSlot.UTC())
	res, err = s.Watch(ctx, watching, slot(11).Add(11*time.Second), 100)
	require.NoError(t, err)
	require.Equal(t, 1, res.Missed, "a job below its limit missing a slot is reported")
}

// TestLimitedRunsCountFromTheLimit: a job given a limit by an update counts
// the runs after that update only; the runs seen before a job's first
// event count when that event gives it a limit; removing the limit clears
// the count.
func TestLimitedRunsCountFromTheLimit(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	slot := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	none := rules.NewSet(nil)
	apply := func(events ...*eventsv1.ExecutionEvent) {
		t.Helper()
		_, err := s.ApplyExecutions(ctx, events, none, t0)
		require.NoError(t, err)
	}
	jobs := func(events ...*eventsv1.JobEvent) {
		t.Helper()
		_, err := s.ApplyJobEvents(ctx, events, slot(5))
		require.NoError(t, err)
	}

	// Unlimited, then limited at 12:02:30: slot 2 does not count, slot 3
	// does (its events may come before or after the update's).
	jobs(limitedEvent("u", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, 0, t0))
	apply(slotEvent("u", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, slot(1)),
		slotEvent("u", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, slot(2)))
	require.Zero(t, runsSeen(t, pool, "u"), "runs of an unlimited job are not counted")
	jobs(limitedEvent("u", 2, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, t0, 5, slot(2).Add(30*time.Second)))
	apply(slotEvent("u", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, slot(2)),
		slotEvent("u", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, slot(3)))
	require.EqualValues(t, 1, runsSeen(t, pool, "u"))
	jobs(limitedEvent("u", 3, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, t0, 0, slot(4)))
	require.Zero(t, runsSeen(t, pool, "u"), "no limit, no count")

	// Execution events before the job's first event: counted once the
	// CREATED event says the job has a limit.
	apply(slotEvent("early", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, slot(1)),
		slotEvent("early", eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, slot(2)))
	jobs(limitedEvent("early", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, 2, t0))
	require.EqualValues(t, 2, runsSeen(t, pool, "early"))
	require.Nil(t, readJob(t, pool, "early").NextSlot, "it has run its limit")
}
