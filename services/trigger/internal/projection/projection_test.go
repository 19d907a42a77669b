package projection_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/trigger/internal/projection"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

const (
	namespace = "alpha"
	waitFor   = 15 * time.Second
	pollEvery = 10 * time.Millisecond
)

// harness is a consumer running against a fresh schema and a unique
// exchange and queue, with a publisher to that exchange.
type harness struct {
	pool     *pgxpool.Pool
	store    *store.Store
	exchange string
	queue    string
	metrics  *prometheus.Registry
	spans    *tracetest.InMemoryExporter
	tp       *sdktrace.TracerProvider
	pub      message.Publisher
}

type option func(*projection.Options)

// start runs a consumer on a new harness.
func start(t *testing.T, opts ...option) *harness {
	t.Helper()
	h := newHarness(t)
	h.run(t, opts...)
	return h
}

// newHarness makes the schema, the store, the exchange and the queue (as
// the consumer declares them, so events can be published before it runs)
// and the publisher.
func newHarness(t *testing.T) *harness {
	t.Helper()
	pool, _ := pgtest.Migrated(t, store.Migrations)
	st, err := store.New(store.Options{Pool: pool, Partitions: 4, DispatchExchange: "test.dispatch"})
	require.NoError(t, err)

	h := &harness{
		pool:     pool,
		store:    st,
		exchange: amqptest.UniqueName(t, "cronmesh.jobs"),
		queue:    amqptest.UniqueName(t, "cronmesh.trigger.jobs"),
		metrics:  prometheus.NewRegistry(),
		spans:    tracetest.NewInMemoryExporter(),
	}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(h.spans))
	// Registered first, so it runs last: after the consumer stopped.
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		_, err := ch.QueueDelete(h.queue, false, false, false)
		require.NoError(t, err)
		require.NoError(t, ch.ExchangeDelete(h.exchange, false, false))
	})
	ch := amqptest.Channel(t)
	require.NoError(t, ch.ExchangeDeclare(h.exchange, "topic", true, false, false, false, nil))
	_, err = ch.QueueDeclare(h.queue, true, false, false, false,
		amqp091.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(1) << 30})
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(h.queue, projection.DefaultBindingKey, h.exchange, false, nil))
	h.pub, err = broker.NewPublisher(broker.PublisherOptions{Config: broker.TopicPublisherConfig(amqptest.URL(), h.exchange, 4)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.pub.Close()) })
	return h
}

// run starts the consumer and waits until it subscribed; it stops at the
// end of the test.
func (h *harness) run(t *testing.T, opts ...option) {
	t.Helper()
	o := projection.Options{
		Store:          h.store,
		AMQPURL:        amqptest.URL(),
		Exchange:       h.exchange,
		Queue:          h.queue,
		Workers:        1,
		TracerProvider: h.tp,
		Propagator:     propagation.TraceContext{},
		Metrics:        h.metrics,
		Backoff:        10 * time.Millisecond,
		MaxBackoff:     50 * time.Millisecond,
	}
	for _, opt := range opts {
		opt(&o)
	}
	c, err := projection.New(o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("consumer stopped before subscribing: %v", err)
	case <-time.After(waitFor):
		t.Fatal("consumer not subscribed in time")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(waitFor):
			t.Error("Run did not return after its context ended")
		}
	})
}

// oneBatch makes the consumer take n messages already queued as one batch:
// one message per subscription (prefetch 1), a batch as large as them all,
// and a linger that never runs out before they are all in hand.
func oneBatch(n int) option {
	return func(o *projection.Options) {
		o.Workers, o.Prefetch, o.MaxBatch, o.Batches, o.Linger = n, 1, n, 1, waitFor
	}
}

// publish sends payload with routing key key, with the trace context of ctx.
func (h *harness) publish(t *testing.T, ctx context.Context, key string, id string, payload []byte) {
	t.Helper()
	msg := message.NewMessage(id, payload)
	broker.InjectTrace(ctx, propagation.TraceContext{}, msg.Metadata)
	msg.SetContext(ctx)
	require.NoError(t, h.pub.Publish(key, msg))
}

// publishEvent sends ev as the registry's relay does.
func (h *harness) publishEvent(t *testing.T, ctx context.Context, ev *eventsv1.JobEvent) {
	t.Helper()
	payload, err := proto.Marshal(ev)
	require.NoError(t, err)
	h.publish(t, ctx, broker.JobRoutingKey(ev.Kind), ev.EventId, payload)
}

