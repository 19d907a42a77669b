package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/inflight"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// Defaults of Options.
const (
	DefaultDispatchExchange   = "cronmesh.dispatch"
	DefaultDispatchQueue      = "cronmesh.dispatch"
	DefaultRetryExchange      = "cronmesh.retry"
	DefaultRetryQueue         = "cronmesh.retry"
	DefaultDeadExchange       = "cronmesh.dead"
	DefaultDeadQueue          = "cronmesh.dead"
	DefaultExecutionsExchange = "cronmesh.executions"
	// DefaultPrefetch is the messages in hand per worker: while a
	// message's consequences are confirmed and recorded (after its
	// delivery, before its ack) its subscription takes no other, and a
	// message the trigger fired ahead of its slot is held (ADR 0022), so a
	// priority needs several subscriptions per delivery slot to keep its
	// slots busy. 8 goes with DefaultEventLinger, which keeps messages in
	// hand longer: the two together against 4 and 5 ms held the capacity
	// ramp's 5,000/s (ADR 0022).
	DefaultPrefetch      = 8
	DefaultHighWorkers   = 16
	DefaultNormalWorkers = 64
	DefaultLowWorkers    = 16
	DefaultEventBatch    = 500
	// DefaultEventLinger: the events of a second's deliveries wait to fill
	// a batch rather than go out as they come, so that the deliveries of a
	// second on which thousands of slots are due do not compete with their
	// own consequences (the events' publish and confirm, and the history's,
	// alerting's and the registry's consumption of them), and each batch
	// carries more. With DefaultPrefetch 8, against 5 ms and 4 (ADR
	// 0022): at 3,000/s p50 lateness 135 against 172 ms, machine CPU per
	// execution 0.348 against 0.414 ms. It delays the acknowledgement, not
	// the delivery.
	DefaultEventLinger     = 200 * time.Millisecond
	DefaultEventPublishers = 4
	// DefaultEventHold covers the delivery of a whole second's crowd of
	// the sustained mix (2,700 slots) on a 2-core host, and holds a larger
	// crowd's events (a top-of-minute second's, 11,400) back no longer
	// than that (ADR 0024).
	DefaultEventHold = 500 * time.Millisecond
	// DefaultStartedEventAfter is the dispatcher flag's default of
	// Options.StartedEventAfter: most attempts take milliseconds, so
	// nearly none emits a STARTED event, while alerting still learns that
	// a slot fired well within the smallest missed-schedule tolerance
	// (1 s) and a slow attempt shows as running a quarter of a second in.
	DefaultStartedEventAfter = 250 * time.Millisecond
	DefaultDrainTimeout      = 15 * time.Second
	// DefaultMaxHold bounds how long a request fired ahead of its slot is
	// held (its not_before). The trigger fires half a second ahead by
	// default; a request due much later than that says the trigger's clock and
	// this host's disagree, and holding it longer would keep a
	// subscription (and everything queued behind it) waiting on the error.
	DefaultMaxHold        = 5 * time.Second
	DefaultPublishTimeout = 30 * time.Second
	DefaultCancelTimeout  = 2 * time.Second
	DefaultBackoff        = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	// DefaultRecordRetryInterval: a restarted database is seen within a
	// second, before most relays have republished.
	DefaultRecordRetryInterval = time.Second
)

// tracerName names the pipeline's tracer.
const tracerName = "github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"

// Checks is what the pipeline asks before every attempt (cancelled? a
// redelivery of a completed attempt?) and tells after it; *store.Store is
// one.
type Checks interface {
	// Check reports, for each ref, whether its execution is cancelled and
	// whether the attempt must not be delivered again (it or a later
	// attempt completed, or the execution is over), in one look-up.
	Check(ctx context.Context, refs []store.CheckRef) ([]store.CheckResult, error)
	// RecordCompleted records attempts whose consequences are confirmed.
	RecordCompleted(ctx context.Context, done []store.CompletedAttempt) error
}

// Workers is how many deliveries of each priority are made at once: the
// bound on concurrent requests towards the targets of that priority.
type Workers struct {
	High, Normal, Low int
}

