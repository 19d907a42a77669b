// Package consume reads one durable queue bound to a topic exchange and
// hands each message to a handler, acknowledging it only after the handler
// succeeded (so the handler's database commit comes first) and requeueing
// it with backoff otherwise. It is the trigger's job-event projection loop
// (services/trigger/internal/projection) made generic: alerting consumes
// two exchanges the same way.
//
// With a BatchHandler instead of a Handler, the messages of every
// subscription are gathered into batches of up to MaxBatch (those at hand,
// then those arriving within Linger) and handed over together, so that one
// transaction applies them; each message is acknowledged only after its
// batch was handled, and a batch that failed is requeued whole after a
// backoff.
package consume

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
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
)

// Defaults of Options.
const (
	DefaultWorkers    = 2
	DefaultBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	// DefaultMaxBatch and DefaultBatches apply with a BatchHandler: batches
	// of up to DefaultMaxBatch messages, DefaultBatches of them handled
	// concurrently (one gathers while another commits). A batch waits at
	// most DefaultLinger for more messages.
	DefaultMaxBatch = 128
	DefaultBatches  = 2
	DefaultLinger   = 10 * time.Millisecond
)

// deliveryLimit is the quorum queue's x-delivery-limit: in effect none (see
// the trigger's projection: RabbitMQ 4 would otherwise drop a message
// requeued 20 times through a database outage).
const deliveryLimit = int64(1) << 30

// handleTimeout bounds one handler call.
const handleTimeout = 30 * time.Second

// ErrPoison wraps handler errors that no retry can fix: the message is
// acknowledged and dropped (and logged).
var ErrPoison = errors.New("poison message")

// Handler processes one message.
type Handler func(ctx context.Context, msg *message.Message) error

// BatchHandler processes a batch of messages, typically in one
// transaction. It returns one error per message, in order: nil, or an error
// wrapping ErrPoison for a message that can never be processed (logged and
// acknowledged with the rest), or any other error to requeue that message
// alone. An error return (then the slice is ignored) requeues the whole
// batch.
type BatchHandler func(ctx context.Context, msgs []*message.Message) ([]error, error)

// Options for New.
type Options struct {
	// Name labels logs and spans ("executions", "jobs").
	Name string
	// Handler or BatchHandler (exactly one) is required.
	Handler      Handler
	BatchHandler BatchHandler
	// AMQPURL, Exchange, Queue and BindingKey are required.
	AMQPURL, Exchange, Queue, BindingKey string
	// Prefetch per worker. Default broker.DefaultPrefetch.
	Prefetch int
	// Workers is how many subscriptions are held, each on its own AMQP
	// channel, each with one message in hand at a time (watermill-amqp
	// delivers a subscription's next message once the last one is
	// acknowledged). With a Handler it is how many messages are handled
	// concurrently; with a BatchHandler, the batches are filled from the
	// messages in hand, so it should be at least MaxBatch. Default
	// DefaultWorkers.
	Workers int
	// MaxBatch, Batches and Linger apply with a BatchHandler: the most
	// messages in a batch (at most Workers), how many batches are handled
	// concurrently, and how long a batch that holds every message at hand
	// waits for more. Defaults DefaultMaxBatch, DefaultBatches and
	// DefaultLinger.
	MaxBatch, Batches int
	Linger            time.Duration
	TracerProvider    trace.TracerProvider
	Propagator        propagation.TextMapPropagator
	Logger            *slog.Logger
	Clock             clock.Clock
	// Backoff and MaxBackoff space retries of a failing message.
	Backoff, MaxBackoff time.Duration
}

