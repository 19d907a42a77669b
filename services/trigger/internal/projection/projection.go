package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// Defaults of Options.
const (
	DefaultExchange   = "cronmesh.jobs"
	DefaultQueue      = "cronmesh.trigger.jobs"
	DefaultBindingKey = "job.#"
	// DefaultWorkers subscriptions, each holding one message at a time,
	// fill DefaultBatches batches of up to DefaultMaxBatch events.
	DefaultWorkers = 256
	// DefaultMaxBatch events in one transaction amortise its round trips
	// and commit while staying a few tens of milliseconds of work.
	DefaultMaxBatch = 128
	// DefaultBatches batches in flight: one gathers while another commits.
	DefaultBatches = 2
	// DefaultLinger is the longest a message waits for its batch to fill.
	DefaultLinger     = 10 * time.Millisecond
	DefaultBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// applyTimeout bounds one batch's apply: a database that does not answer
// within it is treated as failing, and the batch is requeued.
const applyTimeout = 30 * time.Second

// deliveryLimit is the queue's x-delivery-limit: in effect none. RabbitMQ
// 4 gives quorum queues a default limit of 20 deliveries, after which a
// message is dropped; an event requeued once a second through a database
// outage of a minute would be lost, and the trigger would never learn of
// that job change. Poison messages need no limit: they are acknowledged.
// Not -1, which RabbitMQ 4 reads as "no limit" but 3.x as a limit that every
// requeued message exceeds.
const deliveryLimit = int64(1) << 30

// tracerName names the consumer's tracer.
const tracerName = "github.com/cronmesh/cronmesh/services/trigger/internal/projection"

// Applier applies a batch of job events in one transaction; *store.Store is
// one. It returns one result per event, in order; a result whose Err wraps
// store.ErrInvalidEvent is an event that can never be applied. An error
// return means nothing was applied and the whole batch is worth a retry.
type Applier interface {
	ApplyBatch(ctx context.Context, events []store.Event, now time.Time) ([]store.Result, error)
}

// Options for New.
type Options struct {
	// Store applies the events. Required.
	Store Applier
	// AMQPURL is the broker. Required.
	AMQPURL string
	// Exchange is the registry's job event exchange. Default
	// DefaultExchange.
	Exchange string
	// Queue is the durable quorum queue all trigger nodes share (declared
	// on subscribe). Default DefaultQueue.
	Queue string
	// BindingKey binds Queue to Exchange. Default DefaultBindingKey.
	BindingKey string
	// Prefetch is the AMQP prefetch of each subscription. Default
	// broker.DefaultPrefetch.
	Prefetch int
	// Workers is the number of subscriptions, each on its own AMQP
	// channel. watermill-amqp hands a subscription its next message only
	// after the last one is acknowledged, and a message is acknowledged
	// only once its batch committed, so Workers is the most messages this
	// node has in hand, and the batches are filled from them. Default
	// DefaultWorkers.
	Workers int
	// MaxBatch is the most events applied in one transaction, at most
	// Workers (a batch cannot hold more messages than are in hand).
	// Default DefaultMaxBatch.
	MaxBatch int
	// Batches is how many batches this node applies concurrently, each on
	// its own database connection. Default DefaultBatches.
	Batches int
	// Linger is how long a batch waits for more messages once it holds
	// every message in hand and fewer than MaxBatch. Default DefaultLinger.
	Linger time.Duration
	// TracerProvider makes each message's consumer span. Default: no
	// tracing.
	TracerProvider trace.TracerProvider
	// Propagator reads the publisher's trace context from the message
	// metadata. Default propagation.TraceContext.
	Propagator propagation.TextMapPropagator
	// Metrics, if non-nil, registers projection_events_applied_total{kind},
	// projection_events_ignored_total{kind,reason} (reason stale,
	// duplicate_run or dropped_run), projection_apply_errors_total,
	// projection_poison_total and projection_lag_seconds (now minus the
	// event's occur time, at apply).
	Metrics prometheus.Registerer
	// Logger receives poison messages, apply errors and connection trouble.
	// Nil discards.
	Logger *slog.Logger
	// Clock is the time source: apply times, lag, the linger and the waits
	// of the backoffs. Default clock.Real.
	Clock clock.Clock
	// Backoff is the first wait before a failed batch is requeued (and
	// before connecting again after a failed connect); it doubles up to
	// MaxBackoff and resets after a success. Defaults DefaultBackoff and
	// DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration
}

// Consumer applies the registry's job events to the store. Create with New,
// start with Run.
type Consumer struct {
	opts      Options
	tracer    trace.Tracer
	logger    *slog.Logger
	ready     chan struct{}
	readyOnce sync.Once
	metrics   metrics
}

type metrics struct {
	applied  *prometheus.CounterVec
	ignored  *prometheus.CounterVec
	errors   prometheus.Counter
	poison   prometheus.Counter
	lag      prometheus.Histogram
	register []prometheus.Collector
}

func newMetrics() metrics {
	m := metrics{
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projection_events_applied_total",
			Help: "Job events applied to the trigger's job table (run requests: manual slots fired), by event kind.",
		}, []string{"kind"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projection_events_ignored_total",
			Help: "Job events that changed nothing, by kind and reason: stale (the store holds this version or a newer one), duplicate_run (the manual slot was already fired), dropped_run (the job is deleted).",
		}, []string{"kind", "reason"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "projection_apply_errors_total",
			Help: "Job events whose apply failed and that were requeued.",
		}),
		poison: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "projection_poison_total",
			Help: "Messages that can never be applied (undecodable or invalid events), acknowledged and dropped.",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "projection_lag_seconds",
			Help:    "Time from a job change in the registry to its apply in the trigger.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
	}
	m.register = []prometheus.Collector{m.applied, m.ignored, m.errors, m.poison, m.lag}
	return m
}