// Options for New.
type Options struct {
	// AMQPURL is the broker the dispatch queues are consumed from.
	// Required.
	AMQPURL string
	// Publisher publishes retries, dead letters and lifecycle event
	// batches, with confirms, to topics made by broker.Route (a
	// broker.Publisher on broker.RoutedPublisherConfig). Required.
	Publisher message.Publisher
	// Deliverer makes the attempts. Required.
	Deliverer deliver.Deliverer
	// Checks, if non-nil, is asked before every attempt (a cancelled
	// execution is not delivered; a redelivered attempt that completed is
	// acknowledged without being delivered) and told of every attempt once
	// its consequences are confirmed, before its message is acknowledged.
	// Best effort: a failed look-up delivers; a failed record is held in
	// memory (still deduplicating) and recorded again every
	// RecordRetryInterval. Nil checks nothing.
	Checks Checks
	// Cancels, if non-nil, stops cancelled executions at every stage: a
	// request whose execution it knows cancelled is dropped without a
	// look-up (a queued first attempt included), and every attempt runs
	// tracked in its Registry, so that a cancel aborts it in flight (see
	// package inflight). Run waits up to CancelTimeout for its first read
	// before consuming. Its Run is the caller's to start.
	Cancels *inflight.Watcher
	// UnrecordedCapacity bounds the completions held in memory while they
	// cannot be recorded. Default DefaultUnrecordedCapacity.
	UnrecordedCapacity int
	// RecordRetryInterval is how often held completions are recorded
	// again. Default DefaultRecordRetryInterval.
	RecordRetryInterval time.Duration
	// Overlap, if non-nil, enforces the executions' overlap policies: the
	// first attempt of an execution whose policy is not ALLOW is admitted,
	// skipped (a SKIPPED event, recorded completed), buffered or cancels
	// the job's execution in progress (through Cancels), and the final
	// outcome of such an execution releases its job (see overlap.go). A
	// check that fails requeues the request. Nil enforces nothing: every
	// execution runs as ALLOW.
	Overlap Overlap
	// OverlapSweepInterval is how often the overlap state is swept (stale
	// holds released, unconfirmed promotions published again, failed
	// releases retried). Default DefaultOverlapSweepInterval.
	OverlapSweepInterval time.Duration

	// Broker names. Defaults: the Default* constants.
	DispatchExchange   string
	DispatchQueue      string // prefix of the per-priority queues
	RetryExchange      string
	RetryQueue         string // prefix of the per-tier delay queues
	DeadExchange       string
	DeadQueue          string
	ExecutionsExchange string
	// RetryTiers are the delay queues, each a whole number of
	// milliseconds, distinct and positive. Default broker.DefaultRetryTiers. The
	// tiers of a deployment may grow but a tier's queue, once declared,
	// keeps its TTL: change a tier by adding a new one.
	RetryTiers []time.Duration

	// Prefetch is how many messages each worker has in hand: a priority
	// consumes through Workers x Prefetch subscriptions, each an AMQP
	// channel with a prefetch of one (see the package documentation).
	// Default DefaultPrefetch.
	Prefetch int
	// Workers per priority; a zero field takes its default
	// (DefaultHighWorkers, DefaultNormalWorkers, DefaultLowWorkers).
	Workers Workers

	// EventBatch caps the events of one broker message. Default
	// DefaultEventBatch.
	EventBatch int
	// EventLinger is how long a batch of lifecycle events waits to fill
	// before it is published (it is published earlier when full). It
	// delays acknowledgements, not deliveries. Default DefaultEventLinger;
	// negative means none (publish as soon as a publisher is free).
	EventLinger time.Duration
	// EventPublishers is how many event batches are published at once.
	// Default DefaultEventPublishers.
	EventPublishers int
	// EventHold bounds how long lifecycle events are held back while
	// requests wait for a delivery slot, so that a crowd's deliveries do
	// not compete with the consequences of its first ones (see backlog).
	// Default DefaultEventHold; negative means never.
	EventHold time.Duration
	// StartedEventAfter is how long an attempt runs before its STARTED
	// event is emitted; an attempt that ends sooner emits only its outcome
	// event, which carries all a STARTED would (start time included).
	// Every event costs each consumer (history, alerting, the registry) a
	// decode and often a row write, and a STARTED that its outcome follows
	// within milliseconds is stale before anyone reads it. A STARTED that
	// is emitted is confirmed before the message is acknowledged, as the
	// outcome is. Zero (not a default: it is a threshold) emits STARTED at
	// the start of every attempt; the dispatcher's flag defaults to
	// DefaultStartedEventAfter. Negative is invalid.
	StartedEventAfter time.Duration

	// MaxHold bounds the hold of a request fired ahead of its slot: it is
	// delivered at its not_before, or MaxHold after it was taken if that
	// is sooner. Default DefaultMaxHold.
	MaxHold time.Duration

	// DrainTimeout is how long, once Run's context ends, deliveries under
	// way may take to finish; the ones still running then are interrupted
	// and their messages requeued. Default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// PublishTimeout bounds the wait for the confirms a message's
	// consequences need before it is acknowledged. Default
	// DefaultPublishTimeout.
	PublishTimeout time.Duration
	// CancelTimeout bounds a cancellation look-up; past it the request is
	// delivered. Default DefaultCancelTimeout.
	CancelTimeout time.Duration
	// Backoff is the first wait before a message whose consequences could
	// not be published is requeued (doubling up to MaxBackoff, reset by a
	// success): the worker pauses rather than spin on a broker that is
	// away. Defaults DefaultBackoff and DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration

	// TracerProvider makes each message's consumer span. Default: none.
	TracerProvider trace.TracerProvider
	// Propagator reads the trace context of dispatch messages and writes it
	// into the messages they cause. Default propagation.TraceContext.
	Propagator propagation.TextMapPropagator
	// Metrics, if non-nil, receives the pipeline's metrics (see metrics.go).
	Metrics prometheus.Registerer
	// Logger receives poison messages, publish failures and connection
	// trouble. Nil discards.
	Logger *slog.Logger
	// Clock is the time source of events and backoffs. Default clock.Real.
	Clock clock.Clock
}

// Pipeline consumes dispatch requests and delivers them. Create with New,
// start with Run.
type Pipeline struct {
	opts    Options
	tracer  trace.Tracer
	logger  *slog.Logger
	metrics metrics
	// slots bounds the concurrent deliveries of each priority (by
	// priority name): a token is held from the attempt's start to its
	// outcome, not while its consequences are confirmed and recorded.
	slots     map[string]chan struct{}
	events    *batcher[*eventsv1.ExecutionEvent]
	backlog   *backlog
	checks    *batcher[*checkQuery]
	records   *batcher[store.CompletedAttempt]
	held      *unrecorded
	unsettled *unsettled
	senders   senders
	releases  refSet
	ready     chan struct{}
	readyOnce sync.Once
}

// checkQuery is one look-up before an attempt; the flush fills result.
type checkQuery struct {
	ref    store.CheckRef
	result store.CheckResult
}

// New validates opts, applies the defaults and registers the metrics. It
// does not connect: Run does.
func New(opts Options) (*Pipeline, error) {
	switch {
	case opts.AMQPURL == "":
		return nil, errors.New("pipeline: AMQPURL is required")
	case opts.Publisher == nil:
		return nil, errors.New("pipeline: Publisher is required")
	case opts.Deliverer == nil:
		return nil, errors.New("pipeline: Deliverer is required")
	case opts.Prefetch < 0 || opts.Workers.High < 0 || opts.Workers.Normal < 0 || opts.Workers.Low < 0 ||
		opts.EventBatch < 0 || opts.EventPublishers < 0 || opts.DrainTimeout < 0 || opts.PublishTimeout < 0 ||
		opts.CancelTimeout < 0 || opts.Backoff < 0 || opts.MaxBackoff < 0 || opts.UnrecordedCapacity < 0 || opts.RecordRetryInterval < 0 || opts.OverlapSweepInterval < 0 ||
		opts.StartedEventAfter < 0 || opts.MaxHold < 0:
		return nil, errors.New("pipeline: counts and durations must not be negative")
	}
	opts.DispatchExchange = cmp.Or(opts.DispatchExchange, DefaultDispatchExchange)
	opts.DispatchQueue = cmp.Or(opts.DispatchQueue, DefaultDispatchQueue)
	opts.RetryExchange = cmp.Or(opts.RetryExchange, DefaultRetryExchange)
	opts.RetryQueue = cmp.Or(opts.RetryQueue, DefaultRetryQueue)
	opts.DeadExchange = cmp.Or(opts.DeadExchange, DefaultDeadExchange)
	opts.DeadQueue = cmp.Or(opts.DeadQueue, DefaultDeadQueue)
	opts.ExecutionsExchange = cmp.Or(opts.ExecutionsExchange, DefaultExecutionsExchange)
	if len(opts.RetryTiers) == 0 {
		opts.RetryTiers = broker.DefaultRetryTiers()
	}
	if err := validateTiers(opts.RetryTiers); err != nil {
		return nil, err
	}
	opts.RetryTiers = slices.Sorted(slices.Values(opts.RetryTiers))
	opts.Prefetch = cmp.Or(opts.Prefetch, DefaultPrefetch)
	opts.Workers.High = cmp.Or(opts.Workers.High, DefaultHighWorkers)
	opts.Workers.Normal = cmp.Or(opts.Workers.Normal, DefaultNormalWorkers)
	opts.Workers.Low = cmp.Or(opts.Workers.Low, DefaultLowWorkers)
	opts.EventBatch = cmp.Or(opts.EventBatch, DefaultEventBatch)
	switch {
	case opts.EventLinger == 0:
		opts.EventLinger = DefaultEventLinger
	case opts.EventLinger < 0:
		opts.EventLinger = 0
	}
	opts.EventPublishers = cmp.Or(opts.EventPublishers, DefaultEventPublishers)
	switch {
	case opts.EventHold == 0:
		opts.EventHold = DefaultEventHold
	case opts.EventHold < 0:
		opts.EventHold = 0
	}
	opts.DrainTimeout = cmp.Or(opts.DrainTimeout, DefaultDrainTimeout)
	opts.MaxHold = cmp.Or(opts.MaxHold, DefaultMaxHold)
	opts.PublishTimeout = cmp.Or(opts.PublishTimeout, DefaultPublishTimeout)
	opts.CancelTimeout = cmp.Or(opts.CancelTimeout, DefaultCancelTimeout)
	opts.Backoff = cmp.Or(opts.Backoff, DefaultBackoff)
	opts.MaxBackoff = max(cmp.Or(opts.MaxBackoff, DefaultMaxBackoff), opts.Backoff)
	opts.UnrecordedCapacity = cmp.Or(opts.UnrecordedCapacity, DefaultUnrecordedCapacity)
	opts.RecordRetryInterval = cmp.Or(opts.RecordRetryInterval, DefaultRecordRetryInterval)
	opts.OverlapSweepInterval = cmp.Or(opts.OverlapSweepInterval, DefaultOverlapSweepInterval)
	opts.TracerProvider, opts.Propagator, opts.Clock = broker.OrDefaults(opts.TracerProvider, opts.Propagator, opts.Clock)
	p := &Pipeline{
		opts:    opts,
		tracer:  opts.TracerProvider.Tracer(tracerName),
		logger:  cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		metrics: newMetrics(),
		slots: map[string]chan struct{}{
			"high":   make(chan struct{}, opts.Workers.High),
			"normal": make(chan struct{}, opts.Workers.Normal),
			"low":    make(chan struct{}, opts.Workers.Low),
		},
		ready: make(chan struct{}),
	}
	p.unsettled = newUnsettled(unsettledBudget, unsettledMaxAge, p.metrics.unsettledDrops.Inc)
	p.backlog = newBacklog(opts.Clock, opts.EventHold, p.metrics.slotWaiters)
	p.events = newBatcher(p.publishEvents, opts.EventBatch, opts.EventLinger, opts.EventPublishers, opts.PublishTimeout)
	if opts.Checks != nil {
		// No linger: the look-up is on the way to the target.
		p.checks = newBatcher(p.lookUp, 1000, 0, 2, opts.CancelTimeout)
		p.records = newBatcher(p.recordCompletions, 1000, 0, 2, opts.CancelTimeout)
		p.held = newUnrecorded(opts.UnrecordedCapacity)
	}
	if err := register(opts.Metrics, p.metrics.all); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	return p, nil
}

