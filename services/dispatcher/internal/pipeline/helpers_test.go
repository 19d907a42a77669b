package pipeline_test

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

const testNamespace = "alpha"

// testTiers are delay tiers short enough for tests.
func testTiers() []time.Duration {
	return []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
}

// env is the broker topology of one test (unique names), a migrated store,
// a queue bound to every lifecycle event and a dead-letter drainer.
type env struct {
	t           testing.TB
	opts        pipeline.Options // names and tiers; Deliverer and Publisher per pipeline
	store       *store.Store
	eventsQueue string
	events      *eventLog
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pool, _ := pgtest.Migrated(t, store.Migrations)
	st, err := store.New(store.Options{Pool: pool})
	require.NoError(t, err)

	e := &env{t: t, store: st, events: &eventLog{}}
	e.opts = pipeline.Options{
		AMQPURL:            amqptest.URL(),
		DispatchExchange:   amqptest.UniqueName(t, "dispatch"),
		DispatchQueue:      amqptest.UniqueName(t, "dispatchq"),
		RetryExchange:      amqptest.UniqueName(t, "retry"),
		RetryQueue:         amqptest.UniqueName(t, "retryq"),
		DeadExchange:       amqptest.UniqueName(t, "dead"),
		DeadQueue:          amqptest.UniqueName(t, "deadq"),
		ExecutionsExchange: amqptest.UniqueName(t, "executions"),
		RetryTiers:         testTiers(),
		Workers:            pipeline.Workers{High: 2, Normal: 2, Low: 2},
		Checks:             st,
		Backoff:            20 * time.Millisecond,
		MaxBackoff:         100 * time.Millisecond,
		DrainTimeout:       5 * time.Second,
		Logger:             testLogger(),
	}
	// The events queue is bound before anything is published.
	e.eventsQueue = amqptest.DeclareTopicQueue(t, e.opts.ExecutionsExchange, "#")
	e.consumeEvents()
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		o := e.opts
		for _, b := range append(broker.DispatchQueues(o.DispatchExchange, o.DispatchQueue),
			append(broker.RetryTiers(o.RetryExchange, o.RetryQueue, o.DispatchExchange, o.RetryTiers),
				pipeline.DeadBinding(o.DeadExchange, o.DeadQueue))...) {
			_, _ = ch.QueueDelete(b.Queue, false, false, false)
		}
		for _, x := range []string{o.DispatchExchange, o.RetryExchange, o.DeadExchange} {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
	return e
}

func testLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// publisher is a confirm-aware publisher to url for routed topics.
func (e *env) publisher(url string) *broker.Publisher {
	e.t.Helper()
	pub, err := broker.NewPublisher(broker.PublisherOptions{
		Config:         broker.RoutedPublisherConfig(url, 8),
		RedialInterval: 20 * time.Millisecond,
	})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// running is a pipeline started by start.
type running struct {
	p      *pipeline.Pipeline
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// wait waits for Run to return (at most 30 s) and returns its error.
func (r *running) wait(t testing.TB) error {
	t.Helper()
	r.once.Do(func() {
		select {
		case r.err = <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("the pipeline did not stop")
		}
	})
	return r.err
}

// stop cancels the pipeline and waits for Run to return nil.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	require.NoError(t, r.wait(t))
}

// start runs a pipeline with d, the env's names and mods, until the test
// ends (or stop), and waits until it is subscribed.
func (e *env) start(d deliver.Deliverer, mods ...func(*pipeline.Options)) *running {
	e.t.Helper()
	opts := e.opts
	opts.Deliverer = d
	opts.Publisher = e.publisher(amqptest.URL())
	r := &running{reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	opts.Metrics = r.reg
	for _, m := range mods {
		m(&opts)
	}
	p, err := pipeline.New(opts)
	require.NoError(e.t, err)
	r.p = p
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- p.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		_ = r.wait(e.t)
	})
	select {
	case <-p.Ready():
	case <-time.After(30 * time.Second):
		e.t.Fatal("pipeline not ready")
	}
	return r
}

// startDrainer runs a dead-letter drainer into the env's store and returns
// its metrics.
func (e *env) startDrainer() *prometheus.Registry {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	d, err := pipeline.NewDrainer(pipeline.DrainerOptions{
		AMQPURL: amqptest.URL(), Store: e.store, DeadExchange: e.opts.DeadExchange, DeadQueue: e.opts.DeadQueue,
		Workers: 4, Logger: testLogger(), Backoff: 20 * time.Millisecond, Metrics: reg,
	})
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		require.NoError(e.t, <-done)
	})
	select {
	case <-d.Ready():
	case <-time.After(30 * time.Second):
		e.t.Fatal("drainer not ready")
	}
	return reg
}

