package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronmesh/cronmesh/libs/clock"
)

// Defaults of ConsumerOptions.
const (
	DefaultSubscriptions = 2
	DefaultBatches       = 2
	DefaultLinger        = 10 * time.Millisecond
	DefaultBackoff       = 100 * time.Millisecond
	DefaultMaxBackoff    = 5 * time.Second
	DefaultHandleTimeout = 30 * time.Second
)

// NoDeliveryLimit is the x-delivery-limit of the mesh's consumer queues
// that set one: in effect none. RabbitMQ 4 gives quorum queues a default
// limit of 20 and drops a message requeued that often, which a database
// outage of a minute would do to every outcome in flight.
const NoDeliveryLimit = int64(1) << 30

// ErrPoison wraps a handler's error for a message that no retry can fix
// (it does not decode, it is not valid): the message is acknowledged and
// dropped, and the error logged and recorded on its span.
var ErrPoison = errors.New("poison message")

// BatchHandler handles a batch of messages, typically in one transaction.
// Each message's Context carries its consumer span (a child of the
// publisher's trace). It returns one error per message, in order, or a nil
// slice when all succeeded: nil acknowledges the message, an error wrapping
// ErrPoison drops it, and any other error retries that message after a
// backoff. An error return (the slice is then ignored) retries the whole
// batch. A batch of one message is handled in the context of that
// message's span.
//
// A retried message is held, not requeued, so the retry is of the same
// messages, paced by the backoff; a shutdown during the backoff requeues
// them for whichever consumer runs next. The handler therefore sees a
// message again only after a failure it reported, or after a crash (a
// redelivery): it must be idempotent.
type BatchHandler func(ctx context.Context, msgs []*message.Message) ([]error, error)

// ConsumerOptions configure NewConsumer.
type ConsumerOptions struct {
	// Name labels logs ("history ingest", "job events").
	Name string
	// AMQPURL, Exchange, Queue and BindingKey are required: Queue, a
	// durable quorum queue, is declared and bound to the topic exchange
	// Exchange with BindingKey on every subscription.
	AMQPURL, Exchange, Queue, BindingKey string
	// FormerBindingKeys are keys an earlier version bound Queue to Exchange
	// with: a binding outlives the consumer that declared it, so each is
	// removed on every subscription, after BindingKey is in place (a queue
	// bound to more than it needs takes every message the key matches).
	FormerBindingKeys []string
	// QueueArguments are extra arguments of Queue (x-queue-type is always
	// quorum). A queue is always declared with the same arguments, or
	// RabbitMQ refuses the declaration: change them only with a new queue.
	QueueArguments map[string]any
	// Handle is required.
	Handle BatchHandler
	// Subscriptions is how many subscriptions are held, each on its own
	// AMQP channel. watermill-amqp hands a subscription its next message
	// only after the last one is acknowledged, so this is the most
	// messages in hand, and the batches are filled from them. Default
	// DefaultSubscriptions.
	Subscriptions int
	// Prefetch of each subscription. Default DefaultPrefetch.
	Prefetch int
	// MaxBatch is the most messages in a batch, at most Subscriptions.
	// Default Subscriptions.
	MaxBatch int
	// Batches is how many batches are handled concurrently (one gathers
	// while another commits). Default DefaultBatches.
	Batches int
	// Linger is how long a batch that holds every message at hand, and
	// fewer than MaxBatch, waits for more. Default DefaultLinger.
	Linger time.Duration
	// Backoff is the first wait before a failed message is retried, and
	// before subscribing again after a failed connect; it doubles up to
	// MaxBackoff and resets after a success. Defaults DefaultBackoff and
	// DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration
	// HandleTimeout bounds one Handle call. Default DefaultHandleTimeout.
	HandleTimeout time.Duration
	// TracerProvider makes each message's consumer span, "process Queue".
	// Default: no tracing.
	TracerProvider trace.TracerProvider
	// Propagator reads the publisher's trace context from the message
	// metadata. Default propagation.TraceContext.
	Propagator propagation.TextMapPropagator
	// Logger receives poison messages, handler failures and connection
	// trouble. Nil discards.
	Logger *slog.Logger
	// Clock paces the linger and the backoffs. Default clock.Real.
	Clock clock.Clock
}

// Consumer is the one way the mesh consumes a queue: it subscribes (again
// and again, with backoff, while the broker is unreachable), gathers the
// messages in hand into batches, hands them to a BatchHandler and
// acknowledges each message only after the handler succeeded with it, so
// the handler's commit always comes first. Create with NewConsumer; Run
// until the context ends.
type Consumer struct {
	opts      ConsumerOptions
	tracer    trace.Tracer
	logger    *slog.Logger
	ready     chan struct{}
	readyOnce sync.Once
}