func validateTiers(tiers []time.Duration) error {
	seen := map[time.Duration]bool{}
	for _, t := range tiers {
		if t < time.Millisecond || t%time.Millisecond != 0 {
			return fmt.Errorf("pipeline: retry tier %v must be a positive whole number of milliseconds", t)
		}
		if seen[t] {
			return fmt.Errorf("pipeline: retry tier %v is given twice", t)
		}
		seen[t] = true
	}
	return nil
}

// Bindings is the topology the pipeline needs, which Run declares: the
// per-priority dispatch queues, one delay queue per retry tier (dead-
// lettering back to the dispatch exchange) and the dead-letter queue
// (binding "#"). The executions exchange has no queue of ours: its
// consumers (history, alerting) bind their own, and the publisher declares
// the exchange.
func (p *Pipeline) Bindings() []broker.QueueBinding {
	o := p.opts
	bindings := broker.DispatchQueues(o.DispatchExchange, o.DispatchQueue)
	bindings = append(bindings, broker.RetryTiers(o.RetryExchange, o.RetryQueue, o.DispatchExchange, o.RetryTiers)...)
	return append(bindings, DeadBinding(o.DeadExchange, o.DeadQueue))
}

// DeadBinding is the dead-letter queue: every message of the dead exchange.
func DeadBinding(exchange, queue string) broker.QueueBinding {
	return broker.QueueBinding{Exchange: exchange, Queue: queue, BindingKey: "#"}
}

// Ready is closed once every worker is subscribed.
func (p *Pipeline) Ready() <-chan struct{} { return p.ready }

// Run declares the topology (Bindings), subscribes and delivers until ctx
// is done. While RabbitMQ is unreachable it retries with backoff.
// Shutdown: the subscriptions stop taking messages (what the broker has
// sent but no subscription has taken returns to the queue), deliveries under way get DrainTimeout to finish
// and have their consequences confirmed, the ones still running then are
// interrupted and requeued, the last events are flushed, and Run returns
// nil. Call it once.
func (p *Pipeline) Run(ctx context.Context) error {
	if err := broker.DeclareQueues(ctx, p.opts.AMQPURL, p.Bindings()...); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("pipeline: declare topology: %w", err)
	}
	// hard outlives ctx by the drain timeout: deliveries and their
	// publishes run under it.
	hard, interrupt := context.WithCancel(context.WithoutCancel(ctx))
	defer interrupt()
	batchCtx, stopBatchers := context.WithCancel(context.WithoutCancel(ctx))
	var batchers sync.WaitGroup
	batchers.Go(func() { p.events.run(batchCtx) })
	batchers.Go(func() { p.senders.run(batchCtx) })
	if p.checks != nil {
		batchers.Go(func() { p.checks.run(batchCtx) })
		batchers.Go(func() { p.records.run(batchCtx) })
		batchers.Go(func() { p.recordHeld(batchCtx) })
	}
	if p.opts.Overlap != nil {
		batchers.Go(func() { p.sweepOverlap(batchCtx) })
	}
	defer func() {
		stopBatchers()
		batchers.Wait()
	}()

	o := p.opts
	subscriptions, bindingKeys, priorities := map[string]int{}, map[string]string{}, map[string]string{}
	for name, slots := range p.slots {
		q := broker.DispatchQueue(o.DispatchQueue, name)
		subscriptions[q] = cap(slots) * o.Prefetch
		bindingKeys[q], priorities[q] = "#."+broker.DispatchRoutingKey(name), name
	}
	cfg := subscriberConfig(o.AMQPURL, o.DispatchExchange, 1, bindingKeys)
	if err := cfg.ValidateSubscriber(); err != nil {
		return fmt.Errorf("pipeline: subscriber config: %w", err)
	}
	if o.Cancels != nil {
		select {
		case <-o.Cancels.Ready():
		case <-o.Clock.After(o.CancelTimeout):
			p.logger.WarnContext(ctx, "consuming before the cancellations could be read: a queued first attempt of a cancelled execution may be delivered, then aborted")
		case <-ctx.Done():
			return nil
		}
	}
	sub, subs := subscribe(ctx, cfg, subscriptions, p.logger, o.Clock, newBackoff(o.Backoff, o.MaxBackoff))
	if sub == nil {
		return nil // ctx ended before the broker could be reached
	}
	p.readyOnce.Do(func() { close(p.ready) })
	p.logger.InfoContext(ctx, "consuming dispatch requests",
		slog.String("exchange", o.DispatchExchange), slog.Int("subscriptions", len(subs)),
		slog.Int("workers", o.Workers.High+o.Workers.Normal+o.Workers.Low))

	workersDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-workersDone:
			return
		}
		select {
		case <-o.Clock.After(o.DrainTimeout):
			interrupt()
		case <-workersDone:
		}
	}()
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() { p.consume(ctx, hard, priorities[s.queue], s) })
	}
	// The subscriptions end when ctx is done (each after its message under
	// way is settled); the workers then return.
	wg.Wait()
	close(workersDone)
	if err := broker.CloseSubscriber(sub); err != nil {
		p.logger.Warn("closing the dispatch subscriber", slog.Any("error", err))
	}
	return nil
}

