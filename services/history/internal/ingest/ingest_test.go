package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/history/internal/ingest"
	"github.com/cronmesh/cronmesh/services/history/internal/store"
)

func newStore(t *testing.T, now time.Time) *store.Store {
	t.Helper()
	pool, schema := pgtest.Migrated(t, store.Migrations)
	s, err := store.New(store.Options{Pool: pool, Schema: schema})
	require.NoError(t, err)
	_, err = s.Maintain(t.Context(), now)
	require.NoError(t, err)
	return s
}

// names are an exchange and a queue of the test's own, deleted at its end.
func names(t *testing.T) (exchange, queue string) {
	exchange, queue = amqptest.UniqueName(t, "executions"), amqptest.UniqueName(t, "history")
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	return exchange, queue
}

// run runs c until stop, which returns what Run returned; it returns once c
// is ready.
func run(t *testing.T, c *ingest.Consumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("consumer stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("consumer not ready")
	}
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("consumer did not stop")
			return nil
		}
	}
}

func publish(t *testing.T, ch *amqp091.Channel, exchange string, body []byte) {
	t.Helper()
	require.NoError(t, ch.PublishWithContext(t.Context(), exchange, "execution.started", false, false,
		amqp091.Publishing{Body: body, DeliveryMode: amqp091.Persistent, MessageId: uuid.NewString()}))
}

func batch(t *testing.T, events ...*eventsv1.ExecutionEvent) []byte {
	t.Helper()
	b, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	require.NoError(t, err)
	return b
}

func TestConsumerIngestsDuplicatesAndReorderedBatches(t *testing.T) {
	t.Parallel()
	// Data is placed relative to the wall clock only because the broker and
	// database are real; nothing waits for time to pass.
	now := time.Now().UTC()
	st := newStore(t, now)
	exchange, queue := names(t)
	ch := amqptest.Channel(t)

	reg := prometheus.NewRegistry()
	c, err := ingest.New(ingest.Options{
		AMQPURL: amqptest.URL(), Store: st, Exchange: exchange, Queue: queue, Workers: 4, Metrics: reg,
	})
	require.NoError(t, err)
	stop := run(t, c)

	job := uuid.NewString()
	nA, nB := now.Add(-time.Hour).Truncate(time.Second), now.Add(-2*time.Hour).Truncate(time.Second)
	idA, idB := execid.For(job, nA), execid.For(job, nB)
	ev := func(kind eventsv1.ExecutionEventKind, attempt int32, mut func(*eventsv1.ExecutionEvent)) *eventsv1.ExecutionEvent {
		e := &eventsv1.ExecutionEvent{
			EventId: uuid.NewString(), Kind: kind, ExecutionId: idA, JobId: job, Namespace: "ns", Attempt: attempt,
			NominalTime: timestamppb.New(nA), OccurTime: timestamppb.New(now), FireTime: timestamppb.New(nA),
			StartTime: timestamppb.New(nA.Add(time.Duration(attempt) * time.Second)), TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
			TraceId: "4bf92f3577b34da6a3ce929d0e0e4736",
		}
		if mut != nil {
			mut(e)
		}
		return e
	}
	succeeded := batch(t,
		ev(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, 2, func(e *eventsv1.ExecutionEvent) {
			e.Duration, e.ResponseStatus, e.ResponseExcerpt = durationpb.New(40*time.Millisecond), 200, "done"
		}),
		&eventsv1.ExecutionEvent{EventId: uuid.NewString(), Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED, ExecutionId: idB, JobId: job,
			Namespace: "ns", NominalTime: timestamppb.New(nB), OccurTime: timestamppb.New(now), Reason: "trigger was down\x00", TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED},
	)
	// The outcome first, then the attempts' earlier events, then the
	// outcome again (a redelivery), a message that is not an event batch,
	// and an invalid event beside a valid one.
	publish(t, ch, exchange, succeeded)
	publish(t, ch, exchange, batch(t,
		ev(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, 2, nil),
		ev(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, 1, func(e *eventsv1.ExecutionEvent) {
			e.Reason, e.RetryScheduled, e.RetryDelay = "HTTP 502", true, durationpb.New(time.Second)
		}),
		ev(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, 1, nil),
	))
	publish(t, ch, exchange, succeeded)
	publish(t, ch, exchange, []byte("not a protobuf \xff\xff"))
	publish(t, ch, exchange, batch(t,
		&eventsv1.ExecutionEvent{Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, ExecutionId: "not-a-uuid"},
		ev(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, 1, nil),
	))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		e, attempts, err := st.Get(t.Context(), "ns", idA)
		if !assert.NoError(c, err) {
			return
		}
		assert.Equal(c, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, e.GetStatus())
		assert.Len(c, attempts, 2)
		_, _, err = st.Get(t.Context(), "ns", idB)
		assert.NoError(c, err)
		assert.Equal(c, 2.0, testutil.ToFloat64(mustCounter(t, reg, "history_poison_total")))
		q, err := amqptest.Channel(t).QueueDeclarePassive(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
		if assert.NoError(c, err) {
			assert.Zero(c, q.Messages, "every message acknowledged")
		}
	}, 30*time.Second, 20*time.Millisecond)

	e, attempts, err := st.Get(t.Context(), "ns", idA)
	require.NoError(t, err)
	assert.EqualValues(t, 2, e.GetAttempt())
	assert.Equal(t, "done", e.GetResponseExcerpt())
	assert.Equal(t, 40*time.Millisecond, e.GetDuration().AsDuration())
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", e.GetTraceId())
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_RETRYING, attempts[0].GetStatus())
	assert.Equal(t, "HTTP 502", attempts[0].GetReason())
	missed, _, err := st.Get(t.Context(), "ns", idB)
	require.NoError(t, err)
	assert.Equal(t, "trigger was down", missed.GetReason())
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_MISSED, missed.GetStatus())

	require.NoError(t, stop())
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return collectorFunc{reg: reg, name: name}
}

