package store_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/ring"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

const (
	kindCreated = eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED
	kindUpdated = eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED
	kindDeleted = eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED
	kindPaused  = eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED
	kindResumed = eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED
)

func TestApplyCreatedNextFire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createTime := ts("2030-03-10T07:30:00.25Z")
	tests := []struct {
		name    string
		created time.Time
		mod     func(*registryv1.Job)
		want    time.Time // zero: no slot
	}{
		{name: "cron in a zone", mod: cron("0 9 * * *", "Europe/Berlin"), want: ts("2030-03-10T08:00:00Z")},
		{name: "cron slot in the spring-forward gap fires at the gap's end", created: ts("2030-03-30T12:00:00Z"),
			mod: cron("30 2 * * *", "Europe/Berlin"), want: ts("2030-03-31T01:00:00Z")},
		{name: "cron with seconds", mod: cron("*/20 * * * * *", ""), want: ts("2030-03-10T07:30:20Z")},
		{name: "interval anchored at the create time rounded up", mod: func(j *registryv1.Job) {
			j.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{Every: durationpb.New(90 * time.Second)}}}
		}, want: ts("2030-03-10T07:30:01Z")},
		{name: "interval with an anchor", mod: func(j *registryv1.Job) {
			j.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{
				Every: durationpb.New(time.Hour), AnchorTime: timestamppb.New(ts("2030-01-01T00:00:10Z"))}}}
		}, want: ts("2030-03-10T08:00:10Z")},
		{name: "at in the future", mod: func(j *registryv1.Job) {
			j.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: timestamppb.New(ts("2030-03-11T00:00:00Z"))}}
		}, want: ts("2030-03-11T00:00:00Z")},
		{name: "at before creation is done", mod: func(j *registryv1.Job) {
			j.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: timestamppb.New(ts("2030-03-01T00:00:00Z"))}}
		}},
		{name: "after a delay", mod: func(j *registryv1.Job) {
			j.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_After{After: durationpb.New(10 * time.Minute)}}
		}, want: ts("2030-03-10T07:40:01Z")},
		{name: "end time before the first slot", mod: func(j *registryv1.Job) {
			j.Schedule.EndTime = timestamppb.New(ts("2030-03-10T07:31:00Z"))
		}},
		{name: "start time", mod: func(j *registryv1.Job) {
			j.Schedule.StartTime = timestamppb.New(ts("2030-04-01T00:00:00Z"))
		}, want: ts("2030-04-01T00:00:00Z")},
		{name: "created paused", mod: func(j *registryv1.Job) { j.Paused = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := newJob(createTime, tt.mod)
			if !tt.created.IsZero() {
				job.CreateTime = timestamppb.New(tt.created)
			}
			e.apply(t, created(job), store.Upserted)
			st := e.state(t, job)
			require.True(t, tt.want.Equal(st.NextFire), "next fire %s, want %s", st.NextFire, tt.want)
			require.Equal(t, job.Paused, st.Paused)
			require.Equal(t, int64(1), st.Version)
		})
	}
}

func TestApplyStoresSpecWithSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T07:30:00Z"))
	e.apply(t, created(job), store.Upserted)
	st := e.state(t, job)
	want := proto.Clone(job).(*registryv1.Job)
	want.Etag, want.UpdateTime, want.Description = "", nil, ""
	require.True(t, proto.Equal(want, st.Job), "stored %v\nwant %v", st.Job, want)
	require.Equal(t, "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", st.Job.GetTarget().GetHttp().GetSigningSecret())
	require.Equal(t, ring.Partition(job.Id, testPartitions), st.Partition)
}

func TestApplyLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:30Z"))
	every10 := proto.Clone(job).(*registryv1.Job)
	cron("*/10 * * * *", "")(every10)

	steps := []struct {
		name     string
		ev       *eventsv1.JobEvent
		want     store.Applied
		version  int64
		paused   bool
		next     time.Time
		notFound bool
	}{
		{name: "created", ev: created(job), want: store.Upserted, version: 1, next: ts("2030-03-10T10:05:00Z")},
		{name: "created again", ev: created(job), want: store.Stale, version: 1, next: ts("2030-03-10T10:05:00Z")},
		{name: "schedule changed", ev: event(kindUpdated, every10, 2, ts("2030-03-10T10:02:00Z")),
			want: store.Upserted, version: 2, next: ts("2030-03-10T10:10:00Z")},
		{name: "paused", ev: event(kindPaused, every10, 3, ts("2030-03-10T10:03:00Z")), want: store.Upserted, version: 3, paused: true},
		{name: "older update", ev: event(kindUpdated, job, 2, ts("2030-03-10T10:02:00Z")), want: store.Stale, version: 3, paused: true},
		{name: "resumed: slots while paused are not fired", ev: event(kindResumed, every10, 4, ts("2030-03-10T10:31:00Z")),
			want: store.Upserted, version: 4, next: ts("2030-03-10T10:40:00Z")},
		{name: "deleted", ev: event(kindDeleted, every10, 5, ts("2030-03-10T10:32:00Z")), want: store.Upserted, notFound: true},
		{name: "late update cannot resurrect", ev: event(kindUpdated, every10, 4, ts("2030-03-10T10:31:00Z")), want: store.Stale, notFound: true},
		{name: "late create cannot resurrect", ev: created(job), want: store.Stale, notFound: true},
	}
	for _, step := range steps {
		got, err := e.store.Apply(t.Context(), step.ev, step.ev.OccurTime.AsTime())
		require.NoError(t, err, step.name)
		require.Equal(t, step.want, got, step.name)
		st, err := e.store.Job(t.Context(), job.Namespace, job.Id)
		if step.notFound {
			require.ErrorIs(t, err, store.ErrNotFound, step.name)
			continue
		}
		require.NoError(t, err, step.name)
		require.Equal(t, step.version, st.Version, step.name)
		require.Equal(t, step.paused, st.Paused, step.name)
		require.True(t, step.next.Equal(st.NextFire), "%s: next fire %s, want %s", step.name, st.NextFire, step.next)
	}
	// The tombstone keeps no definition (and so no secret) and no slot.
	var deleted bool
	var spec []byte
	var next *time.Time
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT deleted, spec, next_fire_at FROM jobs WHERE job_id = $1`, job.Id).
		Scan(&deleted, &spec, &next))
	require.True(t, deleted)
	require.Empty(t, spec)
	require.Nil(t, next)
	due, err := e.store.DueJobs(t.Context(), wholeLoads(allPartitions()), ts("2100-01-01T00:00:00Z"), 100)
	require.NoError(t, err)
	require.Empty(t, due)
}

func TestApplyUpdateBeforeCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:30Z"))
	// The update overtakes the create: no slot of the job was handled yet,
	// so the next one is the first after creation, not after the update.
	e.apply(t, event(kindUpdated, job, 2, ts("2030-03-10T10:20:00Z")), store.Upserted)
	require.Equal(t, ts("2030-03-10T10:05:00Z"), e.state(t, job).NextFire)
	e.apply(t, created(job), store.Stale)
	require.Equal(t, int64(2), e.state(t, job).Version)
}

func TestApplyUpdateKeepsDueSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:30Z"))
	e.apply(t, created(job), store.Upserted)
	// The 10:05 slot is due but not committed yet (the engine lags or is
	// down) when an unrelated change arrives at 10:07: the slot stays.
	relabeled := proto.Clone(job).(*registryv1.Job)
	relabeled.Labels["team"] = "infra"
	e.apply(t, event(kindUpdated, relabeled, 2, ts("2030-03-10T10:07:00Z")), store.Upserted)
	st := e.state(t, job)
	require.Equal(t, ts("2030-03-10T10:05:00Z"), st.NextFire)
	require.Equal(t, "infra", st.Job.Labels["team"])
}

func TestApplyNeverRefiresCommittedSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:30Z"))
	e.apply(t, created(job), store.Upserted)
	d := e.due(t, job)
	res, err := e.store.Commit(t.Context(), fences(1), []firing.Advance{{
		Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: ts("2030-03-10T10:10:00Z"),
	}}, ts("2030-03-10T10:05:00.01Z"))
	require.NoError(t, err)
	require.Equal(t, []string{job.Id}, res.Advanced)
	require.Equal(t, ts("2030-03-10T10:05:00Z"), e.state(t, job).LastNominal)
	// An update made at 10:04 (before the slot fired) arrives late, with a
	// schedule whose next slot after 10:04 is 10:05 again: not re-fired.
	changed := proto.Clone(job).(*registryv1.Job)
	cron("*/5 * * * *", "UTC")(changed)
	e.apply(t, event(kindUpdated, changed, 2, ts("2030-03-10T10:04:00Z")), store.Upserted)
	require.Equal(t, ts("2030-03-10T10:10:00Z"), e.state(t, job).NextFire)
}

func TestApplyConcurrentVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:30Z"))
	const versions = 20
	events := make([]*eventsv1.JobEvent, 0, versions)
	events = append(events, created(job))
	for v := int64(2); v <= versions; v++ {
		j := proto.Clone(job).(*registryv1.Job)
		j.DisplayName = "v" + string(rune('a'+v))
		events = append(events, event(kindUpdated, j, v, ts("2030-03-10T10:02:00Z").Add(time.Duration(v)*time.Second)))
	}
	rand.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	var wg sync.WaitGroup
	errs := make(chan error, len(events))
	for _, ev := range events {
		wg.Go(func() {
			_, err := e.store.Apply(t.Context(), ev, ev.OccurTime.AsTime())
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st := e.state(t, job)
	require.Equal(t, int64(versions), st.Version)
	require.Equal(t, "v"+string(rune('a'+versions)), st.Job.DisplayName)
}

func TestApplyRunRequested(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:30Z"))
	nominal := ts("2030-03-10T10:02:03.123456Z")
	run := runEvent(job, 1, nominal)
	rerunOf := execid.For(job.Id, ts("2030-03-09T10:00:00Z"))
	run.RerunOfExecutionId, run.RunOverrides = rerunOf, []string{"target", "body"}

	// Before the job's CREATED event: fired from the event's job.
	e.apply(t, run, store.Fired)
	e.apply(t, run, store.DuplicateRun)
	require.Equal(t, []ledgerRow{{
		Nominal: nominal, Kind: firing.KindManual, ExecID: execid.For(job.Id, nominal), Record: nominal, Epoch: 0,
	}}, e.ledger(t, job.Id))
	rows := e.outbox(t)
	require.Len(t, rows, 1)
	require.Equal(t, testDispatch+"|dispatch.high", rows[0].RoutingKey)
	require.Equal(t, execid.For(job.Id, nominal), rows[0].MessageID)
	require.Equal(t, job.Id, rows[0].AggregateID)
	req := &dispatchv1.DispatchRequest{}
	require.NoError(t, proto.Unmarshal(rows[0].Payload, req))
	require.Equal(t, dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL, req.TriggerKind)
	require.Equal(t, nominal, req.NominalTime.AsTime())
	require.Equal(t, int32(1), req.Attempt)
	require.Equal(t, rerunOf, req.RerunOfExecutionId, "the history learns which execution the run re-runs")
	require.Equal(t, []string{"target", "body"}, req.OverriddenFields, "and what the run overrode")
	require.Equal(t, "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", req.Target.GetHttp().GetSigningSecret())
	require.True(t, rows[0].DueAt.IsZero(), "a run-now is not the firing promise")
	require.Len(t, e.notified, 1)

	// The job row is untouched by a run request.
	_, err := e.store.Job(t.Context(), job.Namespace, job.Id)
	require.ErrorIs(t, err, store.ErrNotFound)

	// After the delete, a late run request is dropped.
	e.apply(t, created(job), store.Upserted)
	e.apply(t, event(kindDeleted, job, 2, ts("2030-03-10T10:03:00Z")), store.Upserted)
	e.apply(t, runEvent(job, 1, ts("2030-03-10T10:02:59Z")), store.DroppedRun)
	require.Len(t, e.ledger(t, job.Id), 1)
	require.Len(t, e.outbox(t), 1)
}

func TestApplyInvalidEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	valid := func() *eventsv1.JobEvent { return created(newJob(ts("2030-03-10T10:01:30Z"))) }
	tests := []struct {
		name string
		mod  func(*eventsv1.JobEvent)
	}{
		{name: "no job", mod: func(ev *eventsv1.JobEvent) { ev.Job = nil }},
		{name: "id not a UUID", mod: func(ev *eventsv1.JobEvent) { ev.Job.Id = "job-1" }},
		{name: "no namespace", mod: func(ev *eventsv1.JobEvent) { ev.Job.Namespace = "" }},
		{name: "no version", mod: func(ev *eventsv1.JobEvent) { ev.Version = 0 }},
		{name: "unknown kind", mod: func(ev *eventsv1.JobEvent) { ev.Kind = 99 }},
		{name: "bad cron", mod: func(ev *eventsv1.JobEvent) { cron("61 * * * *", "")(ev.Job) }},
		{name: "bad zone", mod: func(ev *eventsv1.JobEvent) { cron("* * * * *", "Mars/Olympus")(ev.Job) }},
		{name: "no create time", mod: func(ev *eventsv1.JobEvent) { ev.Job.CreateTime = nil }},
		{name: "run without nominal time", mod: func(ev *eventsv1.JobEvent) {
			ev.Kind = eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED
		}},
		{name: "run without target", mod: func(ev *eventsv1.JobEvent) {
			ev.Kind = eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED
			ev.RunRequest = &eventsv1.RunRequest{NominalTime: timestamppb.Now()}
			ev.Job.Target = nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := valid()
			tt.mod(ev)
			_, err := e.store.Apply(t.Context(), ev, time.Now())
			require.ErrorIs(t, err, store.ErrInvalidEvent)
		})
	}
	_, err := e.store.Apply(t.Context(), nil, time.Now())
	require.ErrorIs(t, err, store.ErrInvalidEvent)
	require.Zero(t, e.count(t, `SELECT count(*) FROM jobs`))
}

func TestEnsurePartitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	parts, err := e.store.Partitions(t.Context())
	require.NoError(t, err)
	require.Len(t, parts, testPartitions)
	for i, p := range parts {
		require.Equal(t, store.PartitionState{Partition: i}, p)
	}
	require.NoError(t, e.store.EnsurePartitions(t.Context(), testPartitions), "same count again")
	err = e.store.EnsurePartitions(t.Context(), 2*testPartitions)
	require.ErrorIs(t, err, store.ErrPartitionCountChanged)
	require.Equal(t, testPartitions, e.count(t, `SELECT count(*) FROM partitions`))
	require.Error(t, e.store.EnsurePartitions(t.Context(), 0))
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := store.New(store.Options{Partitions: 1})
	require.Error(t, err)
	e := newEnv(t)
	_, err = store.New(store.Options{Pool: e.pool})
	require.Error(t, err)
}

func TestJobNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:30Z"))
	e.apply(t, created(job), store.Upserted)
	for _, tt := range []struct{ name, namespace, id string }{
		{"other namespace", "beta", job.Id},
		{"unknown id", testNamespace, uuid.NewString()},
		{"not a UUID", testNamespace, "nope"},
	} {
		_, err := e.store.Job(t.Context(), tt.namespace, tt.id)
		require.ErrorIs(t, err, store.ErrNotFound, tt.name)
	}
}