// metric returns the value of a counter (with labels) or the sample count
// of a histogram, 0 when absent.
func (h *harness) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := h.metrics.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			if hist := m.GetHistogram(); hist != nil {
				return float64(hist.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func (h *harness) waitMetric(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	require.Eventually(t, func() bool { return h.metric(t, name, labels...) == want }, waitFor, pollEvery,
		"metric %s%v never reached %v (now %v)", name, labels, want, h.metric(t, name, labels...))
}

func newJob() *registryv1.Job {
	created := time.Now().UTC().Truncate(time.Microsecond)
	return &registryv1.Job{
		Id:          uuid.Must(uuid.NewV7()).String(),
		Namespace:   namespace,
		DisplayName: "job",
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "*/5 * * * *"}},
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Url: "https://example.com/hook", SigningSecret: "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0",
		}}},
		CreateTime: timestamppb.New(created),
		Version:    1,
	}
}

func event(kind eventsv1.JobEventKind, job *registryv1.Job, version int64) *eventsv1.JobEvent {
	job = proto.Clone(job).(*registryv1.Job)
	job.Version = version
	job.Paused = kind == eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED
	return &eventsv1.JobEvent{
		EventId:   uuid.Must(uuid.NewV7()).String(),
		Kind:      kind,
		Job:       job,
		Version:   version,
		OccurTime: timestamppb.New(job.CreateTime.AsTime().Add(time.Duration(version) * time.Millisecond)),
	}
}

func TestConsumerAppliesEvents(t *testing.T) {
	t.Parallel()
	h := start(t)
	job := newJob()
	renamed := proto.Clone(job).(*registryv1.Job)
	renamed.DisplayName = "renamed"
	created := event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, job, 1)
	run := event(eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED, job, 1)
	nominal := time.Now().UTC().Truncate(time.Microsecond)
	run.RunRequest = &eventsv1.RunRequest{NominalTime: timestamppb.New(nominal)}
	for _, ev := range []*eventsv1.JobEvent{
		created,
		event(eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, renamed, 2),
		created, // a redelivery: stale
		event(eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED, renamed, 3),
		run,
		run, // fired once
	} {
		h.publishEvent(t, t.Context(), ev)
	}
	h.waitMetric(t, 1, "projection_events_ignored_total", "kind", "run_requested", "reason", "duplicate_run")

	st, err := h.store.Job(t.Context(), namespace, job.Id)
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Version)
	require.True(t, st.Paused)
	require.Equal(t, "renamed", st.Job.DisplayName)
	for _, kind := range []string{"created", "updated", "paused", "run_requested"} {
		require.Equal(t, 1.0, h.metric(t, "projection_events_applied_total", "kind", kind), kind)
	}
	require.Equal(t, 1.0, h.metric(t, "projection_events_ignored_total", "kind", "created", "reason", "stale"))
	require.Equal(t, 6.0, h.metric(t, "projection_lag_seconds"))
	require.Zero(t, h.metric(t, "projection_apply_errors_total"))
	require.Zero(t, h.metric(t, "projection_poison_total"))
	slots, _, err := h.store.ListSlots(t.Context(), namespace, job.Id, 10, time.Time{})
	require.NoError(t, err)
	require.Len(t, slots, 1)
	require.Equal(t, nominal, slots[0].Nominal)
}

func TestConsumerCompetingWorkers(t *testing.T) {
	t.Parallel()
	h := start(t, func(o *projection.Options) { o.Workers = 4 })
	// Many versions of a few jobs, applied concurrently and so out of
	// order: the newest version wins for each.
	const versions = 15
	jobs := []*registryv1.Job{newJob(), newJob(), newJob()}
	for v := int64(1); v <= versions; v++ {
		for _, job := range jobs {
			kind := eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED
			if v == 1 {
				kind = eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED
			}
			h.publishEvent(t, t.Context(), event(kind, job, v))
		}
	}
	for _, job := range jobs {
		require.Eventually(t, func() bool {
			st, err := h.store.Job(t.Context(), namespace, job.Id)
			return err == nil && st.Version == versions
		}, waitFor, pollEvery)
	}
	h.waitMetric(t, float64(versions*len(jobs)), "projection_lag_seconds")
}

