// Package ingest consumes the lifecycle events of the `cronmesh.executions`
// exchange from the history's own durable queue and writes them to the
// store in batches: the messages in hand across all subscriptions are
// decoded, merged into one transaction, and acknowledged only after it
// commits.
package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	// DefaultMaxEvents flushes a batch early once it holds this many
	// events.
	DefaultMaxEvents = 5000
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
	// MaxEvents and Linger bound a batch. Defaults DefaultMaxEvents and
	// DefaultLinger.
	MaxEvents int
	Linger    time.Duration
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
	opts      Options
	tracer    trace.Tracer
	logger    *slog.Logger
	ready     chan struct{}
	readyOnce sync.Once

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
	case opts.Workers < 0 || opts.Prefetch < 0 || opts.MaxEvents < 0 || opts.Linger < 0 || opts.Backoff < 0 || opts.MaxBackoff < 0:
		return nil, errors.New("ingest: counts and durations must not be negative")
	}
	opts.Exchange = cmp.Or(opts.Exchange, DefaultExchange)
	opts.Queue = cmp.Or(opts.Queue, DefaultQueue)
	opts.Workers = cmp.Or(opts.Workers, DefaultWorkers)
	opts.Prefetch = cmp.Or(opts.Prefetch, DefaultPrefetch)
	opts.MaxEvents = cmp.Or(opts.MaxEvents, DefaultMaxEvents)
	opts.Linger = cmp.Or(opts.Linger, DefaultLinger)
	opts.Backoff = cmp.Or(opts.Backoff, DefaultBackoff)
	opts.MaxBackoff = max(cmp.Or(opts.MaxBackoff, DefaultMaxBackoff), opts.Backoff)
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = noop.NewTracerProvider()
	}
	if opts.Propagator == nil {
		opts.Propagator = propagation.TraceContext{}
	}
	c := &Consumer{
		opts:   opts,
		tracer: opts.TracerProvider.Tracer(tracerName),
		logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		ready:  make(chan struct{}),
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
	return c, nil
}

// Ready is closed once every subscription is in place.
func (c *Consumer) Ready() <-chan struct{} { return c.ready }

// inHand is one message taken from a subscription, decoded.
type inHand struct {
	msg    *message.Message
	span   trace.Span
	events []store.Event
	// traced are the events that carry their execution's trace context.
	traced []tracedEvent
}

// Run declares the queue, subscribes and ingests until ctx is done; then the
// batch in hand is written (not cut short) and Run returns nil. While the
// broker is unreachable it retries with backoff. Call it once.
func (c *Consumer) Run(ctx context.Context) error {
	err := broker.DeclareQueues(ctx, c.opts.AMQPURL, broker.QueueBinding{Exchange: c.opts.Exchange, Queue: c.opts.Queue, BindingKey: BindingKey})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("ingest: declare queue: %w", err)
	}
	cfg := broker.TopicSubscriberConfig(c.opts.AMQPURL, c.opts.Exchange, c.opts.Queue, BindingKey, c.opts.Prefetch)
	sub, chans := c.subscribe(ctx, cfg)
	if sub == nil {
		return nil
	}
	c.readyOnce.Do(func() { close(c.ready) })

	// Fan in: each subscription hands over its next message only after the
	// previous is acked, so at most Workers messages are in hand.
	in, fannedIn := broker.FanIn(ctx, chans)
	c.loop(ctx, in)
	if err := broker.CloseSubscriber(sub); err != nil {
		c.logger.Warn("closing the subscriber", slog.Any("error", err))
	}
	fannedIn()
	return nil
}

func (c *Consumer) subscribe(ctx context.Context, cfg amqp.Config) (message.Subscriber, []<-chan *message.Message) {
	wait := c.opts.Backoff
	for {
		sub, chans, err := c.trySubscribe(ctx, cfg)
		if err == nil {
			return sub, chans
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		c.logger.Warn("subscribing failed; retrying", slog.Duration("retry_in", wait), slog.Any("error", err))
		select {
		case <-c.opts.Clock.After(wait):
		case <-ctx.Done():
			return nil, nil
		}
		wait = min(2*wait, c.opts.MaxBackoff)
	}
}

func (c *Consumer) trySubscribe(ctx context.Context, cfg amqp.Config) (message.Subscriber, []<-chan *message.Message, error) {
	sub, err := amqp.NewSubscriber(cfg, broker.WatermillLogger(c.logger))
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	chans := make([]<-chan *message.Message, 0, c.opts.Workers)
	for range c.opts.Workers {
		ch, err := sub.Subscribe(ctx, c.opts.Queue)
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("subscribe to %s: %w", c.opts.Queue, err), sub.Close())
		}
		chans = append(chans, ch)
	}
	return sub, chans, nil
}

