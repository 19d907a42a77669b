// Package evaluate turns execution event batches into incidents: it keeps
// the rules in memory (reloaded when the API changes them and every
// Refresh, for changes made through other replicas) and gives the events
// of each batch of broker messages to the store in one transaction.
package evaluate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// DefaultRefresh is how old the in-memory rules may get before the next
// batch reloads them.
const DefaultRefresh = 5 * time.Second

// Options for New.
type Options struct {
	Store *store.Store
	Clock clock.Clock
	// Refresh bounds how stale the rules may be (changes through this
	// replica's API apply at once). Default DefaultRefresh.
	Refresh time.Duration
	// Queued is called after a commit that queued notifications.
	Queued func()
	// Metrics, if non-nil, registers the evaluator's metrics.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
	// TracerProvider records, for every event that carries its execution's
	// trace context, a span "alerting.evaluate" in that trace. Nil: none.
	TracerProvider trace.TracerProvider
	// Propagator reads the events' trace context. Default
	// propagation.TraceContext.
	Propagator propagation.TextMapPropagator
	// Exchange and Queue name where the events come from, for the spans'
	// messaging attributes.
	Exchange, Queue string
}

// Evaluator evaluates execution events. Safe for concurrent use.
type Evaluator struct {
	opts   Options
	logger *slog.Logger
	tracer trace.Tracer

	mu       sync.Mutex
	set      *rules.Set
	loadedAt time.Time
	stale    bool

	events   prometheus.Counter
	relevant prometheus.Counter
	dups     prometheus.Counter
	opened   prometheus.Counter
	resolved prometheus.Counter
	lag      prometheus.Histogram
}

// New returns an Evaluator.
func New(opts Options) (*Evaluator, error) {
	if opts.Store == nil {
		return nil, errors.New("evaluate: Store is required")
	}
	opts.TracerProvider, opts.Propagator, opts.Clock = broker.OrDefaults(opts.TracerProvider, opts.Propagator, opts.Clock)
	opts.Refresh = cmp.Or(opts.Refresh, DefaultRefresh)
	if opts.Queued == nil {
		opts.Queued = func() {}
	}
	e := &Evaluator{
		opts: opts, logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)), stale: true,
		tracer:   opts.TracerProvider.Tracer("github.com/cronmesh/cronmesh/services/alerting/internal/evaluate"),
		events:   prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_execution_events_total", Help: "Execution events read."}),
		relevant: prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_execution_events_relevant_total", Help: "Execution events some rule looked at."}),
		dups:     prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_execution_events_duplicate_total", Help: "Opening events seen before (redeliveries), counted once."}),
		opened:   prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_incidents_opened_total", Help: "Incidents opened by execution events."}),
		resolved: prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_incidents_resolved_total", Help: "Incidents resolved by execution events."}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "alerting_evaluation_lag_seconds",
			Help:    "From an event's occur time to the commit of its batch's evaluation (the batch's newest event).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 300},
		}),
	}
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{e.events, e.relevant, e.dups, e.opened, e.resolved, e.lag} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("evaluate: register metrics: %w", err)
			}
		}
	}
	return e, nil
}

// Invalidate makes the next batch reload the rules.
func (e *Evaluator) Invalidate() {
	e.mu.Lock()
	e.stale = true
	e.mu.Unlock()
}

// Rules returns the current rules, reloading them when stale.
func (e *Evaluator) Rules(ctx context.Context) (*rules.Set, error) {
	now := e.opts.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.stale && e.set != nil && now.Sub(e.loadedAt) < e.opts.Refresh {
		return e.set, nil
	}
	set, err := e.opts.Store.LoadRules(ctx)
	if err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	e.set, e.loadedAt, e.stale = set, now, false
	return set, nil
}

// Handle is the broker.BatchHandler of the execution event queue: the
// events of every message of the batch are evaluated in one transaction.
// An attempt's STARTED and its outcome usually leave the dispatcher in two
// messages a few milliseconds apart; evaluated together they move a job's
// row once instead of twice, and a batch of messages is one transaction
// instead of one each. A message that does not decode is poison and
// dropped alone; a failed evaluation retries the whole batch (the store
// counts an event once, whatever it sees again).
func (e *Evaluator) Handle(ctx context.Context, msgs []*message.Message) ([]error, error) {
	var errs []error
	byMessage := make([][]*eventsv1.ExecutionEvent, len(msgs))
	for i, msg := range msgs {
		batch := &eventsv1.ExecutionEventBatch{}
		if err := proto.Unmarshal(msg.Payload, batch); err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = fmt.Errorf("%w: decode execution event batch: %v", broker.ErrPoison, err)
			continue
		}
		byMessage[i] = batch.Events
	}
	events := slices.Concat(byMessage...)
	if len(events) == 0 {
		return errs, nil
	}
	e.events.Add(float64(len(events)))
	set, err := e.Rules(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := e.opts.Store.ApplyExecutions(ctx, events, set, e.opts.Clock.Now())
	e.eventSpans(msgs, byMessage, start, err)
	if err != nil {
		return nil, err
	}
	trace.SpanFromContext(ctx).SetAttributes(
		attribute.Int("cronmesh.alerting.messages", len(msgs)),
		attribute.Int("cronmesh.alerting.events", len(events)),
		attribute.Int("cronmesh.alerting.relevant", res.Relevant),
		attribute.Int("cronmesh.alerting.opened", res.Opened),
		attribute.Int("cronmesh.alerting.resolved", res.Resolved),
	)
	e.relevant.Add(float64(res.Relevant))
	e.dups.Add(float64(res.Duplicates))
	e.opened.Add(float64(res.Opened))
	e.resolved.Add(float64(res.Resolved))
	var newest time.Time
	for _, ev := range events {
		if t := ev.GetOccurTime().AsTime(); ev.GetOccurTime().IsValid() && t.After(newest) {
			newest = t
		}
	}
	if !newest.IsZero() {
		e.lag.Observe(max(e.opts.Clock.Now().Sub(newest).Seconds(), 0))
	}
	if res.Opened+res.Resolved > 0 {
		e.opts.Queued()
	}
	return errs, nil
}
