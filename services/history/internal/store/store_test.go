package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/history/internal/store"
)

// now is the tests' "current time"; the store is always told it, never
// reads a clock.
var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func newStore(t *testing.T, opts store.Options) *store.Store {
	t.Helper()
	pool, schema := pgtest.New(t)
	migrations, err := store.Migrations()
	require.NoError(t, err)
	_, err = migrate.ApplyAll(t.Context(), pool, schema, migrations)
	require.NoError(t, err)
	opts.Pool, opts.Schema = pool, schema
	s, err := store.New(opts)
	require.NoError(t, err)
	_, err = s.Maintain(t.Context(), now)
	require.NoError(t, err)
	return s
}

func dur(d time.Duration) *time.Duration { return &d }

// lifecycle is the events of one execution that fails once and succeeds on
// its second attempt.
func lifecycle(ns, jobID string, nominal time.Time) []store.Event {
	id := execid.For(jobID, nominal)
	base := store.Event{
		ExecutionID: id, JobID: jobID, Namespace: ns, JobDisplayName: "nightly", TriggerKind: 1,
		NominalTime: nominal, FireTime: nominal.Add(time.Millisecond), TraceID: "0af7651916cd43dd8448eb211c80319c",
	}
	ev := func(kind store.Kind, attempt int32, at time.Duration, mut func(*store.Event)) store.Event {
		e := base
		e.Kind, e.Attempt = kind, attempt
		e.OccurTime = nominal.Add(at)
		e.StartTime = nominal.Add(map[int32]time.Duration{1: 10 * time.Millisecond, 2: 2 * time.Second}[attempt])
		if mut != nil {
			mut(&e)
		}
		return e
	}
	return []store.Event{
		ev(store.KindStarted, 1, 10*time.Millisecond, nil),
		ev(store.KindFailed, 1, 500*time.Millisecond, func(e *store.Event) {
			e.Duration, e.ResponseStatus, e.ResponseExcerpt, e.Reason = dur(490*time.Millisecond), 503, "upstream busy", "HTTP 503"
			e.RetryScheduled, e.RetryDelay = true, dur(time.Second)
		}),
		ev(store.KindStarted, 2, 2*time.Second, nil),
		ev(store.KindSucceeded, 2, 2300*time.Millisecond, func(e *store.Event) {
			e.Duration, e.ResponseStatus, e.ResponseExcerpt = dur(300*time.Millisecond), 200, "ok: 42 rows"
		}),
	}
}

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