func TestConsumerPoisonMessages(t *testing.T) {
	t.Parallel()
	h := start(t)
	h.publish(t, t.Context(), "job.created", uuid.NewString(), []byte("\xff\xff not a protobuf"))
	noJob, err := proto.Marshal(&eventsv1.JobEvent{EventId: "e1", Kind: eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, Version: 1})
	require.NoError(t, err)
	h.publish(t, t.Context(), "job.created", uuid.NewString(), noJob)
	job := newJob()
	h.publishEvent(t, t.Context(), event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, job, 1))

	// One worker takes the messages in order: once the valid event is
	// applied, both poison messages were handled, each exactly once.
	h.waitMetric(t, 1, "projection_events_applied_total", "kind", "created")
	require.Equal(t, 2.0, h.metric(t, "projection_poison_total"))
	require.Zero(t, h.metric(t, "projection_apply_errors_total"))
	_, err = h.store.Job(t.Context(), namespace, job.Id)
	require.NoError(t, err)
	ch := amqptest.Channel(t)
	q, err := ch.QueueDeclarePassive(h.queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.Zero(t, q.Messages, "nothing left to redeliver")
}

// spy records the batches it applies through next. With failFirst, a
// batch holding any event it sees for the first time fails whole, with
// the database error a cancelled query returns.
type spy struct {
	next      *store.Store
	failFirst bool
	mu        sync.Mutex
	calls     map[string]int
	// batches are the event ids of every batch, failed or not.
	batches [][]string
}

func newSpy(next *store.Store, failFirst bool) *spy {
	return &spy{next: next, failFirst: failFirst, calls: map[string]int{}}
}

func (f *spy) ApplyBatch(ctx context.Context, events []store.Event, now time.Time) ([]store.Result, error) {
	f.mu.Lock()
	first := false
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.Event.GetEventId()
		f.calls[ids[i]]++
		first = first || f.calls[ids[i]] == 1
	}
	f.batches = append(f.batches, ids)
	f.mu.Unlock()
	if first && f.failFirst {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := f.next.ApplyBatch(cancelled, events, now)
		if err == nil {
			return nil, errors.New("a cancelled apply succeeded")
		}
		return nil, err
	}
	return f.next.ApplyBatch(ctx, events, now)
}

func (f *spy) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[id]
}

func (f *spy) recorded() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

func TestConsumerRedeliversAfterError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	f := newSpy(h.store, true)
	h.run(t, func(o *projection.Options) { o.Store = f })
	job := newJob()
	ev := event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, job, 1)
	h.publishEvent(t, t.Context(), ev)
	h.waitMetric(t, 1, "projection_events_applied_total", "kind", "created")
	require.Equal(t, 2, f.count(ev.EventId), "failed once, redelivered, applied")
	require.Equal(t, 1.0, h.metric(t, "projection_apply_errors_total"))
	_, err := h.store.Job(t.Context(), namespace, job.Id)
	require.NoError(t, err)

	// Requeues through a long database outage must not reach a delivery
	// limit (RabbitMQ 4 defaults to 20): redeclaring with exactly these
	// arguments succeeds only if the queue has them.
	_, err = amqptest.Channel(t).QueueDeclare(h.queue, true, false, false, false,
		amqp091.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(1) << 30})
	require.NoError(t, err)
}

func TestConsumerBatchAppliesVersionsInOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	job := newJob()
	every10 := proto.Clone(job).(*registryv1.Job)
	every10.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "*/10 * * * *"}}
	v3 := event(eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED, every10, 3)
	// Newest first, with a redelivery of v3: one batch, applied in version
	// order, the newest wins.
	events := []*eventsv1.JobEvent{
		event(eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, every10, 5),
		event(eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED, every10, 4),
		v3,
		event(eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, every10, 2),
		event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, job, 1),
		v3,
	}
	for _, ev := range events {
		h.publishEvent(t, t.Context(), ev)
	}
	f := newSpy(h.store, false)
	h.run(t, oneBatch(len(events)), func(o *projection.Options) { o.Store = f })
	h.waitMetric(t, float64(len(events)), "projection_lag_seconds")

	require.Len(t, f.recorded(), 1, "one batch")
	require.Len(t, f.recorded()[0], len(events))
	st, err := h.store.Job(t.Context(), namespace, job.Id)
	require.NoError(t, err)
	require.Equal(t, int64(5), st.Version)
	require.False(t, st.Paused)
	require.Equal(t, "*/10 * * * *", st.Job.GetSchedule().GetCron())
	for kind, want := range map[string]float64{"created": 1, "updated": 2, "paused": 1, "resumed": 1} {
		require.Equal(t, want, h.metric(t, "projection_events_applied_total", "kind", kind), kind)
	}
	require.Equal(t, 1.0, h.metric(t, "projection_events_ignored_total", "kind", "paused", "reason", "stale"))
	require.Zero(t, h.metric(t, "projection_apply_errors_total"))
}

