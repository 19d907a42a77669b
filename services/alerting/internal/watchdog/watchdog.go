// Package watchdog is alerting's own check that jobs fire: it learns each
// job's schedule from the registry's job events and raises a missed-schedule
// incident when no execution event arrives for a slot within the rule's
// tolerance. It catches a trigger tier that is down or stuck, which cannot
// report its own silence. It also raises the no-success incidents, which
// are likewise about something not happening.
package watchdog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// Defaults of Options.
const (
	DefaultInterval = time.Second
	DefaultBatch    = 1000
	// DefaultNoSuccessInterval spaces the no-success sweeps, which scan the
	// jobs of every such rule.
	DefaultNoSuccessInterval = 30 * time.Second
	// DefaultRetention is how long recorded events and sent notifications
	// are kept (see store.Prune for what is kept longer), and
	// DefaultPruneInterval how often they are pruned.
	DefaultRetention     = 7 * 24 * time.Hour
	DefaultPruneInterval = time.Hour
)

// Options for New.
type Options struct {
	Store *store.Store
	// Rules returns the current rules (the evaluator's copy).
	Rules func(context.Context) (*rules.Set, error)
	// Clock paces the loop and is "now" for every decision. Default
	// clock.Real.
	Clock clock.Clock
	// Interval between passes when a pass found less than a batch.
	Interval time.Duration
	// Batch is how many due jobs one transaction takes.
	Batch int
	// NoSuccessInterval spaces the no-success sweeps.
	NoSuccessInterval time.Duration
	// Retention and PruneInterval: see DefaultRetention.
	Retention, PruneInterval time.Duration
	// Queued is called after a pass that opened incidents.
	Queued  func()
	Metrics prometheus.Registerer
	Logger  *slog.Logger
}

// Watchdog runs the missed-schedule checks. Create with New; Run it.
type Watchdog struct {
	opts   Options
	logger *slog.Logger

	checked, missed, opened prometheus.Counter
	jobEvents               *prometheus.CounterVec
}

// New validates opts and applies the defaults.
func New(opts Options) (*Watchdog, error) {
	if opts.Store == nil || opts.Rules == nil {
		return nil, errors.New("watchdog: Store and Rules are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	opts.Interval = cmp.Or(opts.Interval, DefaultInterval)
	opts.Batch = cmp.Or(opts.Batch, DefaultBatch)
	opts.NoSuccessInterval = cmp.Or(opts.NoSuccessInterval, DefaultNoSuccessInterval)
	opts.Retention = cmp.Or(opts.Retention, DefaultRetention)
	opts.PruneInterval = cmp.Or(opts.PruneInterval, DefaultPruneInterval)
	if opts.Queued == nil {
		opts.Queued = func() {}
	}
	w := &Watchdog{
		opts: opts, logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		checked:   prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_watchdog_checked_total", Help: "Job slots the watchdog looked at when they came due."}),
		missed:    prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_watchdog_missed_total", Help: "Job slots with no execution event within a rule's tolerance."}),
		opened:    prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_watchdog_incidents_opened_total", Help: "Incidents the watchdog opened (missed schedule, no success)."}),
		jobEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "alerting_job_events_total", Help: "Job events read, by outcome (upserted, stale, ignored)."}, []string{"outcome"}),
	}
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{w.checked, w.missed, w.opened, w.jobEvents} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("watchdog: register metrics: %w", err)
			}
		}
	}
	return w, nil
}

