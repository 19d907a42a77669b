package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/ring"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// A job due for several loads is decoded once; a change to it is seen at
// the next load.
func TestDueJobsReusesDecodedJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := newJob(ts("2030-03-10T10:01:30Z"))
	e.apply(t, created(job), store.Upserted)
	load := func() *registryv1.Job {
		t.Helper()
		due, err := e.store.DueJobs(t.Context(), wholeLoads(allPartitions()), ts("2100-01-01T00:00:00Z"), 10)
		require.NoError(t, err)
		require.Len(t, due, 1)
		return due[0].Job
	}
	first := load()
	require.Same(t, first, load(), "an unchanged job is not decoded again")

	relabeled := proto.Clone(job).(*registryv1.Job)
	relabeled.Labels["team"] = "infra"
	e.apply(t, event(kindUpdated, relabeled, 2, ts("2030-03-10T10:02:00Z")), store.Upserted)
	changed := load()
	require.NotSame(t, first, changed)
	require.Equal(t, int64(2), changed.Version)
	require.Equal(t, "infra", changed.Labels["team"])
	require.NotEqual(t, "infra", first.Labels["team"], "the earlier load's job is left as it was")
}

func TestDueJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := ts("2030-03-10T10:00:00Z")
	type entry struct {
		job  *registryv1.Job
		next time.Time
	}
	var live []entry
	// Jobs every minute created at staggered seconds, so their first slots
	// are base+1m .. base+40m, in random id order.
	for i := range 40 {
		job := newJob(base.Add(time.Duration(i)*time.Minute), cron("* * * * *", ""))
		e.apply(t, created(job), store.Upserted)
		live = append(live, entry{job, base.Add(time.Duration(i+1) * time.Minute)})
	}
	paused := newJob(base, func(j *registryv1.Job) { j.Paused = true })
	e.apply(t, created(paused), store.Upserted)
	deleted := newJob(base)
	e.apply(t, created(deleted), store.Upserted)
	e.apply(t, event(kindDeleted, deleted, 2, base), store.Upserted)

	owned := []int{1, 3, 4, 6}
	tests := []struct {
		name   string
		parts  []int
		after  map[int]time.Time // After of the partitions named; zero for the others
		before time.Time
		limit  int
	}{
		{"owned partitions, horizon", owned, nil, base.Add(25 * time.Minute), 1000},
		{"owned partitions, limit", owned, nil, base.Add(time.Hour), 5},
		{"every partition", allPartitions(), nil, base.Add(time.Hour), 1000},
		{"horizon before every slot", allPartitions(), nil, base, 1000},
		{"no partitions", nil, nil, base.Add(time.Hour), 1000},
		{"no limit", allPartitions(), nil, base.Add(time.Hour), 0},
		{
			"new slots of some partitions, the others whole", allPartitions(),
			map[int]time.Time{1: base.Add(10 * time.Minute), 4: base.Add(20 * time.Minute), 6: base.Add(11*time.Minute + 30*time.Second)},
			base.Add(30 * time.Minute), 1000,
		},
		{
			"new slots, limit", owned,
			map[int]time.Time{1: base.Add(5 * time.Minute), 3: base.Add(5 * time.Minute), 4: base.Add(5 * time.Minute), 6: base.Add(5 * time.Minute)},
			base.Add(time.Hour), 4,
		},
		{"after the horizon", owned, map[int]time.Time{1: base.Add(time.Hour), 3: base.Add(time.Hour)}, base.Add(30 * time.Minute), 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var want []string
			for _, en := range live {
				st := e.state(t, en.job)
				if slices.Contains(tt.parts, st.Partition) && !en.next.After(tt.before) &&
					(tt.after[st.Partition].IsZero() || en.next.After(tt.after[st.Partition])) {
					want = append(want, en.job.Id)
				}
			}
			if len(want) > tt.limit {
				want = want[:tt.limit]
			}
			if len(want) == 0 {
				want = nil
			}
			loads := wholeLoads(tt.parts)
			for i := range loads {
				loads[i].After = tt.after[loads[i].Partition]
			}
			got, err := e.store.DueJobs(t.Context(), loads, tt.before, tt.limit)
			require.NoError(t, err)
			var ids []string
			for i, d := range got {
				ids = append(ids, d.JobID)
				if i > 0 {
					require.False(t, d.NextFire.Before(got[i-1].NextFire), "oldest first")
				}
				require.Equal(t, e.state(t, d.Job).Partition, d.Partition)
				require.Equal(t, int64(1), d.Version)
				require.Equal(t, d.JobID, d.Job.Id)
				require.NotEmpty(t, d.Job.GetTarget().GetHttp().GetSigningSecret())
			}
			require.Equal(t, want, ids)
		})
	}
}