func TestIngestIsOrderIndependentAndIdempotent(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{})
	ctx := t.Context()
	nominal := now.Add(-time.Hour)

	// The reference: the events in their natural order, once each.
	ref := lifecycle("ns", uuid.NewString(), nominal)
	_, err := s.Ingest(ctx, ref, now)
	require.NoError(t, err)
	want, wantAttempts, err := s.Get(ctx, "ns", ref[0].ExecutionID)
	require.NoError(t, err)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, want.GetStatus())
	assert.EqualValues(t, 2, want.GetAttempt())
	assert.Equal(t, "ok: 42 rows", want.GetResponseExcerpt())
	assert.Equal(t, 300*time.Millisecond, want.GetDuration().AsDuration())
	assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", want.GetTraceId())
	require.Len(t, wantAttempts, 2)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_RETRYING, wantAttempts[0].GetStatus())
	assert.Equal(t, "HTTP 503", wantAttempts[0].GetReason())
	assert.EqualValues(t, 503, wantAttempts[0].GetResponseStatus())
	assert.Equal(t, time.Second, wantAttempts[0].GetRetryDelay().AsDuration())
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, wantAttempts[1].GetStatus())

	// Every order of the four events, delivered as one event per batch,
	// then the whole lot again as one batch (duplicates inside a batch and
	// across batches), must give the same rows.
	for i, perm := range permutations(4) {
		t.Run(fmt.Sprint(perm), func(t *testing.T) {
			evs := lifecycle("ns", uuid.NewString(), nominal.Add(time.Duration(i)*time.Second))
			for _, j := range perm {
				_, err := s.Ingest(ctx, []store.Event{evs[j]}, now)
				require.NoError(t, err)
			}
			again := make([]store.Event, 0, 8)
			for _, j := range perm {
				again = append(again, evs[j], evs[j])
			}
			_, err := s.Ingest(ctx, again, now)
			require.NoError(t, err)
			got, gotAttempts, err := s.Get(ctx, "ns", evs[0].ExecutionID)
			require.NoError(t, err)
			ignore := protocmp.IgnoreFields(&historyv1.Execution{}, "execution_id", "job_id", "nominal_time", "fire_time", "start_time", "update_time")
			assert.Empty(t, cmp.Diff(want, got, protocmp.Transform(), ignore))
			assert.Empty(t, cmp.Diff(wantAttempts, gotAttempts, protocmp.Transform(), protocmp.IgnoreFields(&historyv1.Attempt{}, "start_time")))
			assert.Equal(t, nominal.Add(time.Duration(i)*time.Second+2*time.Second), got.GetStartTime().AsTime())
		})
	}

	// The same permutations inside a single batch each.
	for i, perm := range permutations(4) {
		evs := lifecycle("ns", uuid.NewString(), nominal.Add(time.Duration(100+i)*time.Second))
		batch := make([]store.Event, 0, 4)
		for _, j := range perm {
			batch = append(batch, evs[j])
		}
		_, err := s.Ingest(ctx, batch, now)
		require.NoError(t, err)
		got, gotAttempts, err := s.Get(ctx, "ns", evs[0].ExecutionID)
		require.NoError(t, err)
		assert.Equal(t, want.GetStatus(), got.GetStatus(), "order %v", perm)
		assert.Equal(t, want.GetResponseExcerpt(), got.GetResponseExcerpt(), "order %v", perm)
		assert.Len(t, gotAttempts, 2, "order %v", perm)
	}
}

func TestIngestDeadAndMissed(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{})
	ctx := t.Context()
	job := uuid.NewString()
	n1, n2 := now.Add(-2*time.Hour), now.Add(-time.Hour)
	id1, id2 := execid.For(job, n1), execid.For(job, n2)
	evs := []store.Event{
		// DEAD first, then the FAILED of the same last attempt: DEAD stays,
		// and the failure's response fills what DEAD lacked.
		{Kind: store.KindDead, ExecutionID: id1, JobID: job, Namespace: "ns", Attempt: 3, NominalTime: n1, OccurTime: n1.Add(time.Minute), Reason: "HTTP 500"},
		{Kind: store.KindFailed, ExecutionID: id1, JobID: job, Namespace: "ns", Attempt: 3, NominalTime: n1, OccurTime: n1.Add(time.Minute), Reason: "HTTP 500", ResponseStatus: 500, ResponseExcerpt: "stack trace", Duration: dur(time.Second)},
		{Kind: store.KindMissed, ExecutionID: id2, JobID: job, Namespace: "ns", NominalTime: n2, OccurTime: now, TriggerKind: 1, Reason: "older than the catch-up window"},
	}
	_, err := s.Ingest(ctx, evs, now)
	require.NoError(t, err)
	dead, attempts, err := s.Get(ctx, "ns", id1)
	require.NoError(t, err)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD, dead.GetStatus())
	assert.EqualValues(t, 500, dead.GetResponseStatus())
	assert.Equal(t, "stack trace", dead.GetResponseExcerpt())
	require.Len(t, attempts, 1)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD, attempts[0].GetStatus())

	missed, attempts, err := s.Get(ctx, "ns", id2)
	require.NoError(t, err)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_MISSED, missed.GetStatus())
	assert.Equal(t, "older than the catch-up window", missed.GetReason())
	assert.Nil(t, missed.GetFireTime())
	assert.Empty(t, attempts)
}