// request is a valid attempt-1 request of a new job, high/normal/low per p.
func request(p registryv1.Priority, mods ...func(*dispatchv1.DispatchRequest)) *dispatchv1.DispatchRequest {
	jobID := uuid.Must(uuid.NewV7()).String()
	nominal := time.Now().Truncate(time.Second)
	req := &dispatchv1.DispatchRequest{
		ExecutionId: execid.For(jobID, nominal),
		JobId:       jobID,
		Namespace:   testNamespace,
		Attempt:     1,
		NominalTime: timestamppb.New(nominal),
		FireTime:    timestamppb.New(nominal),
		TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method: "POST", Url: "https://example.test/hook", SigningSecret: "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0",
		}}},
		RetryPolicy: &registryv1.RetryPolicy{
			MaxRetries: proto.Int32(2), InitialBackoff: durationpb.New(100 * time.Millisecond), Multiplier: 2,
		},
		Priority:       p,
		JobVersion:     1,
		JobDisplayName: "nightly report",
		JobLabels:      map[string]string{"team": "data"},
	}
	for _, m := range mods {
		m(req)
	}
	return req
}

// attemptOf names attempt n of req's execution, keyed as the pipeline
// records it (the slot's time and the execution id).
func attemptOf(req *dispatchv1.DispatchRequest, n int32) store.AttemptRef {
	return store.AttemptRef{NominalTime: req.NominalTime.AsTime(), ExecutionID: req.ExecutionId, Attempt: n}
}

// dispatch publishes reqs to the dispatch exchange as the trigger does,
// with confirms; headers go into every message.
func (e *env) dispatch(headers amqp091.Table, reqs ...*dispatchv1.DispatchRequest) {
	e.t.Helper()
	ch := amqptest.Channel(e.t)
	require.NoError(e.t, ch.Confirm(false))
	for _, req := range reqs {
		body, err := proto.Marshal(req)
		require.NoError(e.t, err)
		e.publishRaw(ch, broker.DispatchRoutingKey(pipeline.PriorityName(req.Priority)), req.ExecutionId, body, headers)
	}
}

// dispatchBulk publishes reqs like dispatch but waits for the confirms
// only at the end: fast enough for backlogs of thousands.
func (e *env) dispatchBulk(reqs ...*dispatchv1.DispatchRequest) {
	e.t.Helper()
	ch := amqptest.Channel(e.t)
	require.NoError(e.t, ch.Confirm(false))
	confirms := make([]*amqp091.DeferredConfirmation, 0, len(reqs))
	for _, req := range reqs {
		body, err := proto.Marshal(req)
		require.NoError(e.t, err)
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), e.opts.DispatchExchange,
			broker.DispatchRoutingKey(pipeline.PriorityName(req.Priority)), false, false,
			amqp091.Publishing{MessageId: req.ExecutionId, Body: body, DeliveryMode: amqp091.Persistent})
		require.NoError(e.t, err)
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		require.True(e.t, dc.Wait())
	}
}

func (e *env) publishRaw(ch *amqp091.Channel, key, id string, body []byte, headers amqp091.Table) {
	e.t.Helper()
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), e.opts.DispatchExchange, key, false, false,
		amqp091.Publishing{MessageId: id, Body: body, Headers: headers, DeliveryMode: amqp091.Persistent})
	require.NoError(e.t, err)
	require.True(e.t, dc.Wait())
}