// collectorFunc exposes one registered metric family of reg as a collector
// for testutil.ToFloat64.
type collectorFunc struct {
	reg  *prometheus.Registry
	name string
}

func (f collectorFunc) Describe(chan<- *prometheus.Desc) {}

func (f collectorFunc) Collect(ch chan<- prometheus.Metric) {
	mfs, err := f.reg.Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		if mf.GetName() == f.name {
			for _, m := range mf.GetMetric() {
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(f.name, "", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
			}
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := ingest.New(ingest.Options{})
	require.Error(t, err)
	_, err = ingest.New(ingest.Options{AMQPURL: "amqp://x"})
	require.Error(t, err)
	_, err = ingest.New(ingest.Options{AMQPURL: "amqp://x", Store: &store.Store{}, Workers: -1})
	require.Error(t, err)
}

func TestFromProto(t *testing.T) {
	t.Parallel()
	nominal := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	occur := nominal.Add(time.Second)
	e := ingest.FromProto(&eventsv1.ExecutionEvent{
		Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, ExecutionId: uuid.NewString(), JobId: "j", Namespace: "ns",
		Attempt: 1, NominalTime: timestamppb.New(nominal), OccurTime: timestamppb.New(occur),
		TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_BACKFILL, Reason: "a\x00b",
	})
	require.NoError(t, e.Validate())
	assert.Equal(t, occur, e.StartTime, "a STARTED event without start_time started at its occur time")
	assert.Equal(t, "ab", e.Reason, "NUL is dropped: PostgreSQL text cannot hold it")
	assert.EqualValues(t, 3, e.TriggerKind)
	assert.Nil(t, e.Duration)

	failed := ingest.FromProto(&eventsv1.ExecutionEvent{
		Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, ExecutionId: uuid.NewString(), JobId: "j", Namespace: "ns",
		Attempt: 2, NominalTime: timestamppb.New(nominal), OccurTime: timestamppb.New(occur),
		Duration: durationpb.New(time.Second), RetryScheduled: true, RetryDelay: durationpb.New(5 * time.Second),
	})
	assert.True(t, failed.StartTime.IsZero(), "only STARTED implies its start")
	assert.Equal(t, time.Second, *failed.Duration)
	assert.Equal(t, 5*time.Second, *failed.RetryDelay)
	assert.True(t, failed.RetryScheduled)

	rerun := ingest.FromProto(&eventsv1.ExecutionEvent{
		Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, ExecutionId: uuid.NewString(), JobId: "j", Namespace: "ns",
		Attempt: 1, NominalTime: timestamppb.New(nominal), RerunOfExecutionId: "0190f0c4-6c1e-7a00-8000-000000000001",
		OverriddenFields: []string{"target", "", "a,b", "body"},
	})
	assert.Equal(t, "0190f0c4-6c1e-7a00-8000-000000000001", rerun.RerunOf)
	assert.Equal(t, []string{"target", "body"}, rerun.Overridden, "names that are not identifiers are dropped")

	missed := ingest.FromProto(&eventsv1.ExecutionEvent{Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED, ExecutionId: "x", JobId: "j", Namespace: "ns", NominalTime: timestamppb.New(nominal)})
	require.Error(t, missed.Validate(), "execution ids are UUIDs")
}