// TestIngestSkipped: a slot its overlap policy skipped is stored SKIPPED
// with its reason and no attempt, found by status and by its reason.
func TestIngestSkipped(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{})
	ctx := t.Context()
	job := uuid.NewString()
	n := now.Add(-time.Hour)
	id := execid.For(job, n)
	reason := "skipped: execution 0190d6c8-6f1e-7c2a-9d51-3b8f2a4e6c10 of this job is still in progress"
	ev := store.Event{Kind: store.KindSkipped, ExecutionID: id, JobID: job, Namespace: "ns", NominalTime: n, OccurTime: now,
		FireTime: n, TriggerKind: 1, Reason: reason}
	require.NoError(t, ev.Validate(), "attempt 0 is valid for a skipped slot")
	_, err := s.Ingest(ctx, append(lifecycle("ns", job, n.Add(-time.Minute)), ev, ev), now)
	require.NoError(t, err)

	got, attempts, err := s.Get(ctx, "ns", id)
	require.NoError(t, err)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, got.GetStatus())
	assert.Equal(t, reason, got.GetReason())
	assert.Equal(t, n, got.GetFireTime().AsTime(), "it was fired")
	assert.Zero(t, got.GetAttempt())
	assert.Empty(t, attempts)

	require.True(t, store.ValidStatus(store.StatusSkipped))
	list, _, err := s.List(ctx, store.ListFilter{Namespace: "ns", Limit: 10, Statuses: []store.Status{store.StatusSkipped}})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, id, list[0].GetExecutionId())
	list, _, err = s.List(ctx, store.ListFilter{Namespace: "ns", Limit: 10, Query: "still in progress"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, id, list[0].GetExecutionId())
}

// TestIngestBuffered: a slot waiting for its job's execution in progress
// is BUFFERED until its first attempt's events replace it, in any order.
func TestIngestBuffered(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{})
	ctx := t.Context()
	job := uuid.NewString()
	n := now.Add(-time.Hour)
	id := execid.For(job, n)
	buffered := store.Event{Kind: store.KindBuffered, ExecutionID: id, JobID: job, Namespace: "ns", NominalTime: n, OccurTime: n,
		FireTime: n, TriggerKind: 1, Reason: "buffered: waiting for execution x of this job to end"}
	_, err := s.Ingest(ctx, []store.Event{buffered}, now)
	require.NoError(t, err)
	got, attempts, err := s.Get(ctx, "ns", id)
	require.NoError(t, err)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_BUFFERED, got.GetStatus())
	assert.Empty(t, attempts)

	started := store.Event{Kind: store.KindStarted, ExecutionID: id, JobID: job, Namespace: "ns", Attempt: 1, NominalTime: n, OccurTime: n.Add(time.Minute), TriggerKind: 1}
	_, err = s.Ingest(ctx, []store.Event{started, buffered}, now)
	require.NoError(t, err)
	got, attempts, err = s.Get(ctx, "ns", id)
	require.NoError(t, err)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, got.GetStatus(), "a late BUFFERED does not undo the start")
	assert.Len(t, attempts, 1)
}