// verdict is what becomes of a dispatch message.
type verdict int

const (
	// ack: handled, and everything it caused is confirmed.
	ack verdict = iota
	// requeueLater: something it caused could not be published; nack after
	// the worker's backoff.
	requeueLater
	// requeueNow: shutdown interrupted it; nack at once.
	requeueNow
)

// consume handles the messages of one subscription until it closes.
func (p *Pipeline) consume(ctx, hard context.Context, priority string, s subscription) {
	b := newBackoff(p.opts.Backoff, p.opts.MaxBackoff)
	for {
		// Once ctx is done, what is not taken yet is left to whichever
		// dispatcher runs next.
		msg, ok := broker.Next(ctx, s.messages)
		if !ok {
			return
		}
		switch p.handleMessage(ctx, hard, priority, s.queue, msg) {
		case ack:
			b.reset()
			msg.Ack()
		case requeueLater:
			p.metrics.requeued.Inc()
			sleep(ctx, p.opts.Clock, b.next())
			msg.Nack()
		case requeueNow:
			p.metrics.requeued.Inc()
			msg.Nack()
		}
	}
}

// handleMessage processes one broker message: a dispatch request, or a
// batch of them packed by the trigger's relay (broker.Pack), whose requests
// are handled concurrently, each as if it had arrived alone (a slow target
// holds up only the batch's acknowledgement, not its other deliveries).
// The batch is acknowledged once every request's consequences are
// confirmed; if any must be requeued, the whole batch is, and the
// redelivery skips the requests that completed (a redelivered request is
// looked up, see mayRepeat).
func (p *Pipeline) handleMessage(soft, ctx context.Context, priority, queue string, msg *message.Message) verdict {
	if !broker.IsBatch(msg) {
		return p.handle(soft, ctx, priority, queue, msg)
	}
	msgs, err := broker.Unpack(msg)
	if err != nil {
		_, span := broker.StartProcessSpan(ctx, p.tracer, p.opts.Propagator, p.opts.DispatchExchange, queue, msg)
		defer span.End()
		return p.poison(ctx, span, msg, err)
	}
	p.metrics.batchRequests.Observe(float64(len(msgs)))
	verdicts := make([]verdict, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() { verdicts[i] = p.handle(soft, ctx, priority, queue, m) })
	}
	wg.Wait()
	// The worst verdict settles the batch: requeueNow (shutdown) over
	// requeueLater over ack.
	return slices.Max(verdicts)
}

// handle processes one dispatch request. ctx is the hard context: it ends
// only when shutdown interrupts deliveries. soft ends when shutdown begins:
// a request still held for its slot then is requeued at once, for the
// dispatcher that takes it next.
func (p *Pipeline) handle(soft, ctx context.Context, priority, queue string, msg *message.Message) verdict {
	taken := time.Now()
	ctx, span := broker.StartProcessSpan(ctx, p.tracer, p.opts.Propagator, p.opts.DispatchExchange, queue, msg)
	defer span.End()
	// Attributes only for a span that records (see StartProcessSpan).
	recording := span.IsRecording()

	req := &dispatchv1.DispatchRequest{}
	if err := proto.Unmarshal(msg.Payload, req); err != nil {
		return p.poison(ctx, span, msg, fmt.Errorf("decode dispatch request: %w", err))
	}
	if err := validateRequest(req); err != nil {
		return p.poison(ctx, span, msg, err)
	}
	if recording {
		span.SetAttributes(
			attribute.String("cronmesh.execution.id", req.ExecutionId),
			attribute.String("cronmesh.job.id", req.JobId),
			attribute.String("cronmesh.namespace", req.Namespace),
			attribute.Int("cronmesh.attempt", int(req.Attempt)),
			attribute.String("cronmesh.priority", priority),
		)
	}
	traceID := ""
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		traceID = sc.TraceID().String()
	}

	if s, ok := p.unsettled.get(attemptOf(req)); ok {
		// A redelivery of an attempt made here whose consequences were
		// not all confirmed: its target has seen it; what it caused is
		// published again instead.
		p.metrics.resettled.Inc()
		span.SetAttributes(attribute.String("cronmesh.dispatch.outcome", "settled again"))
		return p.settleKept(ctx, span, req, priority, s, nil)
	}
	check, interrupted := p.precheck(soft, ctx, req, msg.Metadata)
	if interrupted || ctx.Err() != nil {
		return requeueNow
	}
	var attempt deliver.Attempt
	if !check.Completed {
		// Prepared while it is held, so that at the slot's time, when a
		// crowd of slots may be due, only the sending is left.
		attempt = p.prepare(ctx, req)
		// Everything from here on (a cancellation, the deadline, the
		// overlap policy, the delivery) is decided at the slot's time.
		switch waited, interrupted := p.awaitSlot(soft, req); {
		case interrupted:
			return requeueNow // shutdown began while it was held
		case waited:
			taken = time.Now()
		}
	}
	ref := inflight.Ref{Namespace: req.Namespace, ExecutionID: req.ExecutionId}
	isCancelled := check.Cancelled || p.knownCancelled(ctx, req, ref)
	if check.Completed {
		// A redelivery (the relay republished it, or a dispatcher died
		// after its consequences were confirmed but before the ack) of an
		// attempt that completed: its target has seen it. If the
		// execution is over, its job's overlap hold is released again
		// (the first copy may have died between its record and its
		// release; releasing what is released changes nothing).
		p.metrics.duplicates.Inc()
		span.SetAttributes(attribute.String("cronmesh.dispatch.outcome", "duplicate"))
		if check.Final {
			p.release(ctx, req)
		}
		return ack
	}
	dropCancelled := func() verdict {
		p.metrics.cancelled.Inc()
		span.SetAttributes(attribute.String("cronmesh.dispatch.outcome", "cancelled"))
		wait := p.emit(ctx, execevent.New(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED, req, p.opts.Clock.Now(), execevent.Attempt{},
			p.cancelReason(ctx, req, "cancelled through CancelExecution"), traceID))
		v := p.await(ctx, span, nil, wait)
		if v == ack {
			p.release(ctx, req)
		}
		return v
	}
	if isCancelled {
		return dropCancelled()
	}

	if reason := attemptPastDeadline(req, p.opts.Clock.Now()); reason != "" {
		return p.expired(ctx, span, req, reason, traceID)
	}
	if req.Attempt == 1 && p.overlapped(req) {
		// The policy binds the first attempt only: a retry or a redrive
		// belongs to an execution that was admitted (or is explicitly
		// asked for).
		if v, stop := p.admit(ctx, span, req, msg.Metadata, traceID); stop {
			return v
		}
	}

	// A delivery slot of the priority, held until the outcome is known:
	// the bound on concurrent requests towards targets. Waiting for one is
	// the only wait between taking a message and starting its attempt, so
	// the deadline is checked again once it is held.
	slots := p.slots[priority]
	if !p.takeSlot(ctx, slots) {
		return requeueNow
	}
	if p.knownCancelled(ctx, req, ref) {
		// Cancelled while it waited for the slot: still queued, in effect.
		<-slots
		return dropCancelled()
	}
	if reason := attemptPastDeadline(req, p.opts.Clock.Now()); reason != "" {
		<-slots
		return p.expired(ctx, span, req, reason, traceID)
	}
	attemptCtx, release := p.track(ctx, ref)
	defer release()
	startTime := p.opts.Clock.Now()
	announce := p.announceStart(ctx, req, startTime, traceID)
	p.metrics.inFlight.Inc()
	begin := time.Now()
	p.metrics.startDelay.Observe(begin.Sub(taken).Seconds())
	sent := make(chan deliver.Outcome, 1)
	p.senders.send(func() { sent <- p.deliver(attemptCtx, req, attempt) })
	out := <-sent
	elapsed := time.Since(begin)
	// From here on no STARTED is emitted: started is the confirm of the
	// one that was (awaited with the outcome's), or nil.
	started := announce.settle()
	p.metrics.inFlight.Dec()
	<-slots
	// An attempt that succeeded as its cancel arrived stays a success.
	aborted := inflight.Aborted(attemptCtx) && out.Result != deliver.Succeeded
	release()
	if ctx.Err() != nil {
		// Shutdown interrupted the attempt: its result says nothing about
		// the target. Requeued, it is attempted again by the next
		// dispatcher (with the same webhook-id).
		span.SetStatus(codes.Error, "interrupted by shutdown")
		return requeueNow
	}
	duration := cmp.Or(out.Duration, elapsed)
	result := resultName(out.Result)
	p.metrics.deliveries.WithLabelValues(priority, result).Inc()
	p.metrics.duration.WithLabelValues(result).Observe(duration.Seconds())
	if recording {
		span.SetAttributes(attribute.String("cronmesh.dispatch.result", result))
		if out.StatusCode != 0 {
			span.SetAttributes(attribute.Int("cronmesh.dispatch.response_status", out.StatusCode))
		}
	}
	info := execevent.Attempt{Start: startTime, Duration: duration, Status: out.StatusCode, Excerpt: out.Excerpt}
	s := p.decide(ctx, req, out, aborted, info, p.opts.Clock.Now(), traceID)
	switch s.kind {
	case settleCancelled:
		p.metrics.cancelled.Inc()
		span.SetAttributes(attribute.String("cronmesh.dispatch.outcome", "cancelled"))
	case settleRetry:
		span.SetAttributes(attribute.String("cronmesh.dispatch.retry_tier", s.tier.String()))
	}
	// Kept before anything is published: a redelivery that comes while
	// this copy still waits for its confirms (the broker died under it)
	// settles it too, rather than attempting again.
	p.unsettled.keep(attemptOf(req), s, time.Now())
	return p.settleKept(ctx, span, req, priority, s, started)
}