// loop collects messages into batches and writes them until ctx is done.
func (c *Consumer) loop(ctx context.Context, in <-chan *message.Message) {
	var (
		batch  []inHand
		events int
		timer  <-chan time.Time
	)
	flush := func() {
		if len(batch) > 0 {
			c.write(ctx, batch, events)
		}
		batch, events, timer = nil, 0, nil
	}
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case msg := <-in:
			h, ok := c.take(ctx, msg)
			if !ok {
				continue // poison, acked
			}
			batch = append(batch, h)
			events += len(h.events)
			if events >= c.opts.MaxEvents || len(batch) >= c.opts.Workers {
				flush()
			} else if timer == nil {
				timer = c.opts.Clock.After(c.opts.Linger)
			}
		case <-timer:
			flush()
		}
	}
}

// take starts msg's consumer span and decodes it; a message that is not a
// batch of events is logged, counted and acknowledged (no retry could store
// it), and so is an invalid event within a valid batch (dropped alone).
func (c *Consumer) take(ctx context.Context, msg *message.Message) (inHand, bool) {
	mctx := broker.ExtractTrace(ctx, c.opts.Propagator, msg.Metadata)
	_, span := c.tracer.Start(mctx, "process "+c.opts.Queue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(broker.ProcessAttributes(c.opts.Exchange, c.opts.Queue, msg.UUID)...))
	var batch eventsv1.ExecutionEventBatch
	if err := proto.Unmarshal(msg.Payload, &batch); err != nil {
		c.poison.Inc()
		span.RecordError(err)
		span.SetStatus(codes.Error, "poison message")
		span.End()
		c.logger.Error("dropping a message that is not an ExecutionEventBatch", slog.String("message_id", msg.UUID), slog.Any("error", err))
		msg.Ack()
		return inHand{}, false
	}
	h := inHand{msg: msg, span: span, events: make([]store.Event, 0, len(batch.GetEvents()))}
	for _, pb := range batch.GetEvents() {
		e := FromProto(pb)
		if err := e.Validate(); err != nil {
			c.poison.Inc()
			c.logger.Error("dropping an invalid lifecycle event", slog.String("message_id", msg.UUID), slog.String("event_id", pb.GetEventId()), slog.Any("error", err))
			continue
		}
		h.events = append(h.events, e)
		if t, ok := c.tracedEvent(ctx, pb); ok {
			h.traced = append(h.traced, t)
		}
	}
	span.SetAttributes(attribute.Int("messaging.batch.message_count", len(h.events)))
	return h, true
}

// write commits the batch, retrying with backoff while the store fails,
// then acknowledges its messages. A failure does not nack: redelivery would
// bring the same messages back into the same batch, so the retry happens
// here, and a shutdown during it nacks them for another consumer.
func (c *Consumer) write(ctx context.Context, batch []inHand, n int) {
	links := make([]trace.Link, len(batch))
	events := make([]store.Event, 0, n)
	for i, h := range batch {
		links[i] = trace.Link{SpanContext: h.span.SpanContext()}
		events = append(events, h.events...)
	}
	wctx := context.WithoutCancel(ctx)
	if len(batch) == 1 {
		wctx = trace.ContextWithSpan(wctx, batch[0].span) // one message: the write continues its trace
	}
	start := time.Now()
	wctx, span := c.tracer.Start(wctx, "history.write_batch", trace.WithLinks(links...),
		trace.WithAttributes(
			semconv.DBSystemNamePostgreSQL,
			semconv.DBOperationBatchSize(len(events)),
			attribute.Int("cronmesh.history.events", len(events)),
			attribute.Int("cronmesh.history.messages", len(batch))))
	defer span.End()
	wait := c.opts.Backoff
	for {
		res, err := c.opts.Store.Ingest(wctx, events, c.opts.Clock.Now())
		if err == nil {
			now := c.opts.Clock.Now()
			c.events.Add(float64(res.Written))
			c.expired.Add(float64(res.Expired))
			c.batchEvents.Observe(float64(len(events)))
			for i := range events {
				if !events[i].OccurTime.IsZero() {
					c.lag.Observe(now.Sub(events[i].OccurTime).Seconds())
				}
			}
			c.eventSpans(batch, span, start, nil)
			for _, h := range batch {
				h.msg.Ack()
				h.span.End()
			}
			return
		}
		c.errs.Inc()
		span.RecordError(err)
		c.logger.Warn("writing a batch of lifecycle events failed; retrying", slog.Int("events", len(events)), slog.Duration("retry_in", wait), slog.Any("error", err))
		select {
		case <-c.opts.Clock.After(wait):
		case <-ctx.Done():
			span.SetStatus(codes.Error, "write failed; messages requeued at shutdown")
			c.eventSpans(batch, span, start, err)
			for _, h := range batch {
				h.msg.Nack()
				h.span.End()
			}
			return
		}
		wait = min(2*wait, c.opts.MaxBackoff)
	}
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