// HandleJobEvents is the broker.BatchHandler of the job event queue: it
// applies the batch's events in one transaction (store.ApplyJobEvents).
// A message that does not decode, or whose event the store calls invalid,
// gets an error wrapping broker.ErrPoison and leaves the others unharmed;
// a database error fails the whole batch.
func (w *Watchdog) HandleJobEvents(ctx context.Context, msgs []*message.Message) ([]error, error) {
	errs := make([]error, len(msgs))
	events := make([]*eventsv1.JobEvent, 0, len(msgs))
	index := make([]int, 0, len(msgs)) // events[k] is msgs[index[k]]
	for i, msg := range msgs {
		ev := &eventsv1.JobEvent{}
		if err := proto.Unmarshal(msg.Payload, ev); err != nil {
			errs[i] = fmt.Errorf("%w: decode job event: %v", broker.ErrPoison, err)
			continue
		}
		events = append(events, ev)
		index = append(index, i)
	}
	if len(events) == 0 {
		return errs, nil
	}
	results, err := w.opts.Store.ApplyJobEvents(ctx, events, w.opts.Clock.Now())
	if err != nil {
		return nil, err
	}
	for k, res := range results {
		if res.Err != nil {
			errs[index[k]] = fmt.Errorf("%w: %v", broker.ErrPoison, res.Err)
			continue
		}
		w.jobEvents.WithLabelValues(jobOutcome(res.Applied)).Inc()
	}
	return errs, nil
}

// jobOutcome labels alerting_job_events_total.
func jobOutcome(a store.JobApplied) string {
	switch a {
	case store.JobUpserted:
		return "upserted"
	case store.JobStale:
		return "stale"
	case store.JobIgnored:
		return "ignored"
	default:
		return "unknown"
	}
}

// Run checks until ctx is done, then finishes the pass under way and
// returns nil. Call it once.
func (w *Watchdog) Run(ctx context.Context) error {
	w.run(ctx)
	return nil
}

func (w *Watchdog) run(ctx context.Context) {
	var lastNoSuccess, lastPrune time.Time
	for {
		full, err := w.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			w.logger.Warn("watchdog pass failed", slog.Any("error", err))
		}
		if now := w.opts.Clock.Now(); now.Sub(lastNoSuccess) >= w.opts.NoSuccessInterval {
			lastNoSuccess = now
			if err := w.NoSuccessPass(ctx); err != nil && ctx.Err() == nil {
				w.logger.Warn("no-success pass failed", slog.Any("error", err))
			}
		}
		if now := w.opts.Clock.Now(); now.Sub(lastPrune) >= w.opts.PruneInterval {
			lastPrune = now
			w.prune(ctx, now)
		}
		if full {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-w.opts.Clock.After(w.opts.Interval):
		}
	}
}

// Pass looks at one batch of due jobs; full says a batch was full (more
// may be due).
func (w *Watchdog) Pass(ctx context.Context) (bool, error) {
	set, err := w.opts.Rules(ctx)
	if err != nil {
		return false, err
	}
	res, err := w.opts.Store.Watch(ctx, set, w.opts.Clock.Now(), w.opts.Batch)
	if err != nil {
		return false, err
	}
	w.checked.Add(float64(res.Checked))
	w.missed.Add(float64(res.Missed))
	w.opened.Add(float64(res.Opened))
	if res.Opened > 0 {
		w.opts.Queued()
	}
	return res.Checked == w.opts.Batch, nil
}

// NoSuccessPass opens the no-success incidents due now.
func (w *Watchdog) NoSuccessPass(ctx context.Context) error {
	set, err := w.opts.Rules(ctx)
	if err != nil {
		return err
	}
	n, err := w.opts.Store.NoSuccess(ctx, set, w.opts.Clock.Now(), w.opts.Batch)
	w.opened.Add(float64(n))
	if n > 0 {
		w.opts.Queued()
	}
	return err
}

// prune deletes old records in batches until none are left.
func (w *Watchdog) prune(ctx context.Context, now time.Time) {
	for ctx.Err() == nil {
		events, notes, err := w.opts.Store.Prune(ctx, now.Add(-w.opts.Retention), 10000)
		if err != nil {
			if ctx.Err() == nil {
				w.logger.Warn("pruning failed", slog.Any("error", err))
			}
			return
		}
		if events < 10000 && notes < 10000 {
			return
		}
	}
}