// settleKept settles s, the kept settlement of req's attempt, and lets go
// of it once all of it is confirmed.
func (p *Pipeline) settleKept(ctx context.Context, span trace.Span, req *dispatchv1.DispatchRequest, priority string, s settlement, started <-chan error) verdict {
	v := p.settle(ctx, span, req, priority, s, started)
	if v == ack {
		p.unsettled.forget(attemptOf(req))
	}
	p.metrics.unsettled.Set(float64(p.unsettled.len()))
	return v
}

// decide is what an attempt's outcome calls for, at now.
func (p *Pipeline) decide(ctx context.Context, req *dispatchv1.DispatchRequest, out deliver.Outcome, aborted bool, info execevent.Attempt, now time.Time, traceID string) settlement {
	s := settlement{now: now, info: info, out: out, traceID: traceID}
	retryable := out.Result != deliver.Permanent && SeriesAttempt(req) <= MaxRetries(req.RetryPolicy)
	var pastDeadline string
	if retryable {
		s.tier = RetryDelay(p.opts.RetryTiers, req.RetryPolicy, SeriesAttempt(req), out.RetryAfter)
		pastDeadline = retryPastDeadline(req, now.Add(s.tier))
		retryable = pastDeadline == ""
	}
	switch {
	case aborted:
		s.kind = settleCancelled
		s.reason = p.cancelReason(ctx, req, "cancelled through CancelExecution") + "; the attempt in flight was aborted"
	case out.Result == deliver.Succeeded:
		s.kind, s.reason = settleSucceeded, out.Reason
	case retryable:
		s.kind = settleRetry
		s.info.Retry = s.tier
		s.reason = fmt.Sprintf("%s; retry scheduled: attempt %d in %s", failureReason(out), req.Attempt+1, s.tier)
	default:
		s.kind, s.tier = settleDead, 0
		s.reason = failureReason(out)
		switch {
		case pastDeadline != "":
			s.reason = fmt.Sprintf("%s; last attempt %d: %s", pastDeadline, req.Attempt, s.reason)
		case out.Result != deliver.Permanent:
			s.reason = fmt.Sprintf("retries exhausted after attempt %d: %s", req.Attempt, s.reason)
		}
	}
	return s
}

// settle publishes what s calls for (started is the confirm of the
// attempt's STARTED, or nil), waits for the confirms and records the
// attempt as completed: ack when all of it is on the broker.
func (p *Pipeline) settle(ctx context.Context, span trace.Span, req *dispatchv1.DispatchRequest, priority string, s settlement, started <-chan error) verdict {
	event := func(kind eventsv1.ExecutionEventKind, reason string) <-chan error {
		return p.emit(ctx, execevent.New(kind, req, s.now, s.info, reason, s.traceID))
	}
	switch s.kind {
	case settleCancelled:
		cancelled := event(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED, s.reason)
		return p.finished(ctx, req, p.await(ctx, span, nil, started, cancelled), s.now)
	case settleSucceeded:
		succeeded := event(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, s.reason)
		return p.finished(ctx, req, p.await(ctx, span, nil, started, succeeded), s.now)
	case settleRetry:
		failed := event(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, s.reason)
		err := p.publishRetry(ctx, req, priority, s.tier)
		if err == nil {
			p.metrics.retries.WithLabelValues(s.tier.String()).Inc()
		}
		return p.completed(ctx, req, p.await(ctx, span, err, started, failed), false, s.now)
	default:
		failed := event(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, s.reason+"; not retried")
		dead := event(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD, s.reason)
		err := p.publishDead(ctx, req, s.out, s.reason, s.now)
		if err == nil {
			p.metrics.deadLetters.Inc()
		}
		return p.finished(ctx, req, p.await(ctx, span, err, started, failed, dead), s.now)
	}
}