// setup creates a job and returns it with its due entry.
func (e *env) setup(t testing.TB, mods ...func(*registryv1.Job)) (*registryv1.Job, firing.Due) {
	t.Helper()
	job := newJob(ts("2030-03-10T10:01:30Z"), mods...)
	e.apply(t, created(job), store.Upserted)
	return job, e.due(t, job)
}

// spreadWindow is the spread window of setupSpread's job.
const spreadWindow = 30 * time.Second

// setupSpread is setup for a job with a spread window and an id whose
// spread offset is not zero, so that its firing times differ from its
// nominal times; it returns that offset too.
func (e *env) setupSpread(t testing.TB, mods ...func(*registryv1.Job)) (*registryv1.Job, firing.Due, time.Duration) {
	t.Helper()
	job, d := e.setup(t, append([]func(*registryv1.Job){func(j *registryv1.Job) {
		j.Id = "0190d6c8-6f1e-7c2a-9d51-3b8f2a4e6c10"
		j.SpreadWindow = durationpb.New(spreadWindow)
	}}, mods...)...)
	spread := jobspec.SpreadOffset(job.Id, spreadWindow)
	require.NotZero(t, spread, "an id whose offset tells the firing time from the nominal time")
	return job, d, spread
}

// A commit writes its messages grouped: one outbox row per partition and
// routing key (priority), each message once, each job's in slot order.
func TestCommitGroupsOutboxRowsByPartitionAndRoutingKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var advances []firing.Advance
	for i := range 40 {
		_, d := e.setup(t, func(j *registryv1.Job) {
			j.Priority = []registryv1.Priority{registryv1.Priority_PRIORITY_HIGH, registryv1.Priority_PRIORITY_LOW}[i%2]
		})
		slots := []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}
		if i%5 == 0 { // a few jobs catch up on three slots
			slots = []firing.Slot{
				{Nominal: d.NextFire, Kind: firing.KindCatchUp},
				{Nominal: d.NextFire.Add(5 * time.Minute), Kind: firing.KindCatchUp},
				{Nominal: d.NextFire.Add(10 * time.Minute), Kind: firing.KindScheduled},
			}
		}
		advances = append(advances, firing.Advance{Due: d, Slots: slots, To: slots[len(slots)-1].Nominal.Add(5 * time.Minute)})
	}
	res, err := e.store.Commit(t.Context(), fences(1), advances, ts("2030-03-10T10:15:00Z"))
	require.NoError(t, err)
	require.Len(t, res.Advanced, 40)

	msgs := e.outbox(t)
	require.Len(t, msgs, 40+8*2, "a message per slot")
	pairs := map[string]bool{}
	nominals := map[string][]time.Time{}
	for _, m := range msgs {
		pairs[fmt.Sprint(ring.Partition(m.AggregateID, testPartitions), m.RoutingKey)] = true
		req := &dispatchv1.DispatchRequest{}
		require.NoError(t, proto.Unmarshal(m.Payload, req))
		nominals[m.AggregateID] = append(nominals[m.AggregateID], req.NominalTime.AsTime())
	}
	require.Equal(t, len(pairs), e.count(t, `SELECT count(*) FROM outbox`), "a row per partition and priority")
	require.Less(t, len(pairs), len(msgs))
	for job, ns := range nominals {
		require.True(t, slices.IsSortedFunc(ns, time.Time.Compare), "job %s: messages in slot order", job)
	}
}