func TestNamespaceIsolation(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{})
	ctx := t.Context()
	job := uuid.NewString()
	evs := lifecycle("alpha", job, now.Add(-time.Hour))
	_, err := s.Ingest(ctx, evs, now)
	require.NoError(t, err)

	_, _, err = s.Get(ctx, "beta", evs[0].ExecutionID)
	require.ErrorIs(t, err, store.ErrNotFound)
	list, _, err := s.List(ctx, store.ListFilter{Namespace: "beta", Limit: 10})
	require.NoError(t, err)
	assert.Empty(t, list)
	list, _, err = s.List(ctx, store.ListFilter{Namespace: "beta", JobID: job, Query: "rows", Limit: 10})
	require.NoError(t, err)
	assert.Empty(t, list)
	st, err := s.JobStats(ctx, "beta", job, now.Add(-24*time.Hour), now)
	require.NoError(t, err)
	assert.Zero(t, st.Runs)
	assert.Nil(t, st.LastRun)

	// An event claiming the same execution for another namespace does not
	// touch alpha's row.
	forged := evs[3]
	forged.Namespace, forged.Attempt, forged.ResponseExcerpt = "beta", 9, "forged"
	_, err = s.Ingest(ctx, []store.Event{forged}, now)
	require.NoError(t, err)
	got, attempts, err := s.Get(ctx, "alpha", evs[0].ExecutionID)
	require.NoError(t, err)
	assert.EqualValues(t, 2, got.GetAttempt())
	assert.Equal(t, "ok: 42 rows", got.GetResponseExcerpt())
	assert.Len(t, attempts, 2, "nor its attempts")
	list, _, err = s.List(ctx, store.ListFilter{Namespace: "alpha", Limit: 10})
	require.NoError(t, err)
	assert.Len(t, list, 1)
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{})
	ctx := t.Context()
	jobA, jobB := uuid.NewString(), uuid.NewString()
	var evs []store.Event
	// jobA: hourly over the last 10 hours, succeeded, scheduled.
	for h := 1; h <= 10; h++ {
		evs = append(evs, lifecycle("ns", jobA, now.Add(-time.Duration(h)*time.Hour))...)
	}
	// jobB: one failed manual run, one missed slot yesterday.
	nb := now.Add(-30 * time.Minute)
	evs = append(evs,
		store.Event{Kind: store.KindFailed, ExecutionID: execid.For(jobB, nb), JobID: jobB, Namespace: "ns", Attempt: 1, TriggerKind: 2, NominalTime: nb, OccurTime: nb, Reason: "connection refused: dial tcp"},
		store.Event{Kind: store.KindMissed, ExecutionID: execid.For(jobB, now.Add(-26*time.Hour)), JobID: jobB, Namespace: "ns", TriggerKind: 4, NominalTime: now.Add(-26 * time.Hour), OccurTime: now, Reason: "paused"},
	)
	_, err := s.Ingest(ctx, evs, now)
	require.NoError(t, err)

	count := func(f store.ListFilter) int {
		t.Helper()
		f.Namespace, f.Limit = "ns", 100
		list, next, err := s.List(ctx, f)
		require.NoError(t, err)
		require.Empty(t, next)
		for i := 1; i < len(list); i++ {
			require.True(t, list[i-1].GetNominalTime().AsTime().After(list[i].GetNominalTime().AsTime()), "newest first")
		}
		return len(list)
	}
	tests := []struct {
		name   string
		filter store.ListFilter
		want   int
	}{
		{"all", store.ListFilter{}, 12},
		{"job", store.ListFilter{JobID: jobA}, 10},
		{"status failed", store.ListFilter{Statuses: []store.Status{store.StatusFailed}}, 1},
		{"status missed or failed", store.ListFilter{Statuses: []store.Status{store.StatusMissed, store.StatusFailed}}, 2},
		{"trigger manual", store.ListFilter{TriggerKinds: []int16{2}}, 1},
		{"trigger catch-up", store.ListFilter{TriggerKinds: []int16{4}}, 1},
		{"time range", store.ListFilter{Start: now.Add(-3 * time.Hour), End: now.Add(-time.Hour)}, 2},
		{"since", store.ListFilter{Start: now.Add(-3 * time.Hour)}, 4},
		{"search error", store.ListFilter{Query: "REFUSED"}, 1},
		{"search output", store.ListFilter{Query: "42 rows"}, 10},
		{"search reason of missed", store.ListFilter{Query: "pause"}, 1},
		{"search with like characters", store.ListFilter{Query: "100%"}, 0},
		{"search and job", store.ListFilter{JobID: jobB, Query: "rows"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, count(tc.filter))
		})
	}
}

