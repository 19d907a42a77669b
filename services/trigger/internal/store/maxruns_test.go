package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// limited sets max_runs.
func limited(n int64) func(*registryv1.Job) {
	return func(j *registryv1.Job) { j.MaxRuns = n }
}

// fireDue plans the job's due entry at now and commits it at epoch 1,
// requiring the commit to advance it.
func (e *env) fireDue(t *testing.T, job *registryv1.Job, now time.Time) firing.Advance {
	t.Helper()
	adv, err := firing.Plan(e.due(t, job), now)
	require.NoError(t, err)
	res, err := e.store.Commit(t.Context(), fences(1), []firing.Advance{adv}, now)
	require.NoError(t, err)
	require.Equal(t, []string{job.Id}, res.Advanced)
	return adv
}

// isDue says whether the store returns job as due at all.
func (e *env) isDue(t *testing.T, job *registryv1.Job) bool {
	t.Helper()
	all, err := e.store.DueJobs(t.Context(), wholeLoads(allPartitions()), ts("2100-01-01T00:00:00Z"), 10_000)
	require.NoError(t, err)
	for _, d := range all {
		if d.JobID == job.Id {
			return true
		}
	}
	return false
}

// TestMaxRunsCountedInTheCommit: the commit that fires a slot counts it;
// missed slots and manual runs do not; the commit that reaches the limit
// completes the job, which is then never loaded; a catch-up stops at the
// limit, recording nothing after it.
func TestMaxRunsCountedInTheCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:00Z"), limited(4)) // every 5 minutes from 10:05
	e.apply(t, created(job), store.Upserted)
	require.Zero(t, e.due(t, job).RunsFired)

	e.fireDue(t, job, ts("2030-03-10T10:05:00.1Z"))
	st := e.state(t, job)
	require.EqualValues(t, 1, st.RunsFired)
	require.EqualValues(t, 4, st.MaxRuns)
	require.False(t, st.Completed())
	require.EqualValues(t, 1, e.due(t, job).RunsFired)

	// A manual run is no run of the schedule.
	e.apply(t, runEvent(job, 1, ts("2030-03-10T10:06:00Z")), store.Fired)
	require.EqualValues(t, 1, e.state(t, job).RunsFired)

	// Down until 11:29 with a one-hour catch-up window: 10:10..10:25
	// are missed (not counted), then 10:30 and 10:35 catch up and 10:40
	// reaches the limit; 10:45..11:25 are neither fired nor recorded.
	adv := e.fireDue(t, job, ts("2030-03-10T11:29:00.1Z"))
	require.True(t, adv.To.IsZero(), "the advance completes the job")
	require.EqualValues(t, 3, adv.Runs())
	st = e.state(t, job)
	require.EqualValues(t, 4, st.RunsFired)
	require.True(t, st.Completed())
	require.True(t, st.NextFire.IsZero())
	require.False(t, e.isDue(t, job), "a completed job is never loaded")

	var kinds []firing.SlotKind
	for _, l := range e.ledger(t, job.Id) {
		kinds = append(kinds, l.Kind)
	}
	require.Equal(t, []firing.SlotKind{
		firing.KindScheduled, firing.KindManual,
		firing.KindMissed, firing.KindMissed, firing.KindMissed, firing.KindMissed,
		firing.KindCatchUp, firing.KindCatchUp, firing.KindCatchUp,
	}, kinds)
	require.Equal(t, ts("2030-03-10T10:40:00Z"), e.ledger(t, job.Id)[8].Nominal)

	// ListSlots' page and the count come from one read.
	page, err := e.store.Slots(t.Context(), testNamespace, job.Id, 3, time.Time{})
	require.NoError(t, err)
	require.Len(t, page.Slots, 3)
	require.Equal(t, ts("2030-03-10T10:40:00Z"), page.Slots[0].Nominal)
	require.EqualValues(t, 4, page.RunsFired)
	require.EqualValues(t, 4, page.MaxRuns)
	require.True(t, page.Completed())
	require.False(t, page.Next.IsZero())
}

