// Package ingest consumes the lifecycle events of the `cronmesh.executions`
// exchange from the history's own durable queue (through libs/broker's
// consumer) and writes them to the store in batches: the messages in hand
// across all subscriptions are decoded, merged into one transaction, and
// acknowledged only after it commits.
package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/history/internal/store"
)

// Defaults of Options.
const (
	DefaultExchange = "cronmesh.executions"
	DefaultQueue    = "cronmesh.history"
	// DefaultWorkers subscriptions each hold one message (about 100 events
	// from the dispatcher) at a time, so a batch holds up to ~1,600
	// events: large enough to amortise a transaction, small enough to
	// commit in tens of milliseconds.
	DefaultWorkers = 16
	// DefaultPrefetch hides the broker round trip behind each ack.
	DefaultPrefetch = 4
	// DefaultLinger is the longest a message waits for its batch to fill
	// while fewer than Workers messages are in hand.
	DefaultLinger     = 20 * time.Millisecond
	DefaultBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
	// BindingKey receives every kind: "execution.<kind>".
	BindingKey = "execution.#"
	tracerName = "github.com/cronmesh/cronmesh/services/history/internal/ingest"
)

// Writer stores a batch of events; *store.Store is one.
type Writer interface {
	Ingest(ctx context.Context, events []store.Event, now time.Time) (store.IngestResult, error)
}

// Options for New.
type Options struct {
	// AMQPURL is the broker. Required.
	AMQPURL string
	// Store receives the events. Required.
	Store Writer
	// Exchange and Queue: the queue is declared (durable, quorum) and bound
	// to the exchange with BindingKey. Defaults DefaultExchange and
	// DefaultQueue.
	Exchange, Queue string
	// Workers is the number of subscriptions, so the most messages in one
	// batch. Default DefaultWorkers.
	Workers int
	// Prefetch of each subscription. Default DefaultPrefetch.
	Prefetch int
	// Linger is how long a batch that holds every message at hand waits
	// for more. Default DefaultLinger.
	Linger time.Duration
	// Backoff and MaxBackoff space the retries while the database fails.
	Backoff, MaxBackoff time.Duration
	// Clock tells the time (the retention cutoff, ingest lag) and paces the
	// linger and the backoffs. Default clock.Real.
	Clock clock.Clock
	// TracerProvider makes the consume and write spans. Default: none.
	TracerProvider trace.TracerProvider
	// Propagator reads each message's trace context. Default
	// propagation.TraceContext.
	Propagator propagation.TextMapPropagator
	// Metrics, if non-nil, registers the ingest metrics.
	Metrics prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
}

// Consumer moves lifecycle events from the broker into the store.
type Consumer struct {
	opts     Options
	tracer   trace.Tracer
	logger   *slog.Logger
	consumer *broker.Consumer

	events, expired, poison, errs prometheus.Counter
	batchEvents, lag              prometheus.Histogram
}

