package pipeline

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
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// Defaults of DrainerOptions.
const (
	// DefaultDrainerWorkers bounds a drainer's insert batches too: a batch
	// holds at most one dead letter per subscription.
	DefaultDrainerWorkers  = 32
	DefaultDrainerPrefetch = 16
	DefaultStoreTimeout    = 30 * time.Second
)

// DeadLetterStore stores dead letters; *store.Store is one.
type DeadLetterStore interface {
	// InsertDeadLetters stores letters, skipping those already stored, and
	// returns how many were new.
	InsertDeadLetters(ctx context.Context, letters []store.DeadLetter) (int, error)
}

// DrainerOptions for NewDrainer.
type DrainerOptions struct {
	// AMQPURL is the broker. Required.
	AMQPURL string
	// Store receives the dead letters. Required.
	Store DeadLetterStore
	// DeadExchange and DeadQueue name the dead-letter queue (bound with
	// "#", declared on subscribe). Defaults DefaultDeadExchange and
	// DefaultDeadQueue.
	DeadExchange, DeadQueue string
	// Workers is how many dead letters are in hand at once, each on its own
	// subscription; those in hand together are inserted by one statement.
	// Default DefaultDrainerWorkers.
	Workers int
	// Prefetch of each worker. Default DefaultDrainerPrefetch.
	Prefetch int
	// StoreTimeout bounds one insert. Default DefaultStoreTimeout.
	StoreTimeout time.Duration
	// Backoff and MaxBackoff space the retries while the database fails. Defaults DefaultBackoff and DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration
	// TracerProvider makes each message's consumer span. Default: none.
	TracerProvider trace.TracerProvider
	// Propagator reads the trace context of dead-letter messages. Default
	// propagation.TraceContext.
	Propagator propagation.TextMapPropagator
	// Metrics, if non-nil, registers dead_letters_stored_total,
	// dead_letter_store_errors_total and dead_letter_poison_total.
	Metrics prometheus.Registerer
	// Logger receives poison messages and store errors. Nil discards.
	Logger *slog.Logger
	// Clock paces the backoffs. Default clock.Real.
	Clock clock.Clock
}

// Drainer moves dead letters from the dead-letter queue into the store,
// where the API can list and redrive them. A message is acknowledged once
// its row is committed (or was already there: the insert is idempotent on
// (execution id, attempt)); after a database error the batch is retried
// with backoff;
// a message that does not decode to a valid dead letter is logged, counted
// and acknowledged (poison), since no retry can store it.
type Drainer struct {
	opts     DrainerOptions
	logger   *slog.Logger
	consumer *broker.Consumer

	stored, storeErrors, poison prometheus.Counter
}