// With OneRowPerMessage, every message is a row of its own, ordered by
// its job, as before grouped rows.
func TestCommitOneRowPerMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *store.Options) { o.OneRowPerMessage = true })
	var advances []firing.Advance
	for range 10 {
		_, d := e.setup(t)
		advances = append(advances, firing.Advance{Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: d.NextFire.Add(5 * time.Minute)})
	}
	_, err := e.store.Commit(t.Context(), fences(1), advances, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Len(t, e.outbox(t), 10)
	require.Equal(t, 10, e.count(t, `SELECT count(*) FROM outbox`))
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox WHERE aggregate_id LIKE 'partition:%'`), "aggregates are the jobs")
}

func TestCommitAdvances(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	e := newEnv(t, func(o *store.Options) { o.Propagator = propagation.TraceContext{} })
	job, d := e.setup(t)
	require.Equal(t, ts("2030-03-10T10:05:00Z"), d.NextFire)
	fire := ts("2030-03-10T10:05:00.012345678Z")
	ctx, span := tp.Tracer("test").Start(t.Context(), "fire")
	defer span.End()

	res, err := e.store.Commit(ctx, []firing.Fence{{Partition: d.Partition, Epoch: 7}}, []firing.Advance{{
		Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: ts("2030-03-10T10:10:00Z"),
	}}, fire)
	require.NoError(t, err)
	require.Equal(t, firing.CommitResult{Advanced: []string{job.Id}}, res)

	st := e.state(t, job)
	require.Equal(t, ts("2030-03-10T10:10:00Z"), st.NextFire)
	require.Equal(t, d.NextFire, st.LastNominal)
	execID := execid.For(job.Id, d.NextFire)
	require.Equal(t, []ledgerRow{{
		Nominal: d.NextFire, Kind: firing.KindScheduled, ExecID: execID, Record: fire.Truncate(time.Microsecond), Epoch: 7,
	}}, e.ledger(t, job.Id))
	parts, err := e.store.Partitions(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(7), parts[d.Partition].Epoch)
	require.Equal(t, testNode, parts[d.Partition].Owner)
	require.False(t, parts[d.Partition].UpdateTime.IsZero())

	rows := e.outbox(t)
	require.Len(t, rows, 1)
	require.Equal(t, testDispatch+"|dispatch.high", rows[0].RoutingKey)
	require.Equal(t, job.Id, rows[0].AggregateID)
	require.Equal(t, execID, rows[0].MessageID)
	require.Contains(t, rows[0].Headers["traceparent"], span.SpanContext().TraceID().String())
	got := &dispatchv1.DispatchRequest{}
	require.NoError(t, proto.Unmarshal(rows[0].Payload, got))
	want := &dispatchv1.DispatchRequest{
		ExecutionId:    execID,
		JobId:          job.Id,
		Namespace:      testNamespace,
		Attempt:        1,
		NominalTime:    timestamppb.New(d.NextFire),
		FireTime:       timestamppb.New(fire.Truncate(time.Microsecond)),
		TriggerKind:    dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
		Target:         job.Target,
		RetryPolicy:    job.RetryPolicy,
		Priority:       registryv1.Priority_PRIORITY_HIGH,
		JobVersion:     1,
		JobDisplayName: job.DisplayName,
		JobLabels:      job.Labels,
	}
	require.True(t, proto.Equal(want, got), "got %v\nwant %v", got, want)
	require.Len(t, e.notified, 1)

	// The job is no longer due at the old time; its next slot is.
	due, err := e.store.DueJobs(t.Context(), wholeLoads(allPartitions()), ts("2030-03-10T10:09:59Z"), 10)
	require.NoError(t, err)
	require.Empty(t, due)
}

func TestCommitStartsATracePerExecution(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	e := newEnv(t, func(o *store.Options) {
		o.Propagator = propagation.TraceContext{}
		o.Tracer = tp.Tracer("trigger")
	})
	_, d1 := e.setup(t)
	_, d2 := e.setup(t)
	ctx, batch := tp.Tracer("test").Start(t.Context(), "trigger.fire")
	defer batch.End()
	var advances []firing.Advance
	for _, d := range []firing.Due{d1, d2} {
		advances = append(advances, firing.Advance{Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: d.NextFire.Add(5 * time.Minute)})
	}
	_, err := e.store.Commit(ctx, fences(3), advances, d1.NextFire)
	require.NoError(t, err)

	rows := e.outbox(t)
	require.Len(t, rows, 2)
	byTrace := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range spans.Ended() {
		if sp.Name() == "trigger.execution" {
			byTrace[sp.SpanContext().TraceID().String()] = sp
		}
	}
	require.Len(t, byTrace, 2, "one root span per execution")
	for _, row := range rows {
		carrier := propagation.MapCarrier(row.Headers)
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(t.Context(), carrier))
		require.True(t, sc.IsValid(), "message %s carries a trace context", row.MessageID)
		require.NotEqual(t, batch.SpanContext().TraceID(), sc.TraceID(), "not the commit's trace")
		sp, ok := byTrace[sc.TraceID().String()]
		require.True(t, ok, "the message continues its execution's span")
		require.Equal(t, sc.SpanID(), sp.SpanContext().SpanID())
		require.False(t, sp.Parent().IsValid(), "a root span")
		require.Len(t, sp.Links(), 1)
		require.Equal(t, batch.SpanContext().SpanID(), sp.Links()[0].SpanContext.SpanID(), "linked to the commit")
		var execID string
		for _, kv := range sp.Attributes() {
			if kv.Key == "cronmesh.execution_id" {
				execID = kv.Value.AsString()
			}
		}
		require.Equal(t, row.MessageID, execID)
	}
}

func TestCommitRoutesByPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		priority registryv1.Priority
		key      string
	}{
		{registryv1.Priority_PRIORITY_UNSPECIFIED, "dispatch.normal"},
		{registryv1.Priority_PRIORITY_HIGH, "dispatch.high"},
		{registryv1.Priority_PRIORITY_NORMAL, "dispatch.normal"},
		{registryv1.Priority_PRIORITY_LOW, "dispatch.low"},
	}
	var advances []firing.Advance
	want := map[string]string{}
	for _, tt := range tests {
		job, d := e.setup(t, func(j *registryv1.Job) { j.Priority = tt.priority })
		advances = append(advances, firing.Advance{Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}})
		want[job.Id] = testDispatch + "|" + tt.key
		require.Equal(t, tt.key, store.DispatchRoutingKey(tt.priority))
	}
	res, err := e.store.Commit(t.Context(), fences(1), advances, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Len(t, res.Advanced, len(tests))
	got := map[string]string{}
	for _, r := range e.outbox(t) {
		got[r.AggregateID] = r.RoutingKey
	}
	require.Equal(t, want, got)
	// A zero To ends the job: no next slot.
	for _, a := range advances {
		st := e.state(t, a.Due.Job)
		require.True(t, st.NextFire.IsZero())
	}
}

func TestCommitFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job, d := e.setup(t)
	other, od := e.setup(t)
	for od.Partition == d.Partition {
		other, od = e.setup(t)
	}
	// A newer owner already committed partition d.Partition at epoch 10.
	_, err := e.pool.Exec(t.Context(), `UPDATE partitions SET epoch = 10, owner = 'node-b' WHERE partition = $1`, d.Partition)
	require.NoError(t, err)

	advance := func(d firing.Due) firing.Advance {
		return firing.Advance{Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: d.NextFire.Add(5 * time.Minute)}
	}
	res, err := e.store.Commit(t.Context(),
		[]firing.Fence{{Partition: d.Partition, Epoch: 9}, {Partition: od.Partition, Epoch: 9}},
		[]firing.Advance{advance(d), advance(od)}, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Equal(t, firing.CommitResult{Fenced: []int{d.Partition}, Advanced: []string{other.Id}}, res)

	// Nothing of the fenced partition was written, and its epoch stands.
	require.Equal(t, d.NextFire, e.state(t, job).NextFire)
	require.Empty(t, e.ledger(t, job.Id))
	parts, err := e.store.Partitions(t.Context())
	require.NoError(t, err)
	require.Equal(t, store.PartitionState{Partition: d.Partition, Epoch: 10, Owner: "node-b"}, parts[d.Partition])
	require.Equal(t, int64(9), parts[od.Partition].Epoch)
	rows := e.outbox(t)
	require.Len(t, rows, 1)
	require.Equal(t, other.Id, rows[0].AggregateID)

	// An advance whose partition has no fence is fenced too.
	res, err = e.store.Commit(t.Context(), nil, []firing.Advance{advance(d)}, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Equal(t, firing.CommitResult{Fenced: []int{d.Partition}}, res)

	// The same epoch as the stored one commits (the owner's own commits).
	res, err = e.store.Commit(t.Context(), []firing.Fence{{Partition: d.Partition, Epoch: 10}}, []firing.Advance{advance(d)}, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Equal(t, []string{job.Id}, res.Advanced)
}

func TestCommitAfterAClaimIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job, d := e.setup(t)
	advance := firing.Advance{Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: d.NextFire.Add(5 * time.Minute)}
	fence := []firing.Fence{{Partition: d.Partition, Epoch: 4}}
	// This node claims epoch 4 with a first commit of another job...
	_, od := e.setup(t)
	for od.Partition != d.Partition {
		_, od = e.setup(t)
	}
	res, err := e.store.Commit(t.Context(), fence, []firing.Advance{{Due: od, Slots: []firing.Slot{{Nominal: od.NextFire, Kind: firing.KindScheduled}}}}, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Len(t, res.Advanced, 1)

	// ...and a commit of it is in flight (its share lock held) when another
	// node, the new owner, claims epoch 5: the claim waits for it.
	tx, err := e.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var holder int
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT pg_backend_pid() FROM partitions WHERE partition = $1 AND epoch = 4 FOR SHARE`, d.Partition).Scan(&holder))
	newOwner, err := store.New(store.Options{Pool: e.pool, Partitions: testPartitions, NodeID: "node-b"})
	require.NoError(t, err)
	claimed := make(chan error, 1)
	go func() {
		_, err := newOwner.Commit(context.Background(), []firing.Fence{{Partition: d.Partition, Epoch: 5}}, nil, ts("2030-03-10T10:05:00Z"))
		claimed <- err
	}()
	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, holder) > 0
	}, 10*time.Second, 10*time.Millisecond, "the claim waits for the commit in flight")
	require.NoError(t, tx.Commit(t.Context()))
	require.NoError(t, <-claimed)

	// From now on this node's commits at epoch 4 are fenced.
	res, err = e.store.Commit(t.Context(), fence, []firing.Advance{advance}, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Equal(t, firing.CommitResult{Fenced: []int{d.Partition}}, res)
	require.Equal(t, d.NextFire, e.state(t, job).NextFire)
	parts, err := e.store.Partitions(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(5), parts[d.Partition].Epoch)
	require.Equal(t, "node-b", parts[d.Partition].Owner)
}