func TestListPaginationUnderConcurrentInserts(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{})
	ctx := t.Context()
	job := uuid.NewString()
	event := func(nominal time.Time) store.Event {
		return store.Event{Kind: store.KindSucceeded, ExecutionID: execid.For(job, nominal), JobID: job, Namespace: "ns",
			Attempt: 1, TriggerKind: 1, NominalTime: nominal, OccurTime: nominal, Duration: dur(time.Millisecond)}
	}
	// 500 executions a second apart, in the last hours; several share a
	// nominal time through different jobs to exercise the id tie-break.
	base := now.Add(-2 * time.Hour)
	var initial []store.Event
	for i := range 500 {
		initial = append(initial, event(base.Add(time.Duration(i)*time.Second)))
		other := event(base.Add(time.Duration(i) * time.Second))
		other.JobID = "other"
		other.ExecutionID = execid.For("other", other.NominalTime)
		initial = append(initial, other)
	}
	_, err := s.Ingest(ctx, initial, now)
	require.NoError(t, err)

	// While a reader pages through, a writer adds executions newer than
	// the range, older than it, and inside it (late events of old slots).
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			inside := event(base.Add(time.Duration(i*7919%500000) * time.Millisecond))
			inside.JobID = "writer"
			inside.ExecutionID = execid.For("writer", inside.NominalTime)
			_, err := s.Ingest(ctx, []store.Event{
				event(base.Add(time.Hour + time.Duration(i)*time.Millisecond)),
				event(base.Add(-time.Hour - time.Duration(i)*time.Millisecond)),
				inside,
			}, now)
			if !assert.NoError(t, err) {
				return
			}
		}
	})

	seen := map[string]bool{}
	initialIDs := map[string]bool{}
	for _, e := range initial {
		initialIDs[e.ExecutionID] = true
	}
	var last time.Time
	token := ""
	pages := 0
	for {
		list, next, err := s.List(ctx, store.ListFilter{Namespace: "ns", Start: base, End: base.Add(500 * time.Second), Limit: 37, PageToken: token})
		require.NoError(t, err)
		for _, e := range list {
			require.False(t, seen[e.GetExecutionId()], "execution %s on two pages", e.GetExecutionId())
			seen[e.GetExecutionId()] = true
			if !last.IsZero() {
				require.False(t, e.GetNominalTime().AsTime().After(last), "pages go newest first")
			}
			last = e.GetNominalTime().AsTime()
		}
		pages++
		if next == "" {
			break
		}
		token = next
	}
	close(stop)
	wg.Wait()
	for id := range initialIDs {
		assert.True(t, seen[id], "execution %s present before the first page was never listed", id)
	}
	assert.GreaterOrEqual(t, pages, 28)

	// A token is refused with other filters.
	_, next, err := s.List(ctx, store.ListFilter{Namespace: "ns", Limit: 5})
	require.NoError(t, err)
	_, _, err = s.List(ctx, store.ListFilter{Namespace: "ns", JobID: job, Limit: 5, PageToken: next})
	require.ErrorIs(t, err, store.ErrBadCursor)
	_, _, err = s.List(ctx, store.ListFilter{Namespace: "ns", Limit: 5, PageToken: "garbage"})
	require.ErrorIs(t, err, store.ErrBadCursor)
}

