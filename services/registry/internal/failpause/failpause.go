// Package failpause is the registry's pause on failure: it consumes the
// execution events on their own durable queue, keeps each job's streak of
// dead-lettered executions and pauses a job whose streak reaches its
// pause_after_dead_letters (docs/adr/0013-pause-on-failure.md). The registry
// owns jobs and their pause, so it counts them itself: no other service
// reads or writes its tables, and no API key crosses namespaces.
package failpause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
)

// Defaults of Options.
const (
	DefaultWorkers    = 8
	DefaultBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	// bindingKey takes every execution event: a batch is routed by the
	// kind of its first event only.
	bindingKey = "execution.#"
	// deliveryLimit is in effect none, as for the other quorum queues of
	// the mesh: a database outage must not drop outcomes.
	deliveryLimit = int64(1) << 30
)

// Options for New.
type Options struct {
	Store *store.Store
	// AMQPURL, Exchange (the execution events') and Queue (the registry's
	// own) are required.
	AMQPURL, Exchange, Queue string
	// Workers is how many messages are in hand at once. Default
	// DefaultWorkers.
	Workers int
	Logger  *slog.Logger
	Clock   clock.Clock
}

// Consumer applies execution outcomes to the jobs' streaks. Create with
// New; Run until its context ends.
type Consumer struct {
	opts      Options
	ready     chan struct{}
	readyOnce sync.Once
}

// New validates opts and fills the defaults. It does not connect.
func New(opts Options) (*Consumer, error) {
	if opts.Store == nil || opts.AMQPURL == "" || opts.Exchange == "" || opts.Queue == "" {
		return nil, errors.New("failpause: Store, AMQPURL, Exchange and Queue are required")
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	return &Consumer{opts: opts, ready: make(chan struct{})}, nil
}

// Ready is closed once the consumer is subscribed.
func (c *Consumer) Ready() <-chan struct{} { return c.ready }

// Run consumes until ctx ends. Until the broker answers it retries the
// subscription with backoff; what it has not acknowledged is redelivered to
// the next consumer.
func (c *Consumer) Run(ctx context.Context) error {
	cfg := broker.TopicSubscriberConfig(c.opts.AMQPURL, c.opts.Exchange, c.opts.Queue, bindingKey, 1)
	cfg.Queue.Arguments["x-delivery-limit"] = deliveryLimit
	if err := cfg.ValidateSubscriber(); err != nil {
		return fmt.Errorf("failpause: subscriber config: %w", err)
	}
	sub, channels := c.subscribe(ctx, cfg)
	if sub == nil {
		return nil
	}
	c.readyOnce.Do(func() { close(c.ready) })
	broker.ConsumeBatches(ctx, channels, broker.BatchOptions{
		Loops: 2, MaxBatch: c.opts.Workers, Linger: 10 * time.Millisecond,
		Backoff: DefaultBackoff, MaxBackoff: DefaultMaxBackoff, Clock: c.opts.Clock,
	}, c.apply)
	// Bounded: a broker that no longer answers must not hold shutdown.
	if err := broker.CloseSubscriber(sub); err != nil {
		c.opts.Logger.Warn("closing the execution event subscriber", slog.Any("error", err))
	}
	return nil
}

func (c *Consumer) subscribe(ctx context.Context, cfg amqp.Config) (message.Subscriber, []<-chan *message.Message) {
	wait := DefaultBackoff
	for {
		sub, err := amqp.NewSubscriber(cfg, broker.WatermillLogger(c.opts.Logger))
		if err == nil {
			channels := make([]<-chan *message.Message, 0, c.opts.Workers)
			for range c.opts.Workers {
				ch, serr := sub.Subscribe(ctx, c.opts.Queue)
				if serr != nil {
					err = errors.Join(serr, sub.Close())
					break
				}
				channels = append(channels, ch)
			}
			if err == nil {
				return sub, channels
			}
		}
		c.opts.Logger.Warn("subscribing to execution events failed; retrying",
			slog.String("queue", c.opts.Queue), slog.Duration("retry_in", wait), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return nil, nil
		case <-c.opts.Clock.After(wait):
		}
		wait = min(2*wait, DefaultMaxBackoff)
	}
}

// apply records the outcomes of msgs and acknowledges each message whose
// outcomes are all recorded; the rest are requeued.
func (c *Consumer) apply(ctx context.Context, msgs []*message.Message) []*message.Message {
	var requeue []*message.Message
	for _, msg := range msgs {
		batch := &eventsv1.ExecutionEventBatch{}
		if err := proto.Unmarshal(msg.Payload, batch); err != nil {
			c.opts.Logger.ErrorContext(ctx, "dropping an undecodable execution event batch", slog.String("message_id", msg.UUID), slog.Any("error", err))
			msg.Ack()
			continue
		}
		if err := c.record(ctx, batch.GetEvents()); err != nil {
			c.opts.Logger.WarnContext(ctx, "recording execution outcomes failed; requeueing", slog.Any("error", err))
			requeue = append(requeue, msg)
			continue
		}
		msg.Ack()
	}
	return requeue
}

func (c *Consumer) record(ctx context.Context, events []*eventsv1.ExecutionEvent) error {
	for _, ev := range events {
		var dead bool
		switch ev.GetKind() {
		case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD:
			dead = true
		case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED:
		default:
			continue
		}
		paused, err := c.opts.Store.RecordOutcome(ctx, store.Outcome{
			Namespace: ev.GetNamespace(), JobID: ev.GetJobId(), NominalTime: ev.GetNominalTime().AsTime(), Dead: dead,
		})
		if err != nil {
			return err
		}
		if paused {
			c.opts.Logger.InfoContext(ctx, "paused a job after consecutive dead-lettered executions",
				slog.String("namespace", ev.GetNamespace()), slog.String("job_id", ev.GetJobId()))
		}
	}
	return nil
}
