package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

func newStore(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	pool, _ := pgtest.Migrated(t, store.Migrations)
	return store.New(store.Options{Pool: pool}), pool
}

// jobEvent is a registry job event of a job on an interval schedule of
// every minutes (anchored at anchor).
func jobEvent(id string, version int64, kind eventsv1.JobEventKind, anchor time.Time, every time.Duration) *eventsv1.JobEvent {
	return &eventsv1.JobEvent{
		EventId: id, Kind: kind, Version: version,
		Job: &registryv1.Job{
			Id: id, Namespace: "ns", DisplayName: "job " + id, Labels: map[string]string{"v": time.Duration(version).String()},
			Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{
				Every: durationpb.New(every), AnchorTime: timestamppb.New(anchor),
			}}},
			Paused:     kind == eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED,
			CreateTime: timestamppb.New(anchor), Version: version,
		},
	}
}

type storedJob struct {
	Version     int64
	Deleted     bool
	Paused      bool
	DisplayName string
	Labels      map[string]string
	NextSlot    *time.Time
	CheckTime   *time.Time
}

func readJob(t *testing.T, pool *pgxpool.Pool, id string) storedJob {
	t.Helper()
	var j storedJob
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT version, deleted, paused, display_name, labels, next_slot, check_time FROM jobs WHERE id = $1`, id).
		Scan(&j.Version, &j.Deleted, &j.Paused, &j.DisplayName, &j.Labels, &j.NextSlot, &j.CheckTime))
	return j
}

func outcomes(res []store.JobResult) []store.JobApplied {
	out := make([]store.JobApplied, len(res))
	for i, r := range res {
		out[i] = r.Applied
	}
	return out
}

// TestApplyJobEventsOneJobManyEvents: several events of one job in one
// batch, out of order and redelivered, leave the row the highest version
// describes, whatever their order; an equal version after the first and
// versions at or below the stored one are stale.
func TestApplyJobEventsOneJobManyEvents(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0.Add(90 * time.Second)
	created := func(v int64) *eventsv1.JobEvent {
		return jobEvent("j", v, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, time.Minute)
	}
	updated := func(v int64, every time.Duration) *eventsv1.JobEvent {
		return jobEvent("j", v, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, t0, every)
	}
	paused := func(v int64) *eventsv1.JobEvent {
		return jobEvent("j", v, eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED, t0, time.Minute)
	}
	deleted := func(v int64) *eventsv1.JobEvent {
		return jobEvent("j", v, eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED, t0, time.Minute)
	}
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	for _, tc := range []struct {
		name    string
		stored  []*eventsv1.JobEvent // applied in an earlier batch
		batch   []*eventsv1.JobEvent
		want    []store.JobApplied
		version int64
		deleted bool
		paused  bool
		next    *time.Time
	}{
		{
			name:    "in order",
			batch:   []*eventsv1.JobEvent{created(1), updated(2, 5*time.Minute), updated(3, 10*time.Minute)},
			want:    []store.JobApplied{store.JobUpserted, store.JobUpserted, store.JobUpserted},
			version: 3, next: at(10 * time.Minute),
		},
		{
			name:    "out of order",
			batch:   []*eventsv1.JobEvent{updated(3, 10*time.Minute), created(1), updated(2, 5*time.Minute)},
			want:    []store.JobApplied{store.JobUpserted, store.JobUpserted, store.JobUpserted},
			version: 3, next: at(10 * time.Minute),
		},
		{
			name:    "redelivered in the batch",
			batch:   []*eventsv1.JobEvent{updated(2, 5*time.Minute), created(1), updated(2, 5*time.Minute), created(1)},
			want:    []store.JobApplied{store.JobUpserted, store.JobUpserted, store.JobStale, store.JobStale},
			version: 2, next: at(5 * time.Minute),
		},
		{
			name:    "redelivered after a newer one was stored",
			stored:  []*eventsv1.JobEvent{created(1), paused(4)},
			batch:   []*eventsv1.JobEvent{updated(3, 5*time.Minute), created(1), paused(4), updated(2, 5*time.Minute)},
			want:    []store.JobApplied{store.JobStale, store.JobStale, store.JobStale, store.JobStale},
			version: 4, paused: true,
		},
		{
			name:    "newer than the stored row, older ones beside it",
			stored:  []*eventsv1.JobEvent{created(1), updated(3, 5*time.Minute)},
			batch:   []*eventsv1.JobEvent{updated(2, 10*time.Minute), paused(5), updated(4, 10*time.Minute)},
			want:    []store.JobApplied{store.JobStale, store.JobUpserted, store.JobUpserted},
			version: 5, paused: true,
		},
		{
			name:    "deleted keeps a flagged row an older event cannot revive",
			batch:   []*eventsv1.JobEvent{deleted(3), created(1), updated(2, 5*time.Minute)},
			want:    []store.JobApplied{store.JobUpserted, store.JobUpserted, store.JobUpserted},
			version: 3, deleted: true,
		},
		{
			name:    "an older event after the delete",
			stored:  []*eventsv1.JobEvent{created(1), deleted(3)},
			batch:   []*eventsv1.JobEvent{updated(2, 5*time.Minute)},
			want:    []store.JobApplied{store.JobStale},
			version: 3, deleted: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, pool := newStore(t)
			ctx := context.Background()
			for _, ev := range tc.stored {
				_, err := s.ApplyJobEvent(ctx, ev, now)
				require.NoError(t, err)
			}
			res, err := s.ApplyJobEvents(ctx, tc.batch, now)
			require.NoError(t, err)
			require.Equal(t, tc.want, outcomes(res))
			j := readJob(t, pool, "j")
			require.Equal(t, tc.version, j.Version)
			require.Equal(t, tc.deleted, j.Deleted)
			require.Equal(t, tc.paused, j.Paused)
			require.Equal(t, map[string]string{"v": time.Duration(tc.version).String()}, j.Labels, "the winner's definition")
			if tc.next == nil {
				require.Nil(t, j.NextSlot)
				require.Nil(t, j.CheckTime)
			} else {
				require.NotNil(t, j.NextSlot)
				require.True(t, tc.next.Equal(*j.NextSlot), "next slot %v, want %v", j.NextSlot, tc.next)
				require.True(t, tc.next.Equal(*j.CheckTime))
			}
		})
	}
}

// TestApplyJobEventsKeepsSeenThrough: the next slot is computed from the
// latest slot seen when it is after now (an execution event that came
// first made a placeholder row), as before batching.
func TestApplyJobEventsKeepsSeenThrough(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	_, err := pool.Exec(ctx, `INSERT INTO jobs (id, namespace, version, create_time, seen_through) VALUES ('j', 'ns', 0, $1, $2)`,
		t0, t0.Add(5*time.Minute))
	require.NoError(t, err)
	res, err := s.ApplyJobEvents(ctx, []*eventsv1.JobEvent{
		jobEvent("j", 2, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, t0, time.Minute),
		jobEvent("j", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, time.Minute),
	}, t0.Add(30*time.Second))
	require.NoError(t, err)
	require.Equal(t, []store.JobApplied{store.JobUpserted, store.JobUpserted}, outcomes(res))
	j := readJob(t, pool, "j")
	require.Equal(t, int64(2), j.Version)
	require.NotNil(t, j.NextSlot)
	require.Equal(t, t0.Add(6*time.Minute), j.NextSlot.UTC())
}

// TestApplyJobEventsMixedBatch: invalid events get their own error and
// change nothing; the valid events of the batch are applied; run requests
// are ignored.
func TestApplyJobEventsMixedBatch(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	noID := jobEvent("", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, time.Minute)
	noVersion := jobEvent("b", 0, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, time.Minute)
	badSchedule := jobEvent("c", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, -time.Minute)
	// Invalid only as the newest: job d's v3 has a bad schedule, so v2
	// is what the row holds.
	dBad := jobEvent("d", 3, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, t0, -time.Minute)
	run := jobEvent("a", 9, eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED, t0, time.Minute)
	batch := []*eventsv1.JobEvent{
		jobEvent("a", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, time.Minute),
		noID, noVersion, badSchedule, dBad,
		jobEvent("d", 2, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, time.Minute),
		run,
		jobEvent("e", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED, t0, -time.Minute), // not watched: no schedule check
	}
	res, err := s.ApplyJobEvents(ctx, batch, t0)
	require.NoError(t, err)
	require.Len(t, res, len(batch))
	for i, want := range []struct {
		applied store.JobApplied
		invalid bool
	}{
		{applied: store.JobUpserted}, {invalid: true}, {invalid: true}, {invalid: true}, {invalid: true},
		{applied: store.JobUpserted}, {applied: store.JobIgnored}, {applied: store.JobUpserted},
	} {
		if want.invalid {
			require.ErrorIs(t, res[i].Err, store.ErrInvalidEvent, "event %d", i)
			require.Zero(t, res[i].Applied)
			continue
		}
		require.NoError(t, res[i].Err, "event %d", i)
		require.Equal(t, want.applied, res[i].Applied, "event %d", i)
	}
	var ids []string
	rows, err := pool.Query(ctx, `SELECT id FROM jobs ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"a", "d", "e"}, ids)
	require.Equal(t, int64(1), readJob(t, pool, "a").Version, "a run request does not touch the row")
	require.Equal(t, int64(2), readJob(t, pool, "d").Version)
}

// TestApplyJobEventsConcurrentBatches: batches applied concurrently over
// the same jobs, in opposite orders, neither deadlock nor lose the newest
// version.
func TestApplyJobEventsConcurrentBatches(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const jobs, versions = 50, 6
	batches := make([][]*eventsv1.JobEvent, versions)
	for v := range versions {
		for i := range jobs {
			id := string(rune('A'+i%26)) + time.Duration(i).String()
			batches[v] = append(batches[v], jobEvent(id, int64(v+1), eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, t0, time.Minute))
		}
		if v%2 == 1 {
			for i, j := 0, len(batches[v])-1; i < j; i, j = i+1, j-1 {
				batches[v][i], batches[v][j] = batches[v][j], batches[v][i]
			}
		}
	}
	errs := make(chan error, versions)
	for _, b := range batches {
		go func() {
			_, err := s.ApplyJobEvents(ctx, b, t0)
			errs <- err
		}()
	}
	for range versions {
		require.NoError(t, <-errs)
	}
	var n, low int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE version <> $1) FROM jobs`, versions).Scan(&n, &low))
	require.Equal(t, jobs, n)
	require.Zero(t, low, "every job holds the newest version")
}
