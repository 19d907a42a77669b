package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
)

// TestPausingJobsFollowsEveryWrite: PausingJobs names the jobs whose
// pause_after_dead_letters is set as created, as updated, and as a row
// written before the option had its column says in its spec (whose
// column it then fills in); jobs without the option, unknown ids and
// non-UUIDs are not named.
func TestPausingJobsFollowsEveryWrite(t *testing.T) {
	t.Parallel()
	s, _, pool := newStoreWithPool(t)
	ctx := context.Background()
	newJob := func(pauseAfter int32) *registryv1.Job {
		return &registryv1.Job{
			Id: uuid.Must(uuid.NewV7()).String(), DisplayName: "job", PauseAfterDeadLetters: pauseAfter,
			Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 * * * *"}},
		}
	}
	watched, plain, raised, legacy, legacyPlain := newJob(3), newJob(0), newJob(0), newJob(2), newJob(0)
	_, err := s.Create(ctx, "ns", []store.NewJob{{Job: watched}, {Job: plain}, {Job: raised}, {Job: legacy}, {Job: legacyPlain}})
	require.NoError(t, err)
	ids := []string{watched.Id, plain.Id, raised.Id, legacy.Id, legacyPlain.Id, uuid.NewString(), "not-a-uuid"}

	got, err := s.PausingJobs(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{watched.Id: true, legacy.Id: true}, got)

	_, err = s.Update(ctx, "ns", raised.Id, "", eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, func(j *registryv1.Job) error {
		j.PauseAfterDeadLetters = 4
		return nil
	})
	require.NoError(t, err)
	_, err = s.Update(ctx, "ns", watched.Id, "", eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, func(j *registryv1.Job) error {
		j.PauseAfterDeadLetters = 0
		return nil
	})
	require.NoError(t, err)
	got, err = s.PausingJobs(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{raised.Id: true, legacy.Id: true}, got)

	// Rows as a registry before the column wrote them: only the spec tells.
	_, err = pool.Exec(ctx, `UPDATE jobs SET pause_after_dead_letters = NULL WHERE id = ANY($1::uuid[])`,
		[]string{legacy.Id, legacyPlain.Id})
	require.NoError(t, err)
	got, err = s.PausingJobs(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{raised.Id: true, legacy.Id: true}, got)
	var filled []int32
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT array_agg(pause_after_dead_letters ORDER BY id = $1 DESC) FROM jobs WHERE id = ANY(ARRAY[$1, $2]::uuid[])`,
		legacy.Id, legacyPlain.Id).Scan(&filled))
	require.Equal(t, []int32{2, 0}, filled, "the column is filled in from the spec")
	got, err = s.PausingJobs(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{raised.Id: true, legacy.Id: true}, got)
}