// New validates opts, applies the defaults and registers the metrics. It
// does not connect: Run does.
func New(opts Options) (*Consumer, error) {
	if opts.Store == nil {
		return nil, errors.New("projection: Store is required")
	}
	if opts.AMQPURL == "" {
		return nil, errors.New("projection: AMQPURL is required")
	}
	if opts.Workers < 0 || opts.Prefetch < 0 || opts.MaxBatch < 0 || opts.Batches < 0 || opts.Linger < 0 || opts.Backoff < 0 || opts.MaxBackoff < 0 {
		return nil, errors.New("projection: Workers, Prefetch, MaxBatch, Batches, Linger, Backoff and MaxBackoff must not be negative")
	}
	opts.Exchange = cmp.Or(opts.Exchange, DefaultExchange)
	opts.Queue = cmp.Or(opts.Queue, DefaultQueue)
	opts.BindingKey = cmp.Or(opts.BindingKey, DefaultBindingKey)
	opts.Workers = cmp.Or(opts.Workers, DefaultWorkers)
	opts.MaxBatch = min(cmp.Or(opts.MaxBatch, DefaultMaxBatch), opts.Workers)
	opts.Batches = cmp.Or(opts.Batches, DefaultBatches)
	opts.Linger = cmp.Or(opts.Linger, DefaultLinger)
	opts.Backoff = cmp.Or(opts.Backoff, DefaultBackoff)
	opts.MaxBackoff = max(cmp.Or(opts.MaxBackoff, DefaultMaxBackoff), opts.Backoff)
	if opts.TracerProvider == nil {
		opts.TracerProvider = noop.NewTracerProvider()
	}
	if opts.Propagator == nil {
		opts.Propagator = propagation.TraceContext{}
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	c := &Consumer{
		opts:    opts,
		tracer:  opts.TracerProvider.Tracer(tracerName),
		logger:  cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		ready:   make(chan struct{}),
		metrics: newMetrics(),
	}
	if opts.Metrics != nil {
		for _, col := range c.metrics.register {
			if err := opts.Metrics.Register(col); err != nil {
				return nil, fmt.Errorf("projection: register metrics: %w", err)
			}
		}
	}
	return c, nil
}

// Ready is closed once every worker is subscribed (the queue and its binding
// exist, so events published from then on reach this node or another).
func (c *Consumer) Ready() <-chan struct{} { return c.ready }

// Run connects, subscribes Workers times and applies events in batches
// until ctx is done, then closes the subscriber and returns nil once every
// batch under way is applied and acknowledged (messages delivered after ctx
// ended are requeued unprocessed). While RabbitMQ is unreachable it retries
// with backoff; it returns an error only if it cannot build its subscriber
// configuration at all. Call it once.
func (c *Consumer) Run(ctx context.Context) error {
	cfg := broker.TopicSubscriberConfig(c.opts.AMQPURL, c.opts.Exchange, c.opts.Queue, c.opts.BindingKey, c.opts.Prefetch)
	cfg.Queue.Arguments["x-delivery-limit"] = deliveryLimit
	if err := cfg.ValidateSubscriber(); err != nil {
		return fmt.Errorf("projection: subscriber config: %w", err)
	}
	sub, channels := c.subscribe(ctx, cfg)
	if sub == nil {
		return nil // ctx ended before the broker could be reached
	}
	c.readyOnce.Do(func() { close(c.ready) })
	c.logger.InfoContext(ctx, "consuming job events",
		slog.String("exchange", c.opts.Exchange), slog.String("queue", c.opts.Queue), slog.Int("workers", len(channels)),
		slog.Int("max_batch", c.opts.MaxBatch), slog.Int("batches", c.opts.Batches))
	// The channels close when ctx is done (watermill-amqp stops consuming
	// and closes them); until then, what arrives after ctx ended is
	// requeued.
	broker.ConsumeBatches(ctx, channels, broker.BatchOptions{
		Loops: c.opts.Batches, MaxBatch: c.opts.MaxBatch, Linger: c.opts.Linger,
		Backoff: c.opts.Backoff, MaxBackoff: c.opts.MaxBackoff, Clock: c.opts.Clock,
	}, c.apply)
	if err := broker.CloseSubscriber(sub); err != nil {
		c.logger.Warn("closing the job event subscriber", slog.Any("error", err))
	}
	return nil
}

// subscribe connects and subscribes Workers times, retrying with backoff
// until it succeeds or ctx ends (then it returns nil).
func (c *Consumer) subscribe(ctx context.Context, cfg amqp.Config) (message.Subscriber, []<-chan *message.Message) {
	b := c.backoff()
	for {
		sub, channels, err := c.trySubscribe(ctx, cfg)
		if err == nil {
			return sub, channels
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		wait := b.next()
		c.logger.Warn("subscribing to job events failed; retrying",
			slog.String("queue", c.opts.Queue), slog.Duration("retry_in", wait), slog.Any("error", err))
		if !c.sleep(ctx, wait) {
			return nil, nil
		}
	}
}

func (c *Consumer) trySubscribe(ctx context.Context, cfg amqp.Config) (message.Subscriber, []<-chan *message.Message, error) {
	sub, err := amqp.NewSubscriber(cfg, broker.WatermillLogger(c.logger))
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	channels := make([]<-chan *message.Message, 0, c.opts.Workers)
	for range c.opts.Workers {
		ch, err := sub.Subscribe(ctx, c.opts.Queue)
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("subscribe to %s: %w", c.opts.Queue, err), sub.Close())
		}
		channels = append(channels, ch)
	}
	return sub, channels, nil
}