// New validates opts and fills the defaults. It does not connect: Run does.
func New(opts Options) (*Consumer, error) {
	switch {
	case opts.AMQPURL == "":
		return nil, errors.New("ingest: AMQPURL is required")
	case opts.Store == nil:
		return nil, errors.New("ingest: Store is required")
	case opts.Workers < 0 || opts.Prefetch < 0 || opts.Linger < 0 || opts.Backoff < 0 || opts.MaxBackoff < 0:
		return nil, errors.New("ingest: counts and durations must not be negative")
	}
	opts.Exchange = cmp.Or(opts.Exchange, DefaultExchange)
	opts.Queue = cmp.Or(opts.Queue, DefaultQueue)
	opts.Workers = cmp.Or(opts.Workers, DefaultWorkers)
	opts.Prefetch = cmp.Or(opts.Prefetch, DefaultPrefetch)
	opts.Linger = cmp.Or(opts.Linger, DefaultLinger)
	opts.Backoff = cmp.Or(opts.Backoff, DefaultBackoff)
	opts.MaxBackoff = max(cmp.Or(opts.MaxBackoff, DefaultMaxBackoff), opts.Backoff)
	opts.TracerProvider, opts.Propagator, opts.Clock = broker.OrDefaults(opts.TracerProvider, opts.Propagator, opts.Clock)
	c := &Consumer{
		opts:   opts,
		tracer: opts.TracerProvider.Tracer(tracerName),
		logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "history_events_ingested_total", Help: "Lifecycle events committed to the history (duplicates included: they merge to no change).",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "history_events_expired_total", Help: "Lifecycle events ignored because their slot is older than the retention.",
		}),
		poison: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "history_poison_total", Help: "Messages or events that are not valid lifecycle events, acknowledged and dropped.",
		}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "history_ingest_errors_total", Help: "Batch writes that failed (their messages were requeued).",
		}),
		batchEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "history_ingest_batch_events", Help: "Events per committed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "history_ingest_lag_seconds", Help: "From an event's occur time to the commit that recorded it.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
	}
	if opts.Metrics != nil {
		for _, m := range []prometheus.Collector{c.events, c.expired, c.poison, c.errs, c.batchEvents, c.lag} {
			if err := opts.Metrics.Register(m); err != nil {
				return nil, fmt.Errorf("ingest: register metrics: %w", err)
			}
		}
	}
	var err error
	c.consumer, err = broker.NewConsumer(broker.ConsumerOptions{
		Name: "history ingest", AMQPURL: opts.AMQPURL, Exchange: opts.Exchange, Queue: opts.Queue, BindingKey: BindingKey,
		Handle: c.write, Subscriptions: opts.Workers, Prefetch: opts.Prefetch, MaxBatch: opts.Workers,
		// One batch at a time: two concurrent transactions merging events
		// of the same executions would lock their rows in different orders.
		Batches: 1, Linger: opts.Linger, Backoff: opts.Backoff, MaxBackoff: opts.MaxBackoff,
		TracerProvider: opts.TracerProvider, Propagator: opts.Propagator, Logger: opts.Logger, Clock: opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	return c, nil
}

// Ready is closed once every subscription is in place.
func (c *Consumer) Ready() <-chan struct{} { return c.consumer.Ready() }

// Run subscribes and ingests until ctx is done; then the batch in hand is
// written (not cut short) and Run returns nil. While the broker is
// unreachable it retries with backoff. Call it once.
func (c *Consumer) Run(ctx context.Context) error { return c.consumer.Run(ctx) }

// inHand is one message of a batch, decoded.
type inHand struct {
	span   trace.Span
	events []store.Event
	// traced are the events that carry their execution's trace context.
	traced []tracedEvent
}

// take decodes msg; a message that is not a batch of events is poison (no
// retry could store it), and an invalid event within a valid batch is
// dropped alone.
func (c *Consumer) take(msg *message.Message) (inHand, error) {
	span := trace.SpanFromContext(msg.Context())
	var batch eventsv1.ExecutionEventBatch
	if err := proto.Unmarshal(msg.Payload, &batch); err != nil {
		c.poison.Inc()
		return inHand{}, fmt.Errorf("%w: not an ExecutionEventBatch: %w", broker.ErrPoison, err)
	}
	h := inHand{span: span, events: make([]store.Event, 0, len(batch.GetEvents()))}
	for _, pb := range batch.GetEvents() {
		e := FromProto(pb)
		if err := e.Validate(); err != nil {
			c.poison.Inc()
			c.logger.Error("dropping an invalid lifecycle event", slog.String("message_id", msg.UUID), slog.String("event_id", pb.GetEventId()), slog.Any("error", err))
			continue
		}
		h.events = append(h.events, e)
		if t, ok := c.tracedEvent(msg.Context(), pb); ok {
			h.traced = append(h.traced, t)
		}
	}
	span.SetAttributes(attribute.Int("messaging.batch.message_count", len(h.events)))
	return h, nil
}

// write commits the events of msgs in one transaction: the
// broker.BatchHandler of the consumer, which retries the batch with
// backoff while the store fails.
func (c *Consumer) write(ctx context.Context, msgs []*message.Message) ([]error, error) {
	errs := make([]error, len(msgs))
	batch := make([]inHand, 0, len(msgs))
	n := 0
	for i, msg := range msgs {
		h, err := c.take(msg)
		if err != nil {
			errs[i] = err
			continue
		}
		batch = append(batch, h)
		n += len(h.events)
	}
	if n == 0 {
		return errs, nil
	}
	links := make([]trace.Link, len(batch))
	events := make([]store.Event, 0, n)
	for i, h := range batch {
		links[i] = trace.Link{SpanContext: h.span.SpanContext()}
		events = append(events, h.events...)
	}
	start := time.Now()
	ctx, span := c.tracer.Start(ctx, "history.write_batch", trace.WithLinks(links...),
		trace.WithAttributes(
			semconv.DBSystemNamePostgreSQL,
			semconv.DBOperationBatchSize(len(events)),
			attribute.Int("cronmesh.history.events", len(events)),
			attribute.Int("cronmesh.history.messages", len(batch))))
	defer span.End()
	res, err := c.opts.Store.Ingest(ctx, events, c.opts.Clock.Now())
	c.eventSpans(batch, span, start, err)
	if err != nil {
		c.errs.Inc()
		span.RecordError(err)
		span.SetStatus(codes.Error, "write failed; retried")
		return nil, fmt.Errorf("write %d lifecycle events: %w", len(events), err)
	}
	now := c.opts.Clock.Now()
	c.events.Add(float64(res.Written))
	c.expired.Add(float64(res.Expired))
	c.batchEvents.Observe(float64(len(events)))
	for i := range events {
		if !events[i].OccurTime.IsZero() {
			c.lag.Observe(now.Sub(events[i].OccurTime).Seconds())
		}
	}
	return errs, nil
}

// FromProto is the store form of a lifecycle event.
func FromProto(pb *eventsv1.ExecutionEvent) store.Event {
	e := store.Event{
		Kind:            store.Kind(pb.GetKind()),
		ExecutionID:     pb.GetExecutionId(),
		JobID:           pb.GetJobId(),
		Namespace:       pb.GetNamespace(),
		JobDisplayName:  pb.GetJobDisplayName(),
		Attempt:         pb.GetAttempt(),
		TriggerKind:     int16(pb.GetTriggerKind()),
		ResponseStatus:  pb.GetResponseStatus(),
		ResponseExcerpt: noNUL(pb.GetResponseExcerpt()),
		Reason:          noNUL(pb.GetReason()),
		TraceID:         pb.GetTraceId(),
		RetryScheduled:  pb.GetRetryScheduled(),
		RerunOf:         noNUL(pb.GetRerunOfExecutionId()),
	}
	for _, f := range pb.GetOverriddenFields() {
		// Field names are identifiers; one that is not (a comma would
		// split it in the store) is not recorded.
		if f != "" && !strings.ContainsAny(f, ",\x00") {
			e.Overridden = append(e.Overridden, f)
		}
	}
	if t := pb.GetNominalTime(); t.IsValid() {
		e.NominalTime = t.AsTime()
	}
	if t := pb.GetOccurTime(); t.IsValid() {
		e.OccurTime = t.AsTime()
	}
	if t := pb.GetFireTime(); t.IsValid() {
		e.FireTime = t.AsTime()
	}
	if t := pb.GetStartTime(); t.IsValid() {
		e.StartTime = t.AsTime()
	} else if e.Kind == store.KindStarted {
		// A publisher that does not set start_time yet: a STARTED event
		// happens when its attempt starts.
		e.StartTime = e.OccurTime
	}
	if d := pb.GetDuration(); d.IsValid() {
		v := d.AsDuration()
		e.Duration = &v
	}
	if d := pb.GetRetryDelay(); d.IsValid() {
		v := d.AsDuration()
		e.RetryDelay = &v
	}
	return e
}

// noNUL drops NUL characters, valid UTF-8 but refused by PostgreSQL text.
func noNUL(s string) string {
	if !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "")
}
