package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
)

// TestJobEventsInvalidAmongValid: messages that can never be applied (not
// a JobEvent, no job id, a schedule libs/jobspec refuses) are dropped
// without holding back the valid events gathered with them.
func TestJobEventsInvalidAmongValid(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UTC().Truncate(time.Minute)
	a := startAlerting(t, fakeClock(clock.NewFake(t0)))
	a.publishJobBody(t, []byte("not a job event \xff\xff"))
	noID, err := proto.Marshal(&eventsv1.JobEvent{Kind: eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, Version: 1, Job: &registryv1.Job{Namespace: "alpha"}})
	require.NoError(t, err)
	a.publishJobBody(t, noID)
	badSchedule, err := proto.Marshal(&eventsv1.JobEvent{
		Kind: eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, Version: 1,
		Job: &registryv1.Job{
			Id: "job-bad", Namespace: "alpha", CreateTime: timestamppb.New(t0),
			Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{Every: durationpb.New(-time.Minute)}}},
		},
	})
	require.NoError(t, err)
	a.publishJobBody(t, badSchedule)
	for _, id := range []string{"job-1", "job-2", "job-3"} {
		a.publishJob(t, id, 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, false)
	}
	a.publishJob(t, "job-1", 2, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, t0, false)
	// Two batches may commit in either order: job-1's version 1 is
	// upserted, or stale behind version 2. Every valid event is applied
	// either way.
	require.Eventually(t, func() bool { return a.jobEvents(t, "upserted")+a.jobEvents(t, "stale") == 4 }, 15*time.Second, 10*time.Millisecond)
	for id, version := range map[string]int64{"job-1": 2, "job-2": 1, "job-3": 1} {
		r, ok := a.job(t, id)
		require.True(t, ok, id)
		require.Equal(t, version, r.version, id)
		require.NotNil(t, r.nextSlot, id)
	}
	_, ok := a.job(t, "job-bad")
	require.False(t, ok, "an invalid event writes no row")
}

// TestJobEventsSurviveADatabaseFailure: while every write to the jobs table
// fails (a trigger raises, after the batch locked its rows), no message is
// acknowledged and nothing is written; once the database accepts writes
// again, every event is applied, the newest version of each job winning.
func TestJobEventsSurviveADatabaseFailure(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UTC().Truncate(time.Minute)
	a := startAlerting(t, fakeClock(clock.NewFake(t0)))
	ctx := context.Background()
	_, err := a.app.Pool().Exec(ctx, `
		CREATE SEQUENCE job_write_failures;
		CREATE FUNCTION fail_job_writes() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM nextval('job_write_failures'); -- not rolled back with the transaction
		    RAISE EXCEPTION 'injected failure';
		END $$;
		CREATE TRIGGER fail_job_writes BEFORE INSERT OR UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION fail_job_writes();`)
	require.NoError(t, err)

	want := map[string]int64{}
	for i, id := range []string{"job-a", "job-b", "job-c", "job-d", "job-e"} {
		// Out of order: the newest version first, then the older ones.
		newest := int64(i + 2)
		a.publishJob(t, id, newest, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, t0, false)
		for v := int64(1); v < newest; v++ {
			a.publishJob(t, id, v, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, false)
		}
		want[id] = newest
	}
	// Several failed attempts: the batches were requeued and redelivered.
	require.Eventually(t, func() bool {
		var failures int64
		err := a.app.Pool().QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM job_write_failures`).Scan(&failures)
		return err == nil && failures >= 3
	}, 15*time.Second, 10*time.Millisecond, "the writes are attempted and fail")
	var rows int
	require.NoError(t, a.app.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&rows))
	require.Zero(t, rows)
	require.Zero(t, a.jobEvents(t, "upserted")+a.jobEvents(t, "stale"), "no event counted while its batch failed")

	_, err = a.app.Pool().Exec(ctx, `DROP TRIGGER fail_job_writes ON jobs`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for id, version := range want {
			if r, ok := a.job(t, id); !ok || r.version != version || r.nextSlot == nil {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "every job at its newest version once the database is back")
	// Every event was delivered again and read: 20 events in all.
	require.Eventually(t, func() bool { return a.jobEvents(t, "upserted")+a.jobEvents(t, "stale") == 20 },
		15*time.Second, 10*time.Millisecond)
}
