package store_test

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// batchOf wraps events for ApplyBatch.
func batchOf(events ...*eventsv1.JobEvent) []store.Event {
	out := make([]store.Event, len(events))
	for i, ev := range events {
		out[i] = store.Event{Event: ev}
	}
	return out
}

// applied is the outcome of each result, failing on an error.
func applied(t *testing.T, results []store.Result) []store.Applied {
	t.Helper()
	out := make([]store.Applied, len(results))
	for i, r := range results {
		require.NoError(t, r.Err, "event %d", i)
		out[i] = r.Applied
	}
	return out
}

func TestApplyBatchOneJobInVersionOrder(t *testing.T) {
	t.Parallel()
	job := newJob(ts("2030-03-10T10:01:30Z"))
	every10 := proto.Clone(job).(*registryv1.Job)
	cron("*/10 * * * *", "")(every10)
	hourly := proto.Clone(job).(*registryv1.Job)
	cron("0 * * * *", "")(hourly)
	v1 := created(job)
	v2 := event(kindUpdated, every10, 2, ts("2030-03-10T10:02:00Z"))
	v3 := event(kindPaused, every10, 3, ts("2030-03-10T10:03:00Z"))
	v4 := event(kindResumed, every10, 4, ts("2030-03-10T10:31:00Z"))
	v5 := event(kindUpdated, hourly, 5, ts("2030-03-10T10:32:00Z"))
	tests := []struct {
		name   string
		before []*eventsv1.JobEvent // applied one at a time first
		batch  []*eventsv1.JobEvent
		want   []store.Applied
		// next is the next fire time the versions applied one at a time,
		// oldest first, leave.
		next time.Time
	}{
		{name: "newest first", batch: []*eventsv1.JobEvent{v5, v4, v3, v2, v1},
			want: []store.Applied{store.Upserted, store.Upserted, store.Upserted, store.Upserted, store.Upserted},
			// v4 resumed at 10:31 (next 10:40), v5 changed the schedule to
			// hourly at 10:32: its next slot after 10:32.
			next: ts("2030-03-10T11:00:00Z")},
		{name: "shuffled with redeliveries", batch: []*eventsv1.JobEvent{v2, v1, v3, v2, v1},
			want: []store.Applied{store.Upserted, store.Upserted, store.Upserted, store.Stale, store.Stale}},
		{name: "older than the stored row", before: []*eventsv1.JobEvent{v1, v2, v3}, batch: []*eventsv1.JobEvent{v2, v4, v1, v3},
			want: []store.Applied{store.Stale, store.Upserted, store.Stale, store.Stale}, next: ts("2030-03-10T10:40:00Z")},
		{name: "update before create", batch: []*eventsv1.JobEvent{v2, v1},
			want: []store.Applied{store.Upserted, store.Upserted}, next: ts("2030-03-10T10:10:00Z")},
		{name: "deleted in the batch", batch: []*eventsv1.JobEvent{v1, event(kindDeleted, every10, 3, ts("2030-03-10T10:04:00Z")), v2},
			want: []store.Applied{store.Upserted, store.Upserted, store.Upserted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The same events, one at a time in version order, on another
			// schema: the batch must leave the same row.
			one := newEnv(t)
			byVersion := slices.Concat(tt.before, tt.batch)
			slices.SortStableFunc(byVersion, func(a, b *eventsv1.JobEvent) int { return int(a.Version - b.Version) })
			for _, ev := range byVersion {
				_, err := one.store.Apply(t.Context(), ev, ev.OccurTime.AsTime())
				require.NoError(t, err)
			}

			e := newEnv(t)
			for _, ev := range tt.before {
				_, err := e.store.Apply(t.Context(), ev, ev.OccurTime.AsTime())
				require.NoError(t, err)
			}
			res, err := e.store.ApplyBatch(t.Context(), batchOf(tt.batch...), ts("2030-03-10T10:33:00Z"))
			require.NoError(t, err)
			require.Equal(t, tt.want, applied(t, res))

			want, wantErr := one.store.Job(t.Context(), job.Namespace, job.Id)
			got, err := e.store.Job(t.Context(), job.Namespace, job.Id)
			if wantErr != nil {
				require.ErrorIs(t, err, store.ErrNotFound)
				require.ErrorIs(t, wantErr, store.ErrNotFound)
				require.Equal(t, 1, e.count(t, `SELECT count(*) FROM jobs WHERE deleted AND version = 3`))
				return
			}
			require.NoError(t, err)
			require.Equal(t, want.Version, got.Version)
			require.Equal(t, want.Paused, got.Paused)
			require.True(t, want.NextFire.Equal(got.NextFire), "next fire %s, one at a time %s", got.NextFire, want.NextFire)
			require.True(t, tt.next.Equal(got.NextFire), "next fire %s, want %s", got.NextFire, tt.next)
			require.True(t, proto.Equal(want.Job, got.Job))
		})
	}
}

func TestApplyBatchInvalidEventsAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := newJob(ts("2030-03-10T10:01:30Z"))
	b := newJob(ts("2030-03-10T10:01:30Z"))
	badCron := proto.Clone(b).(*registryv1.Job)
	cron("61 * * * *", "")(badCron)
	noJob := created(a)
	noJob.Job = nil
	res, err := e.store.ApplyBatch(t.Context(), batchOf(
		noJob,
		created(a),
		created(b),
		event(kindUpdated, badCron, 2, ts("2030-03-10T10:02:00Z")),
		nil,
	), ts("2030-03-10T10:02:00Z"))
	require.NoError(t, err)
	require.Len(t, res, 5)
	for _, i := range []int{0, 3, 4} {
		require.ErrorIs(t, res[i].Err, store.ErrInvalidEvent, "event %d", i)
		require.Zero(t, res[i].Applied)
	}
	require.Equal(t, store.Upserted, res[1].Applied)
	require.Equal(t, store.Upserted, res[2].Applied)
	// b keeps the version before its invalid update.
	require.Equal(t, int64(1), e.state(t, b).Version)
	require.Equal(t, ts("2030-03-10T10:05:00Z"), e.state(t, b).NextFire)
	require.Equal(t, int64(1), e.state(t, a).Version)

	res, err = e.store.ApplyBatch(t.Context(), batchOf(noJob), time.Now())
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, store.ErrInvalidEvent)
}

func TestApplyBatchRunRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	live := newJob(ts("2030-03-10T10:01:30Z"))
	gone := newJob(ts("2030-03-10T10:01:30Z"))
	e.apply(t, created(live), store.Upserted)
	e.apply(t, created(gone), store.Upserted)
	nominal := ts("2030-03-10T10:02:03.5Z")
	tid, err := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex("b7ad6b7169203331")
	require.NoError(t, err)
	traced := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})

	run := runEvent(live, 1, nominal)
	events := batchOf(
		run,
		runEvent(live, 1, nominal), // the same slot again
		runEvent(gone, 1, nominal),
		event(kindDeleted, gone, 2, ts("2030-03-10T10:02:00Z")), // after the request in the batch, but it wins
		runEvent(live, 1, nominal.Add(time.Second)),
	)
	events[0].Trace = traced
	res, err := e.store.ApplyBatch(t.Context(), events, ts("2030-03-10T10:02:04Z"))
	require.NoError(t, err)
	require.Equal(t, []store.Applied{store.Fired, store.DuplicateRun, store.DroppedRun, store.Upserted, store.Fired}, applied(t, res))
	require.Len(t, e.ledger(t, live.Id), 2)
	require.Empty(t, e.ledger(t, gone.Id))
	rows := e.outbox(t)
	require.Len(t, rows, 2)
	var withTrace int
	for _, r := range rows {
		if r.Headers["traceparent"] == "00-"+tid.String()+"-"+sid.String()+"-01" {
			withTrace++
		}
	}
	require.Equal(t, 1, withTrace, "the first request's dispatch continues its trace")

	// Redelivered: recorded already.
	res, err = e.store.ApplyBatch(t.Context(), batchOf(run), ts("2030-03-10T10:02:05Z"))
	require.NoError(t, err)
	require.Equal(t, []store.Applied{store.DuplicateRun}, applied(t, res))
	require.Len(t, e.outbox(t), 2)
}

func TestApplyBatchConcurrentBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Batches of overlapping jobs applied at once lock their rows in one
	// order (no deadlock), and the newest version of each job wins.
	const jobs, versions, batches = 12, 15, 6
	var all []*eventsv1.JobEvent
	ids := make([]*registryv1.Job, jobs)
	for i := range ids {
		ids[i] = newJob(ts("2030-03-10T10:01:30Z"))
		e.apply(t, created(ids[i]), store.Upserted)
		for v := int64(2); v <= versions; v++ {
			j := proto.Clone(ids[i]).(*registryv1.Job)
			j.DisplayName = "v" + string(rune('a'+v))
			all = append(all, event(kindUpdated, j, v, ts("2030-03-10T10:02:00Z").Add(time.Duration(v)*time.Second)))
		}
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	var wg sync.WaitGroup
	errs := make(chan error, batches)
	per := (len(all) + batches - 1) / batches
	for chunk := range slices.Chunk(all, per) {
		wg.Go(func() {
			_, err := e.store.ApplyBatch(t.Context(), batchOf(chunk...), ts("2030-03-10T10:03:00Z"))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, job := range ids {
		st := e.state(t, job)
		require.Equal(t, int64(versions), st.Version)
		require.Equal(t, "v"+string(rune('a'+versions)), st.Job.DisplayName)
	}
}
