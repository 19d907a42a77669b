// Package failpause is the registry's pause on failure: it consumes the
// execution events of the jobs with pause_after_dead_letters on their own
// durable queue, keeps each job's streak of dead-lettered executions and
// pauses a job whose streak reaches its pause_after_dead_letters
// (docs/adr/0013-pause-on-failure.md). The registry
// owns jobs and their pause, so it counts them itself: no other service
// reads or writes its tables, and no API key crosses namespaces.
package failpause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
)

// Defaults of Options.
const (
	DefaultWorkers = 8
	// formerBindingKey took every execution event. The queue is bound
	// with execevent.PauseOnFailureBindingKey instead, and a binding
	// outlives the registry that declared it, so it is removed.
	formerBindingKey = "execution.#"
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
	opts     Options
	consumer *broker.Consumer
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
	c := &Consumer{opts: opts}
	var err error
	c.consumer, err = broker.NewConsumer(broker.ConsumerOptions{
		Name: "pause on failure", AMQPURL: opts.AMQPURL, Exchange: opts.Exchange, Queue: opts.Queue, BindingKey: execevent.PauseOnFailureBindingKey,
		FormerBindingKeys: []string{formerBindingKey},
		QueueArguments:    map[string]any{"x-delivery-limit": broker.NoDeliveryLimit},
		Handle:            c.apply, Subscriptions: opts.Workers, Prefetch: 1,
		Logger: opts.Logger, Clock: opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("failpause: %w", err)
	}
	return c, nil
}

// Ready is closed once the consumer is subscribed.
func (c *Consumer) Ready() <-chan struct{} { return c.consumer.Ready() }

// Run consumes until ctx ends. Until the broker answers it retries the
// subscription with backoff; what it has not acknowledged is redelivered to
// the next consumer.
func (c *Consumer) Run(ctx context.Context) error { return c.consumer.Run(ctx) }

// apply records the outcomes of msgs: the broker.BatchHandler of the
// consumer. Only the batches that hold an event of a job with the option
// are routed here; their other events are skipped. An event counts only if
// its slot fired while the job had the option, and RecordOutcome counts it
// only while the job still has it. A message whose outcomes are not all
// recorded is retried whole (recording an outcome twice is harmless: the
// store keys it by slot).
func (c *Consumer) apply(ctx context.Context, msgs []*message.Message) ([]error, error) {
	errs := make([]error, len(msgs))
	for i, msg := range msgs {
		batch := &eventsv1.ExecutionEventBatch{}
		if err := proto.Unmarshal(msg.Payload, batch); err != nil {
			errs[i] = fmt.Errorf("%w: decode execution event batch: %w", broker.ErrPoison, err)
			continue
		}
		for _, ev := range batch.GetEvents() {
			if ev.GetPauseAfterDeadLetters() <= 0 {
				continue
			}
			var dead bool
			switch ev.GetKind() {
			case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD:
				dead = true
			case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED:
			default:
				continue
			}
			o := store.Outcome{Namespace: ev.GetNamespace(), JobID: ev.GetJobId(), NominalTime: ev.GetNominalTime().AsTime(), Dead: dead}
			if errs[i] = c.record(ctx, o); errs[i] != nil {
				break
			}
		}
	}
	return errs, nil
}

func (c *Consumer) record(ctx context.Context, o store.Outcome) error {
	paused, err := c.opts.Store.RecordOutcome(ctx, o)
	if err != nil {
		return err
	}
	if paused {
		c.opts.Logger.InfoContext(ctx, "paused a job after consecutive dead-lettered executions",
			slog.String("namespace", o.Namespace), slog.String("job_id", o.JobID))
	}
	return nil
}