func TestJobStats(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{})
	ctx := t.Context()
	job := uuid.NewString()
	var evs []store.Event
	// 100 successes lasting 1..100 ms, 3 dead, 2 missed, 1 running.
	for i := 1; i <= 100; i++ {
		n := now.Add(-time.Duration(i) * time.Minute)
		evs = append(evs, store.Event{Kind: store.KindSucceeded, ExecutionID: execid.For(job, n), JobID: job, Namespace: "ns", Attempt: 1, NominalTime: n, OccurTime: n, Duration: dur(time.Duration(i) * time.Millisecond)})
	}
	for i := 1; i <= 3; i++ {
		n := now.Add(-time.Duration(200+i) * time.Minute)
		evs = append(evs, store.Event{Kind: store.KindDead, ExecutionID: execid.For(job, n), JobID: job, Namespace: "ns", Attempt: 5, NominalTime: n, OccurTime: n, Duration: dur(time.Second)})
	}
	for i := 1; i <= 2; i++ {
		n := now.Add(-time.Duration(300+i) * time.Minute)
		evs = append(evs, store.Event{Kind: store.KindMissed, ExecutionID: execid.For(job, n), JobID: job, Namespace: "ns", NominalTime: n, OccurTime: now})
	}
	newest := now.Add(-time.Second)
	evs = append(evs, store.Event{Kind: store.KindMissed, ExecutionID: execid.For(job, newest), JobID: job, Namespace: "ns", NominalTime: newest, OccurTime: now})
	skippedAt := now.Add(-2 * time.Second)
	evs = append(evs, store.Event{Kind: store.KindSkipped, ExecutionID: execid.For(job, skippedAt), JobID: job, Namespace: "ns", NominalTime: skippedAt, OccurTime: now,
		Reason: "skipped: execution x of this job is still in progress"})
	running := now.Add(-30 * time.Second)
	evs = append(evs, store.Event{Kind: store.KindStarted, ExecutionID: execid.For(job, running), JobID: job, Namespace: "ns", Attempt: 1, NominalTime: running, OccurTime: now})
	// Outside the window.
	old := now.Add(-48 * time.Hour)
	evs = append(evs, store.Event{Kind: store.KindDead, ExecutionID: execid.For(job, old), JobID: job, Namespace: "ns", Attempt: 1, NominalTime: old, OccurTime: old})
	_, err := s.Ingest(ctx, evs, now)
	require.NoError(t, err)

	st, err := s.JobStats(ctx, "ns", job, now.Add(-24*time.Hour), now)
	require.NoError(t, err)
	assert.EqualValues(t, 104, st.Runs)
	assert.EqualValues(t, 100, st.Successes)
	assert.EqualValues(t, 3, st.Failures)
	assert.EqualValues(t, 3, st.Missed)
	assert.EqualValues(t, 1, st.Skipped, "a skipped slot is not a run")
	require.NotNil(t, st.P50)
	// Over 103 durations: 1..100 ms and 3 × 1 s.
	assert.InDelta(t, 52*time.Millisecond, *st.P50, float64(time.Millisecond))
	assert.Equal(t, time.Second, *st.P99)
	require.NotNil(t, st.LastRun)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, st.LastRun.GetStatus(), "the newest run, not the newer missed and skipped slots")

	empty, err := s.JobStats(ctx, "ns", uuid.NewString(), now.Add(-time.Hour), now)
	require.NoError(t, err)
	assert.Nil(t, empty.P50)
	assert.Nil(t, empty.LastRun)
}