// inHand is a decoded message of a batch, with its consumer span.
type inHand struct {
	msg  *message.Message
	span trace.Span
	ev   *eventsv1.JobEvent
	kind string
}

// apply applies the batch msgs in one transaction and acknowledges its
// messages. If the database failed, it returns the messages it did not
// acknowledge (all but the undecodable ones), for the caller to requeue.
func (c *Consumer) apply(ctx context.Context, msgs []*message.Message) []*message.Message {
	hands := make([]inHand, 0, len(msgs))
	events := make([]store.Event, 0, len(msgs))
	for _, msg := range msgs {
		h, ok := c.take(ctx, msg)
		if !ok {
			msg.Ack()
			continue
		}
		hands = append(hands, h)
		events = append(events, store.Event{Event: h.ev, Trace: h.span.SpanContext()})
	}
	if len(hands) == 0 {
		return nil
	}
	defer func() {
		for _, h := range hands {
			h.span.End()
		}
	}()
	now := c.opts.Clock.Now()
	// A batch under way finishes even if Run's ctx ends meanwhile (it takes
	// milliseconds): stopping it halfway would only requeue the events.
	applyCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	applyCtx, span := c.batchSpan(applyCtx, hands)
	defer span.End()
	results, err := c.opts.Store.ApplyBatch(applyCtx, events, now)
	if err == nil && len(results) != len(events) {
		err = fmt.Errorf("the store returned %d results for %d events", len(results), len(events))
	}
	if err != nil {
		c.metrics.errors.Add(float64(len(hands)))
		span.RecordError(err)
		span.SetStatus(codes.Error, "apply failed")
		for _, h := range hands {
			h.span.RecordError(err)
			h.span.SetStatus(codes.Error, "apply failed")
		}
		c.logger.WarnContext(ctx, "applying a batch of job events failed; it will be redelivered",
			slog.Int("events", len(hands)), slog.String("first_message_id", hands[0].msg.UUID), slog.Any("error", err))
		requeue := make([]*message.Message, len(hands))
		for i, h := range hands {
			requeue[i] = h.msg
		}
		return requeue
	}
	for i, h := range hands {
		c.record(ctx, h, results[i], now)
	}
	for _, h := range hands {
		h.msg.Ack()
	}
	return nil
}

