package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/ring"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

const (
	testPartitions = 8
	testNode       = "node-a"
	testDispatch   = "test.dispatch"
	testExecutions = "test.executions"
	testNamespace  = "alpha"
)

// env is a store on a fresh, migrated schema with its partitions created.
type env struct {
	pool  *pgxpool.Pool
	store *store.Store
	// notified counts Notify calls.
	notified chan struct{}
}

func newEnv(t testing.TB, mods ...func(*store.Options)) *env {
	t.Helper()
	pool, schema := pgtest.New(t)
	migrations, err := store.Migrations()
	require.NoError(t, err)
	_, err = migrate.ApplyAll(t.Context(), pool, schema, migrations)
	require.NoError(t, err)
	e := &env{pool: pool, notified: make(chan struct{}, 1_000_000)}
	opts := store.Options{
		Pool:               pool,
		Partitions:         testPartitions,
		NodeID:             testNode,
		DispatchExchange:   testDispatch,
		ExecutionsExchange: testExecutions,
		Notify:             func() { e.notified <- struct{}{} },
	}
	for _, m := range mods {
		m(&opts)
	}
	e.store, err = store.New(opts)
	require.NoError(t, err)
	require.NoError(t, e.store.EnsurePartitions(t.Context(), testPartitions))
	return e
}

// ts parses an RFC 3339 time.
func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// newJob is a valid job created at created, running every five minutes,
// modified by mods.
func newJob(created time.Time, mods ...func(*registryv1.Job)) *registryv1.Job {
	job := &registryv1.Job{
		Id:          uuid.Must(uuid.NewV7()).String(),
		Namespace:   testNamespace,
		DisplayName: "nightly report",
		Description: "long text the trigger does not keep",
		Labels:      map[string]string{"team": "data"},
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "*/5 * * * *"}},
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method: "POST", Url: "https://example.com/hook", SigningSecret: "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0",
		}}},
		RetryPolicy:   &registryv1.RetryPolicy{MaxRetries: proto.Int32(3), InitialBackoff: durationpb.New(time.Second)},
		CatchUpWindow: durationpb.New(time.Hour),
		Priority:      registryv1.Priority_PRIORITY_HIGH,
		CreateTime:    timestamppb.New(created),
		UpdateTime:    timestamppb.New(created),
		Etag:          "djE",
		Version:       1,
	}
	for _, m := range mods {
		m(job)
	}
	return job
}

// cron sets a cron schedule in zone.
func cron(expr, zone string) func(*registryv1.Job) {
	return func(j *registryv1.Job) {
		j.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: expr}, TimeZone: zone}
	}
}

// event is a job event of kind for job at version, occurring at occur.
func event(kind eventsv1.JobEventKind, job *registryv1.Job, version int64, occur time.Time) *eventsv1.JobEvent {
	job = proto.Clone(job).(*registryv1.Job)
	job.Version = version
	switch kind {
	case eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED:
		job.Paused = true
	case eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED:
		job.Paused = false
	}
	return &eventsv1.JobEvent{
		EventId:   uuid.Must(uuid.NewV7()).String(),
		Kind:      kind,
		Job:       job,
		Version:   version,
		OccurTime: timestamppb.New(occur),
	}
}

func created(job *registryv1.Job) *eventsv1.JobEvent {
	return event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, job, 1, job.CreateTime.AsTime())
}

// runEvent is a run request of job at nominal.
func runEvent(job *registryv1.Job, version int64, nominal time.Time) *eventsv1.JobEvent {
	ev := event(eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED, job, version, nominal)
	ev.RunRequest = &eventsv1.RunRequest{NominalTime: timestamppb.New(nominal), RequestId: "req-1"}
	return ev
}

// apply applies ev and requires outcome.
func (e *env) apply(t testing.TB, ev *eventsv1.JobEvent, want store.Applied) {
	t.Helper()
	got, err := e.store.Apply(t.Context(), ev, ev.OccurTime.AsTime())
	require.NoError(t, err)
	require.Equal(t, want, got, "apply %v v%d", ev.Kind, ev.Version)
}

// state returns the store's state of job, requiring it to exist.
func (e *env) state(t testing.TB, job *registryv1.Job) store.JobState {
	t.Helper()
	st, err := e.store.Job(t.Context(), job.Namespace, job.Id)
	require.NoError(t, err)
	return st
}

// due returns the due entry of job (its next slot at or before the far
// future).
func (e *env) due(t testing.TB, job *registryv1.Job) firing.Due {
	t.Helper()
	st := e.state(t, job)
	all, err := e.store.DueJobs(t.Context(), wholeLoads([]int{st.Partition}), ts("2100-01-01T00:00:00Z"), 10_000)
	require.NoError(t, err)
	for _, d := range all {
		if d.JobID == job.Id {
			return d
		}
	}
	t.Fatalf("job %s is not due", job.Id)
	return firing.Due{}
}