func TestRetentionDropsWholeDays(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{Retention: 3 * 24 * time.Hour, Ahead: 2})
	ctx := t.Context()
	days, err := s.Days(ctx)
	require.NoError(t, err)
	// From the start of the day 3 days ago to 2 days ahead.
	require.Len(t, days, 6)
	assert.Equal(t, time.Date(2026, 11, 18, 0, 0, 0, 0, time.UTC), days[0])
	assert.Equal(t, time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), days[5])

	job := uuid.NewString()
	var evs []store.Event
	for d := 0; d <= 3; d++ {
		evs = append(evs, lifecycle("ns", job, now.AddDate(0, 0, -d))...)
	}
	// A slot beyond the partitions made ahead gets its partition on demand.
	evs = append(evs, lifecycle("ns", job, now.AddDate(0, 0, 10))...)
	// A slot older than the retention is ignored.
	evs = append(evs, lifecycle("ns", job, now.AddDate(0, 0, -5))...)
	res, err := s.Ingest(ctx, evs, now)
	require.NoError(t, err)
	assert.Equal(t, 4, res.Expired)
	list, _, err := s.List(ctx, store.ListFilter{Namespace: "ns", Limit: 100})
	require.NoError(t, err)
	require.Len(t, list, 5)

	// A day later, the oldest day (Nov 18) falls out of the retention.
	res2, err := s.Maintain(ctx, now.Add(24*time.Hour))
	require.NoError(t, err)
	assert.Equal(t, []time.Time{time.Date(2026, 11, 18, 0, 0, 0, 0, time.UTC)}, res2.Dropped)
	assert.Equal(t, []time.Time{time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}, res2.Created)
	list, _, err = s.List(ctx, store.ListFilter{Namespace: "ns", Limit: 100})
	require.NoError(t, err)
	require.Len(t, list, 4, "the executions of Nov 18 are gone, the rest kept")
	for _, e := range list {
		assert.False(t, e.GetNominalTime().AsTime().Before(time.Date(2026, 11, 19, 0, 0, 0, 0, time.UTC)))
	}
	_, attempts, err := s.Get(ctx, "ns", list[len(list)-1].GetExecutionId())
	require.NoError(t, err)
	assert.Len(t, attempts, 2)

	// Running it again changes nothing.
	res3, err := s.Maintain(ctx, now.Add(24*time.Hour))
	require.NoError(t, err)
	assert.Empty(t, res3.Dropped)
	assert.Empty(t, res3.Created)
	assert.Equal(t, res2.Days, res3.Days)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := store.New(store.Options{})
	require.Error(t, err)
	pool, schema := pgtest.New(t)
	_, err = store.New(store.Options{Pool: pool, Schema: schema, Retention: time.Hour})
	require.Error(t, err)
}

// TestIngestRecordsARunsOrigin: a re-run's execution keeps which execution
// it re-runs and what its request overrode, from whichever event carried
// them (an event without them, from a dispatcher that predates them, does
// not erase them), and Get and List return them; a plain execution has
// neither.
func TestIngestRecordsARunsOrigin(t *testing.T) {
	t.Parallel()
	s := newStore(t, store.Options{})
	ctx := t.Context()
	job := uuid.NewString()
	original := execid.For(job, now.Add(-3*time.Hour))
	rerun := lifecycle("ns", job, now.Add(-time.Hour))
	for i := range rerun {
		rerun[i].TriggerKind = 2
		if i != len(rerun)-1 {
			rerun[i].RerunOf, rerun[i].Overridden = original, []string{"target", "headers"}
		}
	}
	// The outcome first, in a batch of its own: it wins the row, and the
	// older events fill in what it lacks.
	_, err := s.Ingest(ctx, rerun[len(rerun)-1:], now)
	require.NoError(t, err)
	_, err = s.Ingest(ctx, rerun[:len(rerun)-1], now)
	require.NoError(t, err)
	plain := lifecycle("ns", job, now.Add(-2*time.Hour))
	_, err = s.Ingest(ctx, plain, now)
	require.NoError(t, err)

	got, _, err := s.Get(ctx, "ns", rerun[0].ExecutionID)
	require.NoError(t, err)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, got.GetStatus())
	assert.Equal(t, original, got.GetRerunOfExecutionId())
	assert.Equal(t, []string{"target", "headers"}, got.GetOverriddenFields())

	list, _, err := s.List(ctx, store.ListFilter{Namespace: "ns", JobID: job, Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, original, list[0].GetRerunOfExecutionId(), "newest first: the re-run")
	assert.Equal(t, []string{"target", "headers"}, list[0].GetOverriddenFields())
	assert.Empty(t, list[1].GetRerunOfExecutionId())
	assert.Empty(t, list[1].GetOverriddenFields())
}