func TestConsumerBatchWithPoison(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	good1, good2, badCron := newJob(), newJob(), newJob()
	badCron.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "61 * * * *"}}
	noJob, err := proto.Marshal(&eventsv1.JobEvent{EventId: "e1", Kind: eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, Version: 1})
	require.NoError(t, err)
	h.publish(t, t.Context(), "job.created", uuid.NewString(), []byte("\xff\xff not a protobuf"))
	h.publishEvent(t, t.Context(), event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, good1, 1))
	h.publish(t, t.Context(), "job.created", uuid.NewString(), noJob)
	h.publishEvent(t, t.Context(), event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, badCron, 1))
	h.publishEvent(t, t.Context(), event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, good2, 1))
	f := newSpy(h.store, false)
	h.run(t, oneBatch(5), func(o *projection.Options) { o.Store = f })

	// The poison messages are acknowledged and dropped; the good events of
	// their batch are applied, each once.
	// The metrics are counted as each message is settled, not at once: wait
	// for both rather than read one the moment the other arrives.
	h.waitMetric(t, 2, "projection_events_applied_total", "kind", "created")
	h.waitMetric(t, 3, "projection_poison_total")
	require.Zero(t, h.metric(t, "projection_apply_errors_total"))
	require.Len(t, f.recorded(), 1, "one batch")
	require.Len(t, f.recorded()[0], 4, "the undecodable message never reaches the store")
	for _, job := range []*registryv1.Job{good1, good2} {
		_, err := h.store.Job(t.Context(), namespace, job.Id)
		require.NoError(t, err)
	}
	_, err = h.store.Job(t.Context(), namespace, badCron.Id)
	require.ErrorIs(t, err, store.ErrNotFound)
	var poisonSpans int
	require.Eventually(t, func() bool {
		poisonSpans = 0
		for _, s := range h.spans.GetSpans() {
			if s.SpanKind == trace.SpanKindConsumer && s.Status.Description == "poison message" {
				poisonSpans++
			}
		}
		return poisonSpans == 3
	}, waitFor, pollEvery, "poison spans: %d", poisonSpans)
	q, err := amqptest.Channel(t).QueueDeclarePassive(h.queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.Zero(t, q.Messages, "nothing left to redeliver")
}

func TestConsumerBatchDatabaseErrorMidBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	existing := newJob()
	_, err := h.store.Apply(t.Context(), event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, existing, 1), time.Now())
	require.NoError(t, err)
	// The first job row inserted from now on fails its transaction, after
	// the batch updated the existing job's row: nothing of the batch may
	// stay, and every message of it must come back.
	_, err = h.pool.Exec(t.Context(), `
		CREATE SEQUENCE fail_once;
		CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('fail_once') = 1 THEN
				RAISE EXCEPTION 'injected failure';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_once BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION fail_once();`)
	require.NoError(t, err)

	renamed := proto.Clone(existing).(*registryv1.Job)
	renamed.DisplayName = "renamed"
	run := event(eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED, existing, 2)
	run.RunRequest = &eventsv1.RunRequest{NominalTime: timestamppb.Now()}
	created1, created2 := newJob(), newJob()
	events := []*eventsv1.JobEvent{
		event(eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, renamed, 2),
		event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, created1, 1),
		run,
		event(eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, created2, 1),
	}
	for _, ev := range events {
		h.publishEvent(t, t.Context(), ev)
	}
	f := newSpy(h.store, false)
	h.run(t, oneBatch(len(events)), func(o *projection.Options) { o.Store = f })
	h.waitMetric(t, float64(len(events)), "projection_lag_seconds")

	require.Equal(t, float64(len(events)), h.metric(t, "projection_apply_errors_total"), "the whole batch failed once")
	batches := f.recorded()
	require.Len(t, batches, 2, "failed, then redelivered whole and applied")
	require.ElementsMatch(t, batches[0], batches[1])
	for _, ev := range events {
		require.Equal(t, 2, f.count(ev.EventId), ev.EventId)
	}
	for kind, want := range map[string]float64{"created": 2, "updated": 1, "run_requested": 1} {
		require.Equal(t, want, h.metric(t, "projection_events_applied_total", "kind", kind), kind)
	}
	st, err := h.store.Job(t.Context(), namespace, existing.Id)
	require.NoError(t, err)
	require.Equal(t, "renamed", st.Job.DisplayName)
	for _, job := range []*registryv1.Job{created1, created2} {
		_, err := h.store.Job(t.Context(), namespace, job.Id)
		require.NoError(t, err)
	}
	slots, _, err := h.store.ListSlots(t.Context(), namespace, existing.Id, 10, time.Time{})
	require.NoError(t, err)
	require.Len(t, slots, 1, "the manual slot, once")
	var outbox int
	require.NoError(t, h.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox`).Scan(&outbox))
	require.Equal(t, 1, outbox)
}

func TestConsumerContinuesTrace(t *testing.T) {
	t.Parallel()
	h := start(t)
	job := newJob()
	run := event(eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED, job, 1)
	run.RunRequest = &eventsv1.RunRequest{NominalTime: timestamppb.Now()}
	ctx, publish := h.tp.Tracer("registry").Start(t.Context(), "publish job.run_requested", trace.WithSpanKind(trace.SpanKindProducer))
	h.publishEvent(t, ctx, run)
	publish.End()
	h.waitMetric(t, 1, "projection_events_applied_total", "kind", "run_requested")

	var consumer tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range h.spans.GetSpans() {
			if s.SpanKind == trace.SpanKindConsumer {
				consumer = s
				return true
			}
		}
		return false
	}, waitFor, pollEvery)
	require.Equal(t, "process "+h.queue, consumer.Name)
	require.Equal(t, publish.SpanContext().TraceID(), consumer.SpanContext.TraceID())
	require.Equal(t, publish.SpanContext().SpanID(), consumer.Parent.SpanID())
	require.True(t, consumer.Parent.IsRemote())
	for _, want := range []attribute.KeyValue{
		semconv.MessagingSystemRabbitMQ,
		semconv.MessagingDestinationName(h.exchange),
		semconv.MessagingDestinationSubscriptionName(h.queue),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingMessageID(run.EventId),
	} {
		require.Contains(t, consumer.Attributes, want)
	}

	// The manual slot's dispatch request continues the same trace.
	var raw []byte
	require.NoError(t, h.pool.QueryRow(t.Context(), `SELECT headers FROM outbox`).Scan(&raw))
	var headers map[string]string
	require.NoError(t, json.Unmarshal(raw, &headers))
	require.Contains(t, headers["traceparent"], publish.SpanContext().TraceID().String())
	require.Contains(t, headers["traceparent"], consumer.SpanContext.SpanID().String())
}

// warnings is a slog handler that signals every warning.
type warnings chan string

func (w warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w warnings) Handle(_ context.Context, r slog.Record) error {
	select {
	case w <- r.Message:
	default:
	}
	return nil
}
func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnings) WithGroup(string) slog.Handler      { return w }

func TestRunWithoutBroker(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	st, err := store.New(store.Options{Pool: pool, Partitions: 1})
	require.NoError(t, err)
	warned := make(warnings, 10)
	c, err := projection.New(projection.Options{
		Store: st, AMQPURL: "amqp://guest:guest@127.0.0.1:1/", Backoff: time.Millisecond, MaxBackoff: time.Millisecond,
		Logger: slog.New(warned),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for range 3 {
		select {
		case msg := <-warned:
			require.Contains(t, msg, "retrying")
		case err := <-done:
			t.Fatalf("Run gave up: %v", err)
		case <-time.After(waitFor):
			t.Fatal("no retry")
		}
	}
	select {
	case <-c.Ready():
		t.Fatal("ready without a broker")
	default:
	}
	cancel()
	require.NoError(t, <-done)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	st, err := store.New(store.Options{Pool: pool, Partitions: 1})
	require.NoError(t, err)
	tests := []struct {
		name string
		opts projection.Options
	}{
		{"no store", projection.Options{AMQPURL: amqptest.URL()}},
		{"no URL", projection.Options{Store: st}},
		{"negative workers", projection.Options{Store: st, AMQPURL: amqptest.URL(), Workers: -1}},
		{"negative batch", projection.Options{Store: st, AMQPURL: amqptest.URL(), MaxBatch: -1}},
		{"negative batches", projection.Options{Store: st, AMQPURL: amqptest.URL(), Batches: -1}},
		{"negative linger", projection.Options{Store: st, AMQPURL: amqptest.URL(), Linger: -time.Millisecond}},
	}
	for _, tt := range tests {
		_, err := projection.New(tt.opts)
		require.Error(t, err, tt.name)
	}
	reg := prometheus.NewRegistry()
	_, err = projection.New(projection.Options{Store: st, AMQPURL: amqptest.URL(), Metrics: reg})
	require.NoError(t, err)
	_, err = projection.New(projection.Options{Store: st, AMQPURL: amqptest.URL(), Metrics: reg})
	require.Error(t, err, "metrics registered twice")
}