// take starts msg's consumer span and decodes its event; false for a
// poison message (recorded, its span ended: the caller acknowledges it).
func (c *Consumer) take(ctx context.Context, msg *message.Message) (inHand, bool) {
	ctx = broker.ExtractTrace(ctx, c.opts.Propagator, msg.Metadata)
	ctx, span := c.tracer.Start(ctx, "process "+c.opts.Exchange,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(broker.ProcessAttributes(c.opts.Exchange, c.opts.Queue, msg.UUID)...))
	ev := &eventsv1.JobEvent{}
	if err := proto.Unmarshal(msg.Payload, ev); err != nil {
		c.poison(ctx, span, msg, fmt.Errorf("decode job event: %w", err))
		span.End()
		return inHand{}, false
	}
	kind := kindLabel(ev.Kind)
	span.SetAttributes(
		attribute.String("cronmesh.job.id", ev.GetJob().GetId()),
		attribute.String("cronmesh.job_event.kind", kind),
		attribute.Int64("cronmesh.job.version", ev.Version),
	)
	return inHand{msg: msg, span: span, ev: ev, kind: kind}, true
}

// batchSpan is the span the batch's database work runs in: the message's
// own consumer span when the batch holds one message, otherwise a span
// linked to every message's.
func (c *Consumer) batchSpan(ctx context.Context, hands []inHand) (context.Context, trace.Span) {
	if len(hands) == 1 {
		// Ended by apply with the other consumer spans; this one is a
		// no-op handle to it.
		return trace.ContextWithSpan(ctx, hands[0].span), noop.Span{}
	}
	links := make([]trace.Link, len(hands))
	for i, h := range hands {
		links[i] = trace.Link{SpanContext: h.span.SpanContext()}
	}
	return c.tracer.Start(ctx, "apply job events", trace.WithLinks(links...),
		trace.WithAttributes(semconv.DBSystemNamePostgreSQL, semconv.DBOperationBatchSize(len(hands))))
}

// record counts and traces what the store did with one event. An event
// the store found invalid is a poison message: acknowledged like the rest.
func (c *Consumer) record(ctx context.Context, h inHand, res store.Result, now time.Time) {
	if res.Err != nil {
		c.poison(trace.ContextWithSpan(ctx, h.span), h.span, h.msg, res.Err)
		return
	}
	h.span.SetAttributes(attribute.String("cronmesh.projection.outcome", res.Applied.String()))
	switch res.Applied {
	case store.Upserted, store.Fired:
		c.metrics.applied.WithLabelValues(h.kind).Inc()
	case store.Stale:
		c.metrics.ignored.WithLabelValues(h.kind, "stale").Inc()
	default:
		c.metrics.ignored.WithLabelValues(h.kind, res.Applied.String()).Inc()
	}
	if occur := h.ev.GetOccurTime(); occur.IsValid() {
		c.metrics.lag.Observe(max(now.Sub(occur.AsTime()).Seconds(), 0))
	}
}

// poison records a message that can never be applied. It is acknowledged:
// redelivering it would fail the same way forever and hold up the queue.
func (c *Consumer) poison(ctx context.Context, span trace.Span, msg *message.Message, err error) {
	c.metrics.poison.Inc()
	span.RecordError(err)
	span.SetStatus(codes.Error, "poison message")
	c.logger.ErrorContext(ctx, "dropping a job event that can never be applied",
		slog.String("message_id", msg.UUID), slog.Int("bytes", len(msg.Payload)), slog.Any("error", err))
}

// sleep waits d on the clock; false if ctx ended first.
func (c *Consumer) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-c.opts.Clock.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// backoff is an exponential backoff without jitter: the waits it spaces are
// one consumer's own retries, not a herd.
type backoff struct {
	first, max, cur time.Duration
}

func (c *Consumer) backoff() *backoff {
	return &backoff{first: c.opts.Backoff, max: c.opts.MaxBackoff}
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.first
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

// kindLabel is the metric label of an event kind: "created", "updated",
// "deleted", "paused", "resumed", "run_requested" or "unknown".
func kindLabel(k eventsv1.JobEventKind) string {
	switch k {
	case eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED:
		return "created"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED:
		return "updated"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED:
		return "deleted"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED:
		return "paused"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED:
		return "resumed"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED:
		return "run_requested"
	default:
		return "unknown"
	}
}