// Consumer consumes one queue. Create with New; Start and Stop.
type Consumer struct {
	opts      Options
	tracer    trace.Tracer
	logger    *slog.Logger
	ready     chan struct{}
	readyOnce sync.Once

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New validates opts and applies the defaults. It does not connect.
func New(opts Options) (*Consumer, error) {
	if (opts.Handler == nil) == (opts.BatchHandler == nil) {
		return nil, errors.New("consume: exactly one of Handler and BatchHandler is required")
	}
	if opts.AMQPURL == "" || opts.Exchange == "" || opts.Queue == "" || opts.BindingKey == "" {
		return nil, errors.New("consume: AMQPURL, Exchange, Queue and BindingKey are required")
	}
	if opts.Workers < 0 || opts.Prefetch < 0 || opts.MaxBatch < 0 || opts.Batches < 0 || opts.Linger < 0 {
		return nil, errors.New("consume: Workers, Prefetch, MaxBatch, Batches and Linger must not be negative")
	}
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
	return &Consumer{
		opts:   opts,
		tracer: opts.TracerProvider.Tracer("github.com/cronmesh/cronmesh/services/alerting/internal/consume"),
		logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With(slog.String("consumer", opts.Name)),
		ready:  make(chan struct{}),
	}, nil
}

// Ready is closed once every worker is subscribed.
func (c *Consumer) Ready() <-chan struct{} { return c.ready }

// Start consumes in the background until Stop. Starting twice is a no-op.
func (c *Consumer) Start(ctx context.Context) error {
	cfg := broker.TopicSubscriberConfig(c.opts.AMQPURL, c.opts.Exchange, c.opts.Queue, c.opts.BindingKey, c.opts.Prefetch)
	cfg.Queue.Arguments["x-delivery-limit"] = deliveryLimit
	if err := cfg.ValidateSubscriber(); err != nil {
		return fmt.Errorf("consume %s: subscriber config: %w", c.opts.Name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return nil
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		c.run(ctx, cfg)
	}()
	return nil
}

// Stop stops consuming and waits for the messages under way. Safe twice or
// before Start.
func (c *Consumer) Stop() {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (c *Consumer) run(ctx context.Context, cfg amqp.Config) {
	var sub message.Subscriber
	var channels []<-chan *message.Message
	wait := time.Duration(0)
	for {
		var err error
		sub, channels, err = c.trySubscribe(ctx, cfg)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		wait = min(max(2*wait, c.opts.Backoff), c.opts.MaxBackoff)
		c.logger.Warn("subscribing failed; retrying", slog.String("queue", c.opts.Queue), slog.Duration("retry_in", wait), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return
		case <-c.opts.Clock.After(wait):
		}
	}
	c.readyOnce.Do(func() { close(c.ready) })
	c.logger.Info("consuming", slog.String("exchange", c.opts.Exchange), slog.String("queue", c.opts.Queue), slog.Int("workers", len(channels)))
	if c.opts.BatchHandler != nil {
		c.consumeBatches(ctx, channels)
	} else {
		var wg sync.WaitGroup
		for _, ch := range channels {
			wg.Go(func() { c.consume(ctx, ch) })
		}
		wg.Wait()
	}
	if err := broker.CloseSubscriber(sub); err != nil {
		c.logger.Warn("closing the subscriber", slog.Any("error", err))
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

func (c *Consumer) consume(ctx context.Context, ch <-chan *message.Message) {
	wait := time.Duration(0)
	for {
		msg, ok := broker.Next(ctx, ch)
		if !ok {
			return
		}
		if c.handle(ctx, msg) {
			wait = 0
			msg.Ack()
			continue
		}
		// Hold the message while waiting, so this worker pauses instead of
		// spinning on redeliveries while the database is unwell.
		wait = min(max(2*wait, c.opts.Backoff), c.opts.MaxBackoff)
		select {
		case <-ctx.Done():
		case <-c.opts.Clock.After(wait):
		}
		msg.Nack()
	}
}

// handle runs the handler and says whether to acknowledge.
func (c *Consumer) handle(ctx context.Context, msg *message.Message) bool {
	ctx, span := c.startSpan(ctx, msg)
	defer span.End()
	// A handler under way finishes even if ctx ends: stopping it halfway
	// would only requeue the message.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handleTimeout)
	defer cancel()
	err := c.opts.Handler(hctx, msg)
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrPoison):
		span.RecordError(err)
		span.SetStatus(codes.Error, "poison message")
		c.logger.ErrorContext(ctx, "dropping a message that can never be processed",
			slog.String("message_id", msg.UUID), slog.Int("bytes", len(msg.Payload)), slog.Any("error", err))
		return true
	default:
		span.RecordError(err)
		span.SetStatus(codes.Error, "processing failed")
		c.logger.WarnContext(ctx, "processing a message failed; it will be redelivered",
			slog.String("message_id", msg.UUID), slog.Any("error", err))
		return false
	}
}