// takeSlot takes a delivery slot from slots, counted in the backlog while
// it waits for one. It fails when ctx ends first.
func (p *Pipeline) takeSlot(ctx context.Context, slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
	}
	p.backlog.enter()
	defer p.backlog.leave()
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// awaitSlot waits until req's not_before, the firing time of a slot the
// trigger fired ahead of it, bounded by MaxHold, and says whether it
// waited, and whether ctx ended first (the caller then requeues the
// request). The message stays unacknowledged meanwhile: a dispatcher that
// dies holding it leaves it to be redelivered.
func (p *Pipeline) awaitSlot(ctx context.Context, req *dispatchv1.DispatchRequest) (waited, interrupted bool) {
	if req.GetNotBefore() == nil {
		return false, false
	}
	wait := req.GetNotBefore().AsTime().Sub(p.opts.Clock.Now())
	p.metrics.hold.Observe(max(wait, 0).Seconds())
	if wait <= 0 {
		return false, false
	}
	if wait > p.opts.MaxHold {
		p.metrics.holdsCapped.Inc()
		wait = p.opts.MaxHold
	}
	return true, !sleep(ctx, p.opts.Clock, wait)
}

// expired dead-letters req without an attempt: its deadline has passed
// (reason says which). Like a retry stopped by the deadline, it ends the
// execution, and is recorded as its last attempt so that a redelivery of
// the message is not taken for a new one.
func (p *Pipeline) expired(ctx context.Context, span trace.Span, req *dispatchv1.DispatchRequest, reason, traceID string) verdict {
	p.metrics.deadlineExceeded.Inc()
	span.SetAttributes(attribute.String("cronmesh.dispatch.outcome", "deadline_exceeded"))
	now := p.opts.Clock.Now()
	dead := p.emit(ctx, execevent.New(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD, req, now, execevent.Attempt{}, reason, traceID))
	err := p.publishDead(ctx, req, deliver.Outcome{}, reason, now)
	if err == nil {
		p.metrics.deadLetters.Inc()
	}
	return p.finished(ctx, req, p.await(ctx, span, err, dead), now)
}

// knownCancelled reports whether the Cancels know ref's execution
// cancelled: an answer from memory, so it is asked of every request, a
// first attempt included, without a database round trip. A yes (rare) is
// confirmed by the database, because a redrive lifts a cancellation and
// the memory does not see rows go: a cancellation the database no longer
// holds is forgotten and the request delivered. A no is asked of the
// database too while the memory is full (inflight.Watcher.Full). A failed
// confirmation trusts the memory.
func (p *Pipeline) knownCancelled(ctx context.Context, req *dispatchv1.DispatchRequest, ref inflight.Ref) bool {
	if p.opts.Cancels == nil {
		return false
	}
	known := p.opts.Cancels.Known(ref)
	if !known && !p.opts.Cancels.Full() {
		return false
	}
	if p.checks == nil {
		return known
	}
	q := &checkQuery{ref: checkRef(req)}
	select {
	case err := <-p.checks.submit(q):
		if err != nil {
			p.metrics.cancelErrors.Inc()
			return known
		}
		if known && !q.result.Cancelled {
			p.opts.Cancels.Forget(ref)
		}
		return q.result.Cancelled
	case <-ctx.Done():
		return known
	}
}

// track runs an attempt of ref under the Cancels' registry: the context
// it returns is aborted by a cancel of ref. (A cancel that lands between
// the check after the slot and this registration is not missed: each read
// of the feed aborts again what was recorded in its overlap.) Without
// Cancels it is ctx, and release does nothing.
func (p *Pipeline) track(ctx context.Context, ref inflight.Ref) (context.Context, func()) {
	if p.opts.Cancels == nil {
		return ctx, func() {}
	}
	attemptCtx, release := p.opts.Cancels.Registry().Track(ctx, ref)
	return attemptCtx, sync.OnceFunc(release)
}

// prepare has the Deliverer prepare req's attempt, and deliver makes it,
// each turning a panic into a Permanent failure: the request goes to the
// dead-letter store, where it is seen, instead of crashing the dispatcher
// on every redelivery.
func (p *Pipeline) prepare(ctx context.Context, req *dispatchv1.DispatchRequest) (attempt deliver.Attempt) {
	defer func() {
		if r := recover(); r != nil {
			out := p.panicked(ctx, req, r)
			attempt = deliver.AttemptFunc(func(context.Context) deliver.Outcome { return out })
		}
	}()
	return p.opts.Deliverer.Prepare(ctx, req)
}

func (p *Pipeline) deliver(ctx context.Context, req *dispatchv1.DispatchRequest, attempt deliver.Attempt) (out deliver.Outcome) {
	defer func() {
		if r := recover(); r != nil {
			out = p.panicked(ctx, req, r)
		}
	}()
	return attempt.Make(ctx)
}

// panicked logs a panic of the Deliverer and is the attempt's outcome.
func (p *Pipeline) panicked(ctx context.Context, req *dispatchv1.DispatchRequest, r any) deliver.Outcome {
	p.logger.ErrorContext(ctx, "the deliverer panicked", slog.String("execution_id", req.ExecutionId),
		slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
	return deliver.Outcome{Result: deliver.Permanent, Reason: "internal error of the dispatcher (see its log)"}
}

// await waits for the events' confirms (and takes publishErr, the direct
// publish's result, into account): ack when all are on the broker. A nil
// wait is an event that was not emitted (an attempt's STARTED, see
// announceStart) and is skipped.
//
// The bound is a timer closing a channel rather than a
// context.WithTimeout of ctx: ctx is shared by every request, and each
// child of it is added to its set of children and removed again under its
// one lock.
func (p *Pipeline) await(ctx context.Context, span trace.Span, publishErr error, waits ...<-chan error) verdict {
	expired := make(chan struct{})
	timer := time.AfterFunc(p.opts.PublishTimeout, func() { close(expired) })
	defer timer.Stop()
	errs := []error{publishErr}
	for _, w := range waits {
		if w == nil {
			continue
		}
		select {
		case err := <-w:
			errs = append(errs, err)
		case <-expired:
			errs = append(errs, fmt.Errorf("waiting for lifecycle events to be confirmed: %w", context.DeadlineExceeded))
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("waiting for lifecycle events to be confirmed: %w", ctx.Err()))
		}
	}
	err := errors.Join(errs...)
	if err == nil {
		return ack
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, "publishing consequences failed")
	if ctx.Err() != nil {
		return requeueNow
	}
	p.logger.WarnContext(ctx, "publishing what a delivery caused failed; the request will be redelivered", slog.Any("error", err))
	return requeueLater
}