func TestCommitStale(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job, d := e.setup(t)
	fresh, fd := e.setup(t)
	// The job changes between loading and committing.
	changed := proto.Clone(job).(*registryv1.Job)
	changed.DisplayName = "renamed"
	e.apply(t, event(kindUpdated, changed, 2, ts("2030-03-10T10:02:00Z")), store.Upserted)
	// And another's next fire time moved (a commit by someone else).
	moved := fd
	moved.NextFire = fd.NextFire.Add(-time.Minute)

	advances := []firing.Advance{
		{Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: d.NextFire.Add(5 * time.Minute)},
		{Due: moved, Slots: []firing.Slot{{Nominal: moved.NextFire, Kind: firing.KindScheduled}}, To: fd.NextFire},
	}
	res, err := e.store.Commit(t.Context(), fences(1), advances, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{job.Id, fresh.Id}, res.Stale)
	require.Empty(t, res.Advanced)
	require.Empty(t, e.ledger(t, job.Id))
	require.Empty(t, e.ledger(t, fresh.Id))
	require.Empty(t, e.outbox(t))
	require.Equal(t, d.NextFire, e.state(t, job).NextFire)
	require.Empty(t, e.notified)

	// An advance claiming the wrong partition cannot commit under its fence.
	wrong := e.due(t, job)
	wrong.Partition = (wrong.Partition + 1) % testPartitions
	res, err = e.store.Commit(t.Context(), fences(1), []firing.Advance{{Due: wrong, To: wrong.NextFire.Add(time.Minute)}}, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Equal(t, firing.CommitResult{Stale: []string{job.Id}}, res)

	// An advance of a job twice in one batch: the second is stale.
	d2 := e.due(t, job)
	a := firing.Advance{Due: d2, Slots: []firing.Slot{{Nominal: d2.NextFire, Kind: firing.KindScheduled}}, To: d2.NextFire.Add(5 * time.Minute)}
	res, err = e.store.Commit(t.Context(), fences(1), []firing.Advance{a, a}, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Equal(t, firing.CommitResult{Advanced: []string{job.Id}, Stale: []string{job.Id}}, res)
	require.Len(t, e.outbox(t), 1)
}

func TestCommitDuplicateSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job, d := e.setup(t)
	// The slot is already in the ledger (here: a manual run that happened
	// to take the same nominal time; in life: another commit).
	e.apply(t, runEvent(job, 1, d.NextFire), store.Fired)
	require.Len(t, e.outbox(t), 1)
	next := d.NextFire.Add(5 * time.Minute)
	res, err := e.store.Commit(t.Context(), fences(1), []firing.Advance{{
		Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: next,
	}}, ts("2030-03-10T10:05:00Z"))
	require.NoError(t, err)
	require.Equal(t, firing.CommitResult{Advanced: []string{job.Id}, Duplicates: 1}, res)
	require.Len(t, e.outbox(t), 1, "not published again")
	require.Equal(t, firing.KindManual, e.ledger(t, job.Id)[0].Kind)
	require.Equal(t, next, e.state(t, job).NextFire)
}

func TestCommitMissedAndCatchUp(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	e := newEnv(t)
	job, d := e.setup(t)
	// After downtime: the first two slots are older than the catch-up
	// window, the next two fire late.
	slots := []firing.Slot{
		{Nominal: d.NextFire, Kind: firing.KindMissed, Reason: "older than the catch-up window"},
		{Nominal: d.NextFire.Add(5 * time.Minute), Kind: firing.KindMissed, Reason: "older than the catch-up window"},
		{Nominal: d.NextFire.Add(10 * time.Minute), Kind: firing.KindCatchUp},
		{Nominal: d.NextFire.Add(15 * time.Minute), Kind: firing.KindScheduled},
	}
	fire := d.NextFire.Add(15*time.Minute + 30*time.Millisecond)
	ctx, span := tp.Tracer("test").Start(t.Context(), "fire")
	defer span.End()
	res, err := e.store.Commit(ctx, fences(3), []firing.Advance{{Due: d, Slots: slots, To: d.NextFire.Add(20 * time.Minute)}}, fire)
	require.NoError(t, err)
	require.Equal(t, firing.CommitResult{Advanced: []string{job.Id}}, res)

	ledger := e.ledger(t, job.Id)
	require.Len(t, ledger, 4)
	for i, l := range ledger {
		require.Equal(t, slots[i].Nominal, l.Nominal)
		require.Equal(t, slots[i].Kind, l.Kind)
		require.Equal(t, slots[i].Reason, l.Reason)
		require.Equal(t, int64(3), l.Epoch)
	}
	require.Equal(t, slots[3].Nominal, e.state(t, job).LastNominal)

	rows := e.outbox(t)
	require.Len(t, rows, 3, "one message for both missed slots, one per fired slot")
	require.Equal(t, testExecutions+"|execution.missed", rows[0].RoutingKey)
	require.Equal(t, job.Id, rows[0].AggregateID)
	batch := &eventsv1.ExecutionEventBatch{}
	require.NoError(t, proto.Unmarshal(rows[0].Payload, batch))
	require.Len(t, batch.Events, 2)
	for i, ev := range batch.Events {
		require.NotEmpty(t, ev.EventId)
		ev.EventId = ""
		want := &eventsv1.ExecutionEvent{
			Kind:        eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED,
			ExecutionId: execid.For(job.Id, slots[i].Nominal),
			JobId:       job.Id,
			Namespace:   testNamespace,
			NominalTime: timestamppb.New(slots[i].Nominal),
			OccurTime:   timestamppb.New(fire),
			TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
			Reason:      "older than the catch-up window",
			TraceId:     span.SpanContext().TraceID().String(),
			// The commit's context: the history's and alerting's spans of
			// the event join the trace the history shows for the slot.
			TraceContext:   map[string]string{"traceparent": "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"},
			JobDisplayName: job.DisplayName,
			JobLabels:      job.Labels,
		}
		require.True(t, proto.Equal(want, ev), "got %v\nwant %v", ev, want)
	}
	for i, kind := range []dispatchv1.TriggerKind{dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP, dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED} {
		req := &dispatchv1.DispatchRequest{}
		require.NoError(t, proto.Unmarshal(rows[1+i].Payload, req))
		require.Equal(t, kind, req.TriggerKind)
		require.Equal(t, slots[2+i].Nominal, req.NominalTime.AsTime())
		require.Equal(t, rows[1+i].MessageID, req.ExecutionId)
	}
}

// A fired slot's message is due at the slot's firing time, nominal plus
// the job's spread offset, the instant the fire lateness counts from: the
// relay times the broker's confirm from it. A missed slot's carries none.
func TestCommitDueAtFiringTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, d, spread := e.setupSpread(t)
	slots := []firing.Slot{
		{Nominal: d.NextFire, Kind: firing.KindMissed, Reason: "older than the catch-up window"},
		{Nominal: d.NextFire.Add(5 * time.Minute), Kind: firing.KindCatchUp},
		{Nominal: d.NextFire.Add(10 * time.Minute), Kind: firing.KindScheduled},
	}
	fire := slots[2].Nominal.Add(spread + 20*time.Millisecond)
	_, err := e.store.Commit(t.Context(), fences(1), []firing.Advance{{Due: d, Slots: slots, To: d.NextFire.Add(15 * time.Minute)}}, fire)
	require.NoError(t, err)

	rows := e.outbox(t)
	require.Len(t, rows, 3)
	require.Equal(t, testExecutions+"|execution.missed", rows[0].RoutingKey)
	require.True(t, rows[0].DueAt.IsZero(), "missed slots are not dispatched")
	for i, row := range rows[1:] {
		firingTime := slots[1+i].Nominal.Add(spread)
		require.Equal(t, firingTime.UnixNano(), row.DueAt.UnixNano(), "slot %d", 1+i)
	}
}