// NewConsumer validates opts and fills the defaults. It does not connect.
func NewConsumer(opts ConsumerOptions) (*Consumer, error) {
	switch {
	case opts.Handle == nil:
		return nil, errors.New("consumer: Handle is required")
	case opts.AMQPURL == "" || opts.Exchange == "" || opts.Queue == "" || opts.BindingKey == "":
		return nil, errors.New("consumer: AMQPURL, Exchange, Queue and BindingKey are required")
	case opts.Subscriptions < 0 || opts.Prefetch < 0 || opts.MaxBatch < 0 || opts.Batches < 0 ||
		opts.Linger < 0 || opts.Backoff < 0 || opts.MaxBackoff < 0 || opts.HandleTimeout < 0:
		return nil, errors.New("consumer: counts and durations must not be negative")
	}
	opts.Name = cmp.Or(opts.Name, opts.Queue)
	opts.Subscriptions = cmp.Or(opts.Subscriptions, DefaultSubscriptions)
	opts.MaxBatch = min(cmp.Or(opts.MaxBatch, opts.Subscriptions), opts.Subscriptions)
	opts.Batches = cmp.Or(opts.Batches, DefaultBatches)
	opts.Linger = cmp.Or(opts.Linger, DefaultLinger)
	opts.Backoff = cmp.Or(opts.Backoff, DefaultBackoff)
	opts.MaxBackoff = max(cmp.Or(opts.MaxBackoff, DefaultMaxBackoff), opts.Backoff)
	opts.HandleTimeout = cmp.Or(opts.HandleTimeout, DefaultHandleTimeout)
	opts.TracerProvider, opts.Propagator, opts.Clock = OrDefaults(opts.TracerProvider, opts.Propagator, opts.Clock)
	return &Consumer{
		opts:   opts,
		tracer: opts.TracerProvider.Tracer("github.com/cronmesh/cronmesh/libs/broker"),
		logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With(slog.String("consumer", opts.Name)),
		ready:  make(chan struct{}),
	}, nil
}

// Ready is closed once every subscription is in place.
func (c *Consumer) Ready() <-chan struct{} { return c.ready }

// Run subscribes and consumes until ctx is done; then the batches under
// way are finished (not cut short: Handle bounds itself by HandleTimeout),
// the subscriber is closed (bounded, see CloseSubscriber) and Run returns
// nil. Messages delivered after ctx ended are requeued unhandled. It
// returns an error only for a configuration the broker client refuses.
// Call it once.
func (c *Consumer) Run(ctx context.Context) error {
	cfg := TopicSubscriberConfig(c.opts.AMQPURL, c.opts.Exchange, c.opts.Queue, c.opts.BindingKey, c.opts.Prefetch)
	maps.Copy(cfg.Queue.Arguments, c.opts.QueueArguments)
	if err := cfg.ValidateSubscriber(); err != nil {
		return fmt.Errorf("%s: subscriber config: %w", c.opts.Name, err)
	}
	sub, channels := c.subscribe(ctx, cfg)
	if sub == nil {
		return nil // ctx ended before the broker could be reached
	}
	c.readyOnce.Do(func() { close(c.ready) })
	c.logger.Info("consuming", slog.String("exchange", c.opts.Exchange), slog.String("queue", c.opts.Queue),
		slog.Int("subscriptions", len(channels)), slog.Int("max_batch", c.opts.MaxBatch), slog.Int("batches", c.opts.Batches))
	in, fannedIn := FanIn(ctx, channels)
	var loops sync.WaitGroup
	for range c.opts.Batches {
		loops.Go(func() { c.loop(ctx, in) })
	}
	loops.Wait()
	if err := CloseSubscriber(sub); err != nil {
		c.logger.Warn("closing the subscriber", slog.Any("error", err))
	}
	fannedIn()
	return nil
}