// publishRetry parks the next attempt of req in the tier's delay queue.
func (p *Pipeline) publishRetry(ctx context.Context, req *dispatchv1.DispatchRequest, priority string, tier time.Duration) error {
	next := proto.Clone(req).(*dispatchv1.DispatchRequest)
	next.Attempt = req.Attempt + 1
	body, err := proto.Marshal(next)
	if err != nil {
		return fmt.Errorf("encode retry of %s: %w", req.ExecutionId, err)
	}
	topic := broker.Route(p.opts.RetryExchange, broker.RetryRoutingKey(tier, priority))
	if err := p.publish(ctx, topic, req.ExecutionId, body); err != nil {
		p.metrics.publishFailures.WithLabelValues("retry").Inc()
		return fmt.Errorf("publish retry of %s: %w", req.ExecutionId, err)
	}
	return nil
}

// publishDead sends req, with the last outcome, to the dead exchange as a
// dispatcherv1.DeadLetter (request with its signing secret: the dead-letter
// store needs it for redrives). Routing key "dead.<namespace>".
func (p *Pipeline) publishDead(ctx context.Context, req *dispatchv1.DispatchRequest, out deliver.Outcome, reason string, now time.Time) error {
	dl := &dispatcherv1.DeadLetter{
		Id:              uuid.Must(uuid.NewV7()).String(),
		ExecutionId:     req.ExecutionId,
		JobId:           req.JobId,
		Attempt:         req.Attempt,
		NominalTime:     req.NominalTime,
		DeadTime:        timestamppb.New(now),
		Reason:          execevent.CleanText(reason),
		ResponseStatus:  int32(out.StatusCode),
		ResponseExcerpt: execevent.CleanText(excerpt(out.Excerpt)),
		Request:         req,
	}
	body, err := proto.Marshal(dl)
	if err != nil {
		return fmt.Errorf("encode dead letter of %s: %w", req.ExecutionId, err)
	}
	if err := p.publish(ctx, broker.Route(p.opts.DeadExchange, "dead."+req.Namespace), dl.Id, body); err != nil {
		p.metrics.publishFailures.WithLabelValues("dead").Inc()
		return fmt.Errorf("publish dead letter of %s: %w", req.ExecutionId, err)
	}
	return nil
}

// publish publishes one message under a producer span of ctx's trace,
// which the message carries (the next attempt's consumer span is its
// child, across the delay queue: RabbitMQ keeps a message's headers when
// it dead-letters it), and waits for its confirm.
func (p *Pipeline) publish(ctx context.Context, topic, id string, body []byte) error {
	return p.publishWith(ctx, topic, id, body, nil)
}

// publishWith is publish with headers added to the message.
func (p *Pipeline) publishWith(ctx context.Context, topic, id string, body []byte, headers map[string]string) error {
	exchange, key := broker.SplitRoute(topic)
	ctx, span := p.tracer.Start(ctx, "publish "+exchange,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemRabbitMQ,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("publish"),
			semconv.MessagingDestinationName(exchange),
			semconv.MessagingRabbitMQDestinationRoutingKey(key),
			semconv.MessagingMessageID(id),
			semconv.MessagingMessageBodySize(len(body)),
		))
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, p.opts.PublishTimeout)
	defer cancel()
	msg := message.NewMessage(id, body)
	for k, v := range headers {
		msg.Metadata.Set(k, v)
	}
	broker.InjectTrace(ctx, p.opts.Propagator, msg.Metadata)
	msg.SetContext(ctx)
	if err := p.opts.Publisher.Publish(topic, msg); err != nil {
		span.RecordError(err)
		span.SetAttributes(semconv.ErrorTypeOther)
		span.SetStatus(codes.Error, "publish failed")
		return err
	}
	return nil
}

// precheck asks whether req's attempt has completed (and its execution is
// over) and whether its execution is cancelled, in one batched look-up. A
// first publish of a slot's first attempt skips the look-up (see
// mayRepeat).
//
// A failed look-up (the database is away, or too slow to answer within
// CancelTimeout) answers no to all for a retry: retries go on through a
// database outage. A request that may be a second copy of one already
// delivered (mayBeACopy) is different: delivered unasked, it reaches the
// target twice whenever its first copy completed, which is what the relay
// and the broker flagged it for. It waits, its message in hand, and is
// asked again after a backoff until the look-up answers (or an attempt
// completed here covers it); interrupted reports that shutdown began
// first, and the message is requeued. A starved host times look-ups out by
// the hundreds, and every flagged copy among them would go out twice (ADR
// 0006).
func (p *Pipeline) precheck(soft, ctx context.Context, req *dispatchv1.DispatchRequest, md message.Metadata) (_ store.CheckResult, interrupted bool) {
	if p.checks == nil {
		return store.CheckResult{}, false
	}
	if p.held.covers(req.ExecutionId, req.Attempt) {
		return store.CheckResult{Completed: true}, false
	}
	if !mayRepeat(req, md) {
		p.metrics.lookUpsSkipped.Inc()
		return store.CheckResult{}, false
	}
	copied := mayBeACopy(md)
	b := newBackoff(p.opts.Backoff, p.opts.MaxBackoff)
	for asked := 1; ; asked++ {
		q := &checkQuery{ref: checkRef(req)}
		var err error
		select {
		case err = <-p.checks.submit(q):
		case <-ctx.Done():
			return store.CheckResult{}, true
		}
		if err == nil {
			return q.result, false
		}
		p.metrics.cancelErrors.Inc()
		if !copied {
			p.logger.WarnContext(ctx, "look-up before delivery failed; delivering", slog.String("execution_id", req.ExecutionId), slog.Any("error", err))
			return store.CheckResult{}, false
		}
		if asked == 1 {
			p.logger.WarnContext(ctx, "look-up of a possible second copy failed; holding it until the look-up answers",
				slog.String("execution_id", req.ExecutionId), slog.Int("attempt", int(req.Attempt)), slog.Any("error", err))
		}
		if !sleep(soft, p.opts.Clock, b.next()) {
			return store.CheckResult{}, true
		}
		if p.held.covers(req.ExecutionId, req.Attempt) {
			return store.CheckResult{Completed: true}, false
		}
	}
}

// mayRepeat reports whether req, with its message's metadata md, can be
// an attempt that completed already, which the look-up answers (with
// whether its execution is cancelled). A slot's first attempt (attempt 1;
// a redrive goes on from a later attempt) cannot on its first delivery
// (not flagged redelivered by the broker) of its first publish (not
// flagged by the trigger's outbox relay as possibly published before):
// that is nearly every message, and skipping its look-up keeps a database
// round trip, 19-28 ms at p99 on a saturated host, off the way to the
// target. Whether it is cancelled is answered from memory instead
// (Options.Cancels).
func mayRepeat(req *dispatchv1.DispatchRequest, md message.Metadata) bool {
	return req.GetAttempt() > 1 || mayBeACopy(md)
}

// mayBeACopy reports whether the message with metadata md may be a second
// copy of one delivered before: the broker redelivered it, or the
// trigger's outbox relay may have published it before.
func mayBeACopy(md message.Metadata) bool {
	return md.Get(broker.RedeliveredHeader) != "" ||
		md.Get(outbox.PossibleDuplicateHeader) != "" ||
		cmp.Or(md.Get(broker.DeliveryCountHeader), "0") != "0"
}