// TestMaxRunsCompareAndSet: a commit from a copy of the row whose count is
// not the row's (another node's commit counted a run meanwhile) is stale
// and writes nothing, so no run is fired or counted twice.
func TestMaxRunsCompareAndSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:00Z"), limited(2))
	e.apply(t, created(job), store.Upserted)
	d := e.due(t, job)
	d.RunsFired = 1
	adv, err := firing.Plan(d, ts("2030-03-10T10:05:00.1Z"))
	require.NoError(t, err)
	require.True(t, adv.To.IsZero(), "from the copy's count, this run completes the job")
	res, err := e.store.Commit(t.Context(), fences(1), []firing.Advance{adv}, ts("2030-03-10T10:05:00.1Z"))
	require.NoError(t, err)
	require.Equal(t, []string{job.Id}, res.Stale)
	require.Empty(t, e.ledger(t, job.Id))
	st := e.state(t, job)
	require.Zero(t, st.RunsFired)
	require.Equal(t, ts("2030-03-10T10:05:00Z"), st.NextFire)
}

// TestMaxRunsUpdates: lowering the limit to the runs fired completes the
// job; raising it resumes the job from its next slot after the update;
// other updates keep the count; removing the limit clears it; giving an
// unlimited job a limit counts the runs fired after that update.
func TestMaxRunsUpdates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:00Z"), limited(5))
	e.apply(t, created(job), store.Upserted)
	e.fireDue(t, job, ts("2030-03-10T10:05:00.1Z"))
	e.fireDue(t, job, ts("2030-03-10T10:10:00.1Z"))
	require.EqualValues(t, 2, e.state(t, job).RunsFired)

	version := int64(1)
	update := func(occur string, mod func(*registryv1.Job)) store.JobState {
		t.Helper()
		version++
		mod(job)
		e.apply(t, event(kindUpdated, job, version, ts(occur)), store.Upserted)
		return e.state(t, job)
	}

	st := update("2030-03-10T10:11:00Z", limited(2))
	require.True(t, st.Completed(), "lowered to the runs fired")
	require.EqualValues(t, 2, st.RunsFired)
	require.True(t, st.NextFire.IsZero())
	require.False(t, e.isDue(t, job))

	st = update("2030-03-10T10:12:00Z", func(j *registryv1.Job) { j.DisplayName = "renamed" })
	require.True(t, st.Completed(), "an unrelated update leaves it completed")

	// Raised at 10:27: the slots while completed (10:15..10:25) are not
	// fired late; the job resumes at 10:30.
	st = update("2030-03-10T10:27:00Z", limited(3))
	require.False(t, st.Completed())
	require.EqualValues(t, 2, st.RunsFired)
	require.Equal(t, ts("2030-03-10T10:30:00Z"), st.NextFire)
	adv := e.fireDue(t, job, ts("2030-03-10T10:30:00.1Z"))
	require.Len(t, adv.Slots, 1)
	require.True(t, adv.To.IsZero())
	require.True(t, e.state(t, job).Completed())

	// No limit: no count, and the job runs again.
	st = update("2030-03-10T10:31:00Z", limited(0))
	require.Zero(t, st.RunsFired)
	require.Zero(t, st.MaxRuns)
	require.False(t, st.Completed())
	require.Equal(t, ts("2030-03-10T10:35:00Z"), st.NextFire)
	e.fireDue(t, job, ts("2030-03-10T10:35:00.1Z"))
	require.Zero(t, e.state(t, job).RunsFired, "runs of an unlimited job are not counted")

	// The 10:40 slot fires under the unlimited version; the event that
	// gives the job a limit was written at 10:39:30, before it, and the
	// projection applies it late: that run counts.
	e.fireDue(t, job, ts("2030-03-10T10:40:00.1Z"))
	st = update("2030-03-10T10:39:30Z", limited(1))
	require.EqualValues(t, 1, st.RunsFired, "the run after the update counts")
	require.True(t, st.Completed())
}