// subscribe connects and subscribes Subscriptions times, retrying with
// backoff until it succeeds or ctx ends (then it returns nil).
func (c *Consumer) subscribe(ctx context.Context, cfg amqp.Config) (message.Subscriber, []<-chan *message.Message) {
	wait := time.Duration(0)
	for {
		sub, channels, err := c.trySubscribe(ctx, cfg)
		if err == nil {
			return sub, channels
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		wait = min(max(2*wait, c.opts.Backoff), c.opts.MaxBackoff)
		c.logger.Warn("subscribing failed; retrying", slog.String("queue", c.opts.Queue),
			slog.Duration("retry_in", wait), slog.Any("error", err))
		if !c.sleep(ctx, wait) {
			return nil, nil
		}
	}
}

func (c *Consumer) trySubscribe(ctx context.Context, cfg amqp.Config) (message.Subscriber, []<-chan *message.Message, error) {
	topics := make([]string, c.opts.Subscriptions)
	for i := range topics {
		topics[i] = c.opts.Queue
	}
	sub, channels, err := SubscribeAll(ctx, cfg, c.logger, topics)
	if err != nil || len(c.opts.FormerBindingKeys) == 0 {
		return sub, channels, err
	}
	if err := unbindQueue(c.opts.AMQPURL, c.opts.Exchange, c.opts.Queue, c.opts.FormerBindingKeys); err != nil {
		return nil, nil, errors.Join(err, sub.Close())
	}
	return sub, channels, nil
}

// loop gathers batches from in and handles them until ctx is done.
func (c *Consumer) loop(ctx context.Context, in <-chan *message.Message) {
	for {
		var first *message.Message
		select {
		case <-ctx.Done():
			return
		case first = <-in:
		}
		c.handle(ctx, gather(ctx, in, first, c.opts.MaxBatch, c.opts.Linger, c.opts.Clock))
	}
}

// handle starts the consumer span of every message of batch, runs the
// handler until every message is acknowledged or dropped, and ends the
// spans. Failed messages are retried after the backoff; if ctx ends
// meanwhile they are requeued.
func (c *Consumer) handle(ctx context.Context, batch []*message.Message) {
	spans := make([]trace.Span, len(batch))
	for i, msg := range batch {
		var mctx context.Context
		mctx, spans[i] = StartProcessSpan(ctx, c.tracer, c.opts.Propagator, c.opts.Exchange, c.opts.Queue, msg)
		msg.SetContext(mctx)
	}
	defer func() {
		for _, span := range spans {
			span.End()
		}
	}()
	pending := batch
	wait := time.Duration(0)
	for {
		pending = c.try(ctx, pending)
		if len(pending) == 0 {
			return
		}
		wait = min(max(2*wait, c.opts.Backoff), c.opts.MaxBackoff)
		if !c.sleep(ctx, wait) {
			for _, msg := range pending {
				msg.Nack()
			}
			return
		}
	}
}

// try calls the handler once with msgs, acknowledges what it may and
// returns the messages to retry.
func (c *Consumer) try(ctx context.Context, msgs []*message.Message) []*message.Message {
	// A batch under way finishes even if ctx ends: stopping it halfway
	// would only requeue its messages.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.HandleTimeout)
	defer cancel()
	if len(msgs) == 1 {
		// One message: its handling continues the message's trace.
		hctx = trace.ContextWithSpan(hctx, trace.SpanFromContext(msgs[0].Context()))
	}
	errs, err := c.opts.Handle(hctx, msgs)
	if err == nil && errs != nil && len(errs) != len(msgs) {
		err = fmt.Errorf("the handler returned %d results for %d messages", len(errs), len(msgs))
	}
	if err != nil {
		c.logger.Warn("handling a batch failed; retrying it", slog.Int("messages", len(msgs)),
			slog.String("first_message_id", msgs[0].UUID), slog.Any("error", err))
		for _, msg := range msgs {
			recordError(msg, err, "handling failed")
		}
		return msgs
	}
	var retry []*message.Message
	for i, msg := range msgs {
		var merr error
		if errs != nil {
			merr = errs[i]
		}
		switch {
		case merr == nil:
			msg.Ack()
		case errors.Is(merr, ErrPoison):
			recordError(msg, merr, "poison message")
			c.logger.ErrorContext(msg.Context(), "dropping a message that can never be handled",
				slog.String("message_id", msg.UUID), slog.Int("bytes", len(msg.Payload)), slog.Any("error", merr))
			msg.Ack()
		default:
			recordError(msg, merr, "handling failed")
			c.logger.WarnContext(msg.Context(), "handling a message failed; retrying it",
				slog.String("message_id", msg.UUID), slog.Any("error", merr))
			retry = append(retry, msg)
		}
	}
	return retry
}

// recordError marks msg's consumer span failed.
func recordError(msg *message.Message, err error, status string) {
	span := trace.SpanFromContext(msg.Context())
	span.RecordError(err)
	span.SetStatus(codes.Error, status)
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