// ledgerRow is a ledger row as the tests read it.
type ledgerRow struct {
	Nominal time.Time
	Kind    firing.SlotKind
	ExecID  string
	Record  time.Time
	Epoch   int64
	Reason  string
}

func (e *env) ledger(t testing.TB, jobID string) []ledgerRow {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), `
		SELECT nominal_time, kind, execution_id::text, record_time, epoch, reason FROM ledger
		WHERE job_id = $1 ORDER BY nominal_time`, jobID)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledgerRow, error) {
		var l ledgerRow
		var kind int16
		err := r.Scan(&l.Nominal, &kind, &l.ExecID, &l.Record, &l.Epoch, &l.Reason)
		l.Kind, l.Nominal, l.Record = firing.SlotKind(kind), l.Nominal.UTC(), l.Record.UTC()
		return l, err
	})
	require.NoError(t, err)
	return out
}

// outboxRow is an outbox message as the tests read it.
type outboxRow struct {
	// AggregateID is the job the message is of (read from its payload:
	// the rows of outbox.WriteGrouped have their partition's aggregate).
	AggregateID string
	RoutingKey  string
	MessageID   string
	Payload     []byte
	Headers     map[string]string
	DueAt       time.Time
}

// outbox returns the outbox's messages, row after row in id order and
// each row's in order, after asserting that every message is in its
// job's partition (the node owning that partition is the one whose relay
// publishes it) and every row has its partition's aggregate (or, a row of
// outbox.Write, its job's).
func (e *env) outbox(t testing.TB) []outboxRow {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), `SELECT aggregate_id, routing_key, message_id, payload, headers, partition FROM outbox ORDER BY id`)
	require.NoError(t, err)
	stored, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outbox.Row, error) {
		var o outbox.Row
		err := r.Scan(&o.AggregateID, &o.RoutingKey, &o.MessageID, &o.Payload, &o.Headers, &o.Partition)
		return o, err
	})
	require.NoError(t, err)
	var out []outboxRow
	for _, row := range stored {
		msgs, err := row.Messages()
		require.NoError(t, err)
		if row.AggregateID != outbox.PartitionAggregate(row.Partition) {
			// Written by outbox.Write (Options.OneRowPerMessage): the
			// message's own job.
			require.Len(t, msgs, 1)
			require.Equal(t, jobOf(t, msgs[0]), row.AggregateID, "row of %s", row.MessageID)
		}
		for _, m := range msgs {
			o := outboxRow{RoutingKey: m.RoutingKey, MessageID: m.MessageID, Payload: m.Payload, Headers: m.Headers, DueAt: m.DueAt}
			if o.Headers == nil {
				o.Headers = map[string]string{}
			}
			o.AggregateID = jobOf(t, m)
			require.Equal(t, ring.Partition(o.AggregateID, testPartitions), row.Partition,
				"outbox message %s of job %s is in partition %d", o.MessageID, o.AggregateID, row.Partition)
			out = append(out, o)
		}
	}
	return out
}

// jobOf reads the job id of an outbox message from its payload: a
// DispatchRequest or an ExecutionEventBatch.
func jobOf(t testing.TB, m outbox.Message) string {
	t.Helper()
	if strings.HasSuffix(m.RoutingKey, "|execution.missed") {
		batch := &eventsv1.ExecutionEventBatch{}
		require.NoError(t, proto.Unmarshal(m.Payload, batch))
		require.NotEmpty(t, batch.Events)
		return batch.Events[0].JobId
	}
	req := &dispatchv1.DispatchRequest{}
	require.NoError(t, proto.Unmarshal(m.Payload, req))
	return req.JobId
}

func (e *env) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// allPartitions is 0..testPartitions-1.
func allPartitions() []int {
	out := make([]int, testPartitions)
	for i := range out {
		out[i] = i
	}
	return out
}

// wholeLoads reads each of parts whole.
func wholeLoads(parts []int) []firing.PartitionLoad {
	loads := make([]firing.PartitionLoad, len(parts))
	for i, p := range parts {
		loads[i] = firing.PartitionLoad{Partition: p}
	}
	return loads
}

// fences claims every partition at epoch.
func fences(epoch int64) []firing.Fence {
	var out []firing.Fence
	for _, p := range allPartitions() {
		out = append(out, firing.Fence{Partition: p, Epoch: epoch})
	}
	return out
}