// queueDepth is the number of ready messages in queue.
func (e *env) queueDepth(queue string) int {
	e.t.Helper()
	q, err := amqptest.Channel(e.t).QueueDeclarePassive(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
	require.NoError(e.t, err)
	return q.Messages
}

// dispatchQueue is the queue of a priority.
func (e *env) dispatchQueue(priority string) string {
	return broker.DispatchQueue(e.opts.DispatchQueue, priority)
}

// eventLog collects every lifecycle event published to the env's exchange.
type eventLog struct {
	mu      sync.Mutex
	events  []*eventsv1.ExecutionEvent
	batches int
	keys    []string
}

func (e *env) consumeEvents() {
	ch := amqptest.Channel(e.t)
	deliveries, err := ch.Consume(e.eventsQueue, "", true, false, false, false, nil)
	require.NoError(e.t, err)
	go func() {
		for d := range deliveries {
			batch := &eventsv1.ExecutionEventBatch{}
			if err := proto.Unmarshal(d.Body, batch); err != nil {
				panic(err)
			}
			e.events.mu.Lock()
			e.events.events = append(e.events.events, batch.Events...)
			e.events.batches++
			e.events.keys = append(e.events.keys, d.RoutingKey)
			e.events.mu.Unlock()
		}
	}()
}

// of returns the events of an execution, in arrival order.
func (l *eventLog) of(executionID string) []*eventsv1.ExecutionEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*eventsv1.ExecutionEvent
	for _, ev := range l.events {
		if ev.ExecutionId == executionID {
			out = append(out, ev)
		}
	}
	return out
}

// kinds counts the events of an execution by kind name and attempt, e.g.
// "failed/2".
func (l *eventLog) kinds(executionID string) map[string]int {
	out := map[string]int{}
	for _, ev := range l.of(executionID) {
		out[execevent.KindName(ev.Kind)+"/"+itoa(ev.Attempt)]++
	}
	return out
}

// waitFor waits until the execution has an event of kind and returns it.
func (e *env) waitFor(executionID string, kind eventsv1.ExecutionEventKind, attempt int32) *eventsv1.ExecutionEvent {
	e.t.Helper()
	var found *eventsv1.ExecutionEvent
	require.Eventually(e.t, func() bool {
		for _, ev := range e.events.of(executionID) {
			if ev.Kind == kind && ev.Attempt == attempt {
				found = ev
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "no %s event of attempt %d of %s; got %v", kind, attempt, executionID, e.events.kinds(executionID))
	return found
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// traceIDOf is the trace id of ctx's span context, "" without one.
func traceIDOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// fake is a Deliverer whose answer per request comes from fn; it records
// every attempt prepared and every call.
type fake struct {
	fn func(ctx context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome
	// panicOnPrepare makes Prepare panic, after counting the attempt.
	panicOnPrepare bool

	mu       sync.Mutex
	prepared map[string]int // by execution id
	calls    []call
}

type call struct {
	req *dispatchv1.DispatchRequest
	at  time.Time
	// traceparent is what the Deliverer's context carried.
	traceID string
}

// Prepare counts the attempt; deliver makes it.
func (f *fake) Prepare(_ context.Context, req *dispatchv1.DispatchRequest) deliver.Attempt {
	f.mu.Lock()
	if f.prepared == nil {
		f.prepared = map[string]int{}
	}
	f.prepared[req.ExecutionId]++
	f.mu.Unlock()
	if f.panicOnPrepare {
		panic("boom while preparing")
	}
	return deliver.AttemptFunc(func(ctx context.Context) deliver.Outcome { return f.deliver(ctx, req) })
}

func (f *fake) deliver(ctx context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
	f.mu.Lock()
	f.calls = append(f.calls, call{req: req, at: time.Now(), traceID: traceIDOf(ctx)})
	f.mu.Unlock()
	if f.fn == nil {
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200, Reason: "HTTP 200", Duration: time.Millisecond}
	}
	return f.fn(ctx, req)
}

// preparedOf is how many attempts of an execution were prepared.
func (f *fake) preparedOf(executionID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.prepared[executionID]
}

// of returns the calls for an execution.
func (f *fake) of(executionID string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.req.ExecutionId == executionID {
			out = append(out, c)
		}
	}
	return out
}

// metric returns the value of the counter or gauge name, or the
// observation count of the histogram name (summed over its labels) in reg.
func metric(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			// A histogram counts as its number of observations.
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// nopPublisher is a message.Publisher for option validation only.
type nopPublisher struct{}

func (*nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (*nopPublisher) Close() error                              { return nil }