// checkRef names req's attempt for the store's look-up; its completion
// record is keyed by the slot's time and the execution id.
func checkRef(req *dispatchv1.DispatchRequest) store.CheckRef {
	return store.CheckRef{Namespace: req.Namespace, NominalTime: req.GetNominalTime().AsTime(),
		ExecutionID: req.ExecutionId, Attempt: req.Attempt}
}

// completed records req's attempt as completed at now (final: its
// execution is over; now is a dead letter's DeadTime, which a redrive
// compares with) when v acknowledges it, and waits for the record (bounded
// by CancelTimeout in the batcher), so that an acknowledged attempt is
// recorded unless the database failed. Only after the consequences are
// confirmed: a recorded attempt whose retry was never published would be
// lost on redelivery.
func (p *Pipeline) completed(ctx context.Context, req *dispatchv1.DispatchRequest, v verdict, final bool, now time.Time) verdict {
	if v != ack || p.records == nil {
		return v
	}
	done := store.CompletedAttempt{NominalTime: req.GetNominalTime().AsTime(), ExecutionID: req.ExecutionId, Attempt: req.Attempt, Final: final, Time: now}
	select {
	case err := <-p.records.submit(done):
		if err != nil {
			p.metrics.recordErrors.Inc()
			p.hold(ctx, done, err)
		}
	case <-ctx.Done():
	}
	return ack
}

// hold keeps a completion whose record failed in memory, deduplicating
// until recordHeld writes it.
func (p *Pipeline) hold(ctx context.Context, done store.CompletedAttempt, err error) {
	if p.held.add(done) {
		p.metrics.unrecorded.Set(float64(p.held.len()))
		p.logger.DebugContext(ctx, "recording a completed attempt failed; holding it until the database answers",
			slog.String("execution_id", done.ExecutionID), slog.Any("error", err))
		return
	}
	p.metrics.unrecordedDrops.Inc()
	p.logger.WarnContext(ctx, "recording a completed attempt failed and the in-memory hold is full; a redelivery of it would be delivered again",
		slog.String("execution_id", done.ExecutionID), slog.Any("error", err))
}

// recordHeld records the held completions every RecordRetryInterval until
// ctx ends, then makes a last attempt bounded by CancelTimeout and says
// how many are lost.
func (p *Pipeline) recordHeld(ctx context.Context) {
	flush := func(ctx context.Context) error {
		for p.held.len() > 0 {
			batch := p.held.take(1000)
			callCtx, cancel := context.WithTimeout(ctx, p.opts.CancelTimeout)
			err := p.opts.Checks.RecordCompleted(callCtx, batch)
			cancel()
			if err != nil {
				return err
			}
			p.held.forget(batch)
			p.metrics.unrecorded.Set(float64(p.held.len()))
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			if p.held.len() == 0 {
				return
			}
			if err := flush(context.WithoutCancel(ctx)); err != nil {
				p.logger.Warn("stopping with completed attempts not recorded; redeliveries of them would be delivered again",
					slog.Int("completions", p.held.len()), slog.Any("error", err))
			}
			return
		case <-p.opts.Clock.After(p.opts.RecordRetryInterval):
			if err := flush(ctx); err != nil {
				p.logger.Debug("recording held completions failed; retrying", slog.Int("completions", p.held.len()), slog.Any("error", err))
			}
		}
	}
}

// lookUp is the flush of the look-up batcher.
func (p *Pipeline) lookUp(ctx context.Context, qs []*checkQuery) error {
	refs := make([]store.CheckRef, len(qs))
	for i, q := range qs {
		refs[i] = q.ref
	}
	got, err := p.opts.Checks.Check(ctx, refs)
	if err != nil {
		return err
	}
	if len(got) != len(qs) {
		return fmt.Errorf("look-up answered %d of %d", len(got), len(qs))
	}
	for i, q := range qs {
		q.result = got[i]
	}
	return nil
}

// recordCompletions is the flush of the completion record batcher.
func (p *Pipeline) recordCompletions(ctx context.Context, done []store.CompletedAttempt) error {
	return p.opts.Checks.RecordCompleted(ctx, done)
}

// poison records a message that can never be delivered and acknowledges
// it: redelivering it would fail the same way forever. Only a bug upstream
// makes one (the trigger and redrives publish valid requests), so it is
// logged as an error with its id and size.
func (p *Pipeline) poison(ctx context.Context, span trace.Span, msg *message.Message, err error) verdict {
	p.metrics.poison.Inc()
	span.RecordError(err)
	span.SetStatus(codes.Error, "poison message")
	p.logger.ErrorContext(ctx, "dropping a dispatch message that can never be delivered",
		slog.String("message_id", msg.UUID), slog.Int("bytes", len(msg.Payload)), slog.Any("error", err))
	return ack
}

// validateRequest rejects requests that cannot be delivered nor
// dead-lettered: ids that are not UUIDs, no namespace, an attempt below 1
// or before its series' first attempt.
// A request without a usable target is not poison: the Deliverer fails it
// as Permanent, so it lands in the dead-letter store, where an operator
// sees it and can redrive it with a target override.
func validateRequest(req *dispatchv1.DispatchRequest) error {
	if _, err := uuid.Parse(req.ExecutionId); err != nil {
		return fmt.Errorf("invalid dispatch request: execution id %q is not a UUID", req.ExecutionId)
	}
	if _, err := uuid.Parse(req.JobId); err != nil {
		return fmt.Errorf("invalid dispatch request %s: job id %q is not a UUID", req.ExecutionId, req.JobId)
	}
	switch {
	case req.Namespace == "":
		return fmt.Errorf("invalid dispatch request %s: no namespace", req.ExecutionId)
	case req.Attempt < 1:
		return fmt.Errorf("invalid dispatch request %s: attempt %d", req.ExecutionId, req.Attempt)
	case req.FirstAttempt > req.Attempt:
		return fmt.Errorf("invalid dispatch request %s: first attempt %d after attempt %d", req.ExecutionId, req.FirstAttempt, req.Attempt)
	}
	return nil
}

// resultName is the metric label of a result.
func resultName(r deliver.Result) string {
	switch r {
	case deliver.Succeeded:
		return "succeeded"
	case deliver.Permanent:
		return "permanent"
	default:
		// Retryable, and a zero Result from a faulty Deliverer: retrying
		// is the safe reading.
		return "retryable"
	}
}

// failureReason is the outcome's reason, or its status when it gives none.
func failureReason(out deliver.Outcome) string {
	switch {
	case out.Reason != "":
		return out.Reason
	case out.StatusCode != 0:
		return fmt.Sprintf("HTTP %d", out.StatusCode)
	default:
		return "delivery failed"
	}
}

// excerpt caps a response excerpt at deliver.MaxExcerpt, in case a
// Deliverer returns more.
func excerpt(s string) string {
	if len(s) > deliver.MaxExcerpt {
		return s[:deliver.MaxExcerpt]
	}
	return s
}