// TestCommitAheadSetsNotBefore: a slot committed before its firing time
// (the engine's lead) asks the dispatcher to hold it until then; a slot
// committed after its time does not.
func TestCommitAheadSetsNotBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, d, spread := e.setupSpread(t)
	slots := []firing.Slot{
		{Nominal: d.NextFire, Kind: firing.KindCatchUp},
		{Nominal: d.NextFire.Add(5 * time.Minute), Kind: firing.KindScheduled},
	}
	ahead := slots[1].Nominal.Add(spread)
	fire := ahead.Add(-800 * time.Millisecond)
	_, err := e.store.Commit(t.Context(), fences(1), []firing.Advance{{Due: d, Slots: slots, To: d.NextFire.Add(10 * time.Minute)}}, fire)
	require.NoError(t, err)

	rows := e.outbox(t)
	require.Len(t, rows, 2)
	reqs := make([]*dispatchv1.DispatchRequest, len(rows))
	for i, row := range rows {
		reqs[i] = &dispatchv1.DispatchRequest{}
		require.NoError(t, proto.Unmarshal(row.Payload, reqs[i]))
	}
	require.Nil(t, reqs[0].GetNotBefore(), "a slot past its time is delivered when taken")
	require.Equal(t, ahead.UnixNano(), reqs[1].GetNotBefore().AsTime().UnixNano())
	require.Equal(t, fire.Truncate(time.Microsecond).UnixNano(), reqs[1].GetFireTime().AsTime().UnixNano())
}

func TestCommitEmptyAndCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res, err := e.store.Commit(t.Context(), nil, nil, time.Now())
	require.NoError(t, err)
	require.Equal(t, firing.CommitResult{}, res)

	job, d := e.setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = e.store.Commit(ctx, fences(1), []firing.Advance{{Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}}}, time.Now())
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, e.ledger(t, job.Id))
	require.Equal(t, d.NextFire, e.state(t, job).NextFire)
}

func TestTriggerKind(t *testing.T) {
	t.Parallel()
	for kind, want := range map[firing.SlotKind]dispatchv1.TriggerKind{
		firing.KindScheduled: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
		firing.KindManual:    dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL,
		firing.KindBackfill:  dispatchv1.TriggerKind_TRIGGER_KIND_BACKFILL,
		firing.KindCatchUp:   dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP,
		firing.KindMissed:    dispatchv1.TriggerKind_TRIGGER_KIND_UNSPECIFIED,
	} {
		require.Equal(t, want, store.TriggerKind(kind), "kind %d", kind)
	}
}
