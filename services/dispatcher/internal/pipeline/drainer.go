package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// Defaults of DrainerOptions.
const (
	// DefaultDrainerWorkers bounds a drainer's insert batches too: a batch
	// holds at most one dead letter per worker.
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
	// Backoff and MaxBackoff space the requeues of a worker while the
	// database fails. Defaults DefaultBackoff and DefaultMaxBackoff.
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
// (execution id, attempt)); a database error requeues it after a backoff;
// a message that does not decode to a valid dead letter is logged, counted
// and acknowledged (poison), since no retry can store it.
type Drainer struct {
	opts      DrainerOptions
	tracer    trace.Tracer
	logger    *slog.Logger
	inserts   *batcher[store.DeadLetter]
	ready     chan struct{}
	readyOnce sync.Once

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
	if opts.TracerProvider == nil {
		opts.TracerProvider = noop.NewTracerProvider()
	}
	if opts.Propagator == nil {
		opts.Propagator = propagation.TraceContext{}
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	d := &Drainer{
		opts:   opts,
		tracer: opts.TracerProvider.Tracer(tracerName),
		logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		ready:  make(chan struct{}),
		stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dead_letters_stored_total",
			Help: "Dead letters inserted into the dead-letter store (redelivered duplicates not counted).",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dead_letter_store_errors_total",
			Help: "Dead-letter inserts that failed (the dead letters were requeued).",
		}),
		poison: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dead_letter_poison_total",
			Help: "Messages on the dead-letter queue that are not valid dead letters, acknowledged and dropped.",
		}),
	}
	d.inserts = newBatcher(d.insert, opts.Workers, 0, 2, opts.StoreTimeout)
	if err := register(opts.Metrics, []prometheus.Collector{d.stored, d.storeErrors, d.poison}); err != nil {
		return nil, fmt.Errorf("drainer: %w", err)
	}
	return d, nil
}

// Ready is closed once every worker is subscribed.
func (d *Drainer) Ready() <-chan struct{} { return d.ready }

// Run declares the dead-letter queue, subscribes and stores dead letters
// until ctx is done; then the letters in hand are finished (their inserts
// are not cut short) and Run returns nil. While RabbitMQ is unreachable it
// retries with backoff. Call it once.
func (d *Drainer) Run(ctx context.Context) error {
	if err := broker.DeclareQueues(ctx, d.opts.AMQPURL, DeadBinding(d.opts.DeadExchange, d.opts.DeadQueue)); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("drainer: declare the dead-letter queue: %w", err)
	}
	batchCtx, stopBatcher := context.WithCancel(context.WithoutCancel(ctx))
	var batcherDone sync.WaitGroup
	batcherDone.Go(func() { d.inserts.run(batchCtx) })
	defer func() {
		stopBatcher()
		batcherDone.Wait()
	}()

	q := d.opts.DeadQueue
	cfg := subscriberConfig(d.opts.AMQPURL, d.opts.DeadExchange, d.opts.Prefetch, map[string]string{q: "#"})
	if err := cfg.ValidateSubscriber(); err != nil {
		return fmt.Errorf("drainer: subscriber config: %w", err)
	}
	sub, subs := subscribe(ctx, cfg, map[string]int{q: d.opts.Workers}, d.logger, d.opts.Clock, newBackoff(d.opts.Backoff, d.opts.MaxBackoff))
	if sub == nil {
		return nil
	}
	d.readyOnce.Do(func() { close(d.ready) })
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() { d.consume(ctx, s.messages) })
	}
	wg.Wait()
	if err := broker.CloseSubscriber(sub); err != nil {
		d.logger.Warn("closing the dead-letter subscriber", slog.Any("error", err))
	}
	return nil
}

func (d *Drainer) consume(ctx context.Context, messages <-chan *message.Message) {
	b := newBackoff(d.opts.Backoff, d.opts.MaxBackoff)
	for {
		msg, ok := broker.Next(ctx, messages)
		if !ok {
			return
		}
		if d.handle(ctx, msg) {
			b.reset()
			msg.Ack()
			continue
		}
		sleep(ctx, d.opts.Clock, b.next())
		msg.Nack()
	}
}

// handle stores one dead letter and says whether to acknowledge it.
func (d *Drainer) handle(ctx context.Context, msg *message.Message) bool {
	ctx = broker.ExtractTrace(ctx, d.opts.Propagator, msg.Metadata)
	ctx, span := d.tracer.Start(ctx, "process "+d.opts.DeadQueue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(broker.ProcessAttributes(d.opts.DeadExchange, d.opts.DeadQueue, msg.UUID)...))
	defer span.End()

	pb := &dispatcherv1.DeadLetter{}
	if err := proto.Unmarshal(msg.Payload, pb); err != nil {
		return d.drop(ctx, span, msg, fmt.Errorf("decode dead letter: %w", err))
	}
	letter := FromProto(pb)
	if err := letter.Validate(); err != nil {
		return d.drop(ctx, span, msg, err)
	}
	span.SetAttributes(attribute.String("cronmesh.execution.id", letter.ExecutionID), attribute.Int("cronmesh.attempt", int(letter.Attempt)))
	// The insert is not cut short by shutdown: it takes milliseconds, and
	// the store bounds it.
	if err := <-d.inserts.submit(letter); err != nil {
		d.storeErrors.Inc()
		span.RecordError(err)
		span.SetStatus(codes.Error, "store failed")
		d.logger.WarnContext(ctx, "storing a dead letter failed; it will be redelivered",
			slog.String("execution_id", letter.ExecutionID), slog.Any("error", err))
		return false
	}
	return true
}

// insert is the flush of the insert batcher.
func (d *Drainer) insert(ctx context.Context, letters []store.DeadLetter) error {
	n, err := d.opts.Store.InsertDeadLetters(ctx, letters)
	if err != nil {
		return err
	}
	d.stored.Add(float64(n))
	return nil
}

func (d *Drainer) drop(ctx context.Context, span trace.Span, msg *message.Message, err error) bool {
	d.poison.Inc()
	span.RecordError(err)
	span.SetStatus(codes.Error, "poison message")
	d.logger.ErrorContext(ctx, "dropping a message of the dead-letter queue that is not a valid dead letter",
		slog.String("message_id", msg.UUID), slog.Int("bytes", len(msg.Payload)), slog.Any("error", err))
	return true
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
