package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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
// within it is treated as failing, and the batch is retried.
const applyTimeout = 30 * time.Second

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
	opts     Options
	tracer   trace.Tracer
	consumer *broker.Consumer
	metrics  metrics
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
	opts.TracerProvider, opts.Propagator, opts.Clock = broker.OrDefaults(opts.TracerProvider, opts.Propagator, opts.Clock)
	c := &Consumer{
		opts:    opts,
		tracer:  opts.TracerProvider.Tracer(tracerName),
		metrics: newMetrics(),
	}
	var err error
	c.consumer, err = broker.NewConsumer(broker.ConsumerOptions{
		Name: "job events", AMQPURL: opts.AMQPURL, Exchange: opts.Exchange, Queue: opts.Queue, BindingKey: opts.BindingKey,
		QueueArguments: map[string]any{"x-delivery-limit": broker.NoDeliveryLimit},
		Handle:         c.apply, Subscriptions: opts.Workers, Prefetch: opts.Prefetch,
		MaxBatch: opts.MaxBatch, Batches: opts.Batches, Linger: opts.Linger,
		Backoff: opts.Backoff, MaxBackoff: opts.MaxBackoff, HandleTimeout: applyTimeout,
		TracerProvider: opts.TracerProvider, Propagator: opts.Propagator, Logger: opts.Logger, Clock: opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("projection: %w", err)
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
func (c *Consumer) Ready() <-chan struct{} { return c.consumer.Ready() }

// Run connects, subscribes Workers times and applies events in batches
// until ctx is done, then returns nil once every batch under way is applied
// and acknowledged (messages delivered after ctx ended are requeued
// unprocessed). While RabbitMQ is unreachable it retries with backoff; it
// returns an error only if it cannot build its subscriber configuration at
// all. Call it once.
func (c *Consumer) Run(ctx context.Context) error { return c.consumer.Run(ctx) }

// inHand is a decoded message of a batch, with its consumer span.
type inHand struct {
	msg  *message.Message
	span trace.Span
	ev   *eventsv1.JobEvent
	kind string
}

// apply applies the batch msgs in one transaction: the broker.BatchHandler
// of the consumer.
func (c *Consumer) apply(ctx context.Context, msgs []*message.Message) ([]error, error) {
	errs := make([]error, len(msgs))
	hands := make([]inHand, 0, len(msgs))
	index := make([]int, 0, len(msgs)) // hands[i] is msgs[index[i]]
	events := make([]store.Event, 0, len(msgs))
	for i, msg := range msgs {
		h, err := c.take(msg)
		if err != nil {
			c.metrics.poison.Inc()
			errs[i] = err
			continue
		}
		hands = append(hands, h)
		index = append(index, i)
		events = append(events, store.Event{Event: h.ev, Trace: h.span.SpanContext()})
	}
	if len(hands) == 0 {
		return errs, nil
	}
	now := c.opts.Clock.Now()
	ctx, span := c.batchSpan(ctx, hands)
	defer span.End()
	results, err := c.opts.Store.ApplyBatch(ctx, events, now)
	if err == nil && len(results) != len(events) {
		err = fmt.Errorf("the store returned %d results for %d events", len(results), len(events))
	}
	if err != nil {
		c.metrics.errors.Add(float64(len(hands)))
		span.RecordError(err)
		span.SetStatus(codes.Error, "apply failed")
		return nil, fmt.Errorf("apply %d job events: %w", len(hands), err)
	}
	for i, h := range hands {
		if results[i].Err != nil {
			c.metrics.poison.Inc()
			errs[index[i]] = fmt.Errorf("%w: %w", broker.ErrPoison, results[i].Err)
			continue
		}
		c.record(h, results[i], now)
	}
	return errs, nil
}

// take decodes msg's event and labels its consumer span; an error wraps
// broker.ErrPoison.
func (c *Consumer) take(msg *message.Message) (inHand, error) {
	span := trace.SpanFromContext(msg.Context())
	ev := &eventsv1.JobEvent{}
	if err := proto.Unmarshal(msg.Payload, ev); err != nil {
		return inHand{}, fmt.Errorf("%w: decode job event: %w", broker.ErrPoison, err)
	}
	kind := broker.JobEventName(ev.Kind)
	span.SetAttributes(
		attribute.String("cronmesh.job.id", ev.GetJob().GetId()),
		attribute.String("cronmesh.job_event.kind", kind),
		attribute.Int64("cronmesh.job.version", ev.Version),
	)
	return inHand{msg: msg, span: span, ev: ev, kind: kind}, nil
}

// batchSpan is the span the batch's database work runs in: the message's
// own consumer span when the batch holds one message, otherwise a span
// linked to every message's.
func (c *Consumer) batchSpan(ctx context.Context, hands []inHand) (context.Context, trace.Span) {
	if len(hands) == 1 {
		// The consumer ends the message's span; this is a no-op handle to it.
		return trace.ContextWithSpan(ctx, hands[0].span), noop.Span{}
	}
	links := make([]trace.Link, len(hands))
	for i, h := range hands {
		links[i] = trace.Link{SpanContext: h.span.SpanContext()}
	}
	return c.tracer.Start(ctx, "apply job events", trace.WithLinks(links...),
		trace.WithAttributes(semconv.DBSystemNamePostgreSQL, semconv.DBOperationBatchSize(len(hands))))
}

// record counts and traces what the store did with one event.
func (c *Consumer) record(h inHand, res store.Result, now time.Time) {
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