// NewDrainer validates opts, applies the defaults and registers the
// metrics. It does not connect: Run does.
func NewDrainer(opts DrainerOptions) (*Drainer, error) {
	switch {
	case opts.AMQPURL == "":
		return nil, errors.New("drainer: AMQPURL is required")
	case opts.Store == nil:
		return nil, errors.New("drainer: Store is required")
	case opts.Workers < 0 || opts.Prefetch < 0 || opts.StoreTimeout < 0 || opts.Backoff < 0 || opts.MaxBackoff < 0:
		return nil, errors.New("drainer: counts and durations must not be negative")
	}
	opts.DeadExchange = cmp.Or(opts.DeadExchange, DefaultDeadExchange)
	opts.DeadQueue = cmp.Or(opts.DeadQueue, DefaultDeadQueue)
	opts.Workers = cmp.Or(opts.Workers, DefaultDrainerWorkers)
	opts.Prefetch = cmp.Or(opts.Prefetch, DefaultDrainerPrefetch)
	opts.StoreTimeout = cmp.Or(opts.StoreTimeout, DefaultStoreTimeout)
	opts.Backoff = cmp.Or(opts.Backoff, DefaultBackoff)
	opts.MaxBackoff = max(cmp.Or(opts.MaxBackoff, DefaultMaxBackoff), opts.Backoff)
	opts.TracerProvider, opts.Propagator, opts.Clock = broker.OrDefaults(opts.TracerProvider, opts.Propagator, opts.Clock)
	d := &Drainer{
		opts:   opts,
		logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		stored: counter("dead_letters_stored_total",
			"Dead letters inserted into the dead-letter store (redelivered duplicates not counted)."),
		storeErrors: counter("dead_letter_store_errors_total",
			"Dead-letter inserts that failed (the dead letters were requeued)."),
		poison: counter("dead_letter_poison_total",
			"Messages on the dead-letter queue that are not valid dead letters, acknowledged and dropped."),
	}
	var err error
	d.consumer, err = broker.NewConsumer(broker.ConsumerOptions{
		Name: "dead letters", AMQPURL: opts.AMQPURL, Exchange: opts.DeadExchange, Queue: opts.DeadQueue, BindingKey: "#",
		Handle: d.store, Subscriptions: opts.Workers, Prefetch: opts.Prefetch, HandleTimeout: opts.StoreTimeout,
		Backoff: opts.Backoff, MaxBackoff: opts.MaxBackoff,
		TracerProvider: opts.TracerProvider, Propagator: opts.Propagator, Logger: opts.Logger, Clock: opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("drainer: %w", err)
	}
	if err := register(opts.Metrics, []prometheus.Collector{d.stored, d.storeErrors, d.poison}); err != nil {
		return nil, fmt.Errorf("drainer: %w", err)
	}
	return d, nil
}

// Ready is closed once every subscription is in place.
func (d *Drainer) Ready() <-chan struct{} { return d.consumer.Ready() }

// Run subscribes and stores dead letters until ctx is done; then the
// letters in hand are finished (their inserts are not cut short) and Run
// returns nil. While RabbitMQ is unreachable it retries with backoff. Call
// it once.
func (d *Drainer) Run(ctx context.Context) error { return d.consumer.Run(ctx) }

// store inserts the dead letters of msgs with one statement: the
// broker.BatchHandler of the consumer.
func (d *Drainer) store(ctx context.Context, msgs []*message.Message) ([]error, error) {
	errs := make([]error, len(msgs))
	letters := make([]store.DeadLetter, 0, len(msgs))
	for i, msg := range msgs {
		pb := &dispatcherv1.DeadLetter{}
		if err := proto.Unmarshal(msg.Payload, pb); err != nil {
			d.poison.Inc()
			errs[i] = fmt.Errorf("%w: decode dead letter: %w", broker.ErrPoison, err)
			continue
		}
		letter := FromProto(pb)
		if err := letter.Validate(); err != nil {
			d.poison.Inc()
			errs[i] = fmt.Errorf("%w: %w", broker.ErrPoison, err)
			continue
		}
		trace.SpanFromContext(msg.Context()).SetAttributes(
			attribute.String("cronmesh.execution.id", letter.ExecutionID), attribute.Int("cronmesh.attempt", int(letter.Attempt)))
		letters = append(letters, letter)
	}
	if len(letters) == 0 {
		return errs, nil
	}
	n, err := d.opts.Store.InsertDeadLetters(ctx, letters)
	if err != nil {
		d.storeErrors.Inc()
		return nil, fmt.Errorf("store %d dead letters: %w", len(letters), err)
	}
	d.stored.Add(float64(n))
	return errs, nil
}

// FromProto is the store form of a dead letter as the dead-letter queue
// carries it; its namespace is its request's.
func FromProto(pb *dispatcherv1.DeadLetter) store.DeadLetter {
	d := store.DeadLetter{
		ID:              pb.GetId(),
		Namespace:       pb.GetRequest().GetNamespace(),
		JobID:           pb.GetJobId(),
		ExecutionID:     pb.GetExecutionId(),
		Attempt:         pb.GetAttempt(),
		Reason:          pb.GetReason(),
		ResponseStatus:  pb.GetResponseStatus(),
		ResponseExcerpt: pb.GetResponseExcerpt(),
		Request:         pb.GetRequest(),
	}
	if t := pb.GetNominalTime(); t.IsValid() {
		d.NominalTime = t.AsTime()
	}
	if t := pb.GetDeadTime(); t.IsValid() {
		d.DeadTime = t.AsTime()
	}
	return d
}
