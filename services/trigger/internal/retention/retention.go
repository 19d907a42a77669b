// Package retention runs the trigger's retention (store.Maintain: the
// ledger's day partitions and the removal of old tombstones) on one node of
// the ring at a time, at start and then periodically.
package retention

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// DefaultInterval is how often the elected node applies the retention.
// Partitions are created days ahead, so an hour is frequent enough to never
// fall behind and rare enough to cost nothing.
const DefaultInterval = time.Hour

// Maintainer applies the retention; *store.Store is one.
type Maintainer interface {
	Maintain(ctx context.Context, now time.Time, r store.Retention) (store.MaintainResult, error)
}

// Leadership elects the one node that runs it (ring.Leadership).
type Leadership interface {
	Campaign(ctx context.Context, fn func(ctx context.Context)) error
}

// Options configures New.
type Options struct {
	Store      Maintainer // required
	Leadership Leadership // required
	Retention  store.Retention
	Interval   time.Duration // default DefaultInterval
	Clock      clock.Clock   // default clock.Real
	Logger     *slog.Logger
	// Metrics, if non-nil, registers trigger_retention_runs_total{outcome}
	// and trigger_ledger_days.
	Metrics prometheus.Registerer
}

// Keeper runs the retention while its node is elected.
type Keeper struct {
	opts Options
	runs *prometheus.CounterVec
	days prometheus.Gauge
}

// New validates opts: a store, a leadership and positive retentions.
func New(opts Options) (*Keeper, error) {
	switch {
	case opts.Store == nil || opts.Leadership == nil:
		return nil, errors.New("retention: Store and Leadership are required")
	case opts.Retention.Ledger <= 0 || opts.Retention.Tombstones <= 0:
		return nil, errors.New("retention: the ledger and tombstone retentions must be positive")
	case opts.Interval < 0:
		return nil, errors.New("retention: negative Interval")
	}
	opts.Interval = cmp.Or(opts.Interval, DefaultInterval)
	opts.Clock = cmp.Or[clock.Clock](opts.Clock, clock.Real{})
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	k := &Keeper{
		opts: opts,
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trigger_retention_runs_total",
			Help: "Retention runs (ledger partitions, tombstones) by outcome: ok or error.",
		}, []string{"outcome"}),
		days: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trigger_ledger_days",
			Help: "Days the ledger has partitions for, after the last retention run of this node.",
		}),
	}
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{k.runs, k.days} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return k, nil
}

// Run campaigns until ctx is done; while elected it applies the retention
// at once and then every Interval. A failed run is logged, counted and
// tried again at the next interval (a minute at most, so that a database
// outage does not leave the partitions ahead unmade for an hour).
func (k *Keeper) Run(ctx context.Context) error {
	return k.opts.Leadership.Campaign(ctx, func(ctx context.Context) {
		for {
			wait := k.opts.Interval
			if !k.runOnce(ctx) {
				wait = min(wait, time.Minute)
			}
			select {
			case <-ctx.Done():
				return
			case <-k.opts.Clock.After(wait):
			}
		}
	})
}

func (k *Keeper) runOnce(ctx context.Context) bool {
	res, err := k.opts.Store.Maintain(ctx, k.opts.Clock.Now(), k.opts.Retention)
	if err != nil {
		if ctx.Err() == nil {
			k.runs.WithLabelValues("error").Inc()
			k.opts.Logger.Error("retention: run failed; retrying", "error", err)
		}
		return false
	}
	k.runs.WithLabelValues("ok").Inc()
	k.days.Set(float64(res.Days))
	if len(res.Created)+len(res.Dropped) > 0 || res.DefaultTrimmed > 0 || res.Tombstones > 0 {
		k.opts.Logger.Info("retention: applied", "days_created", len(res.Created), "days_dropped", len(res.Dropped),
			"default_rows_trimmed", res.DefaultTrimmed, "tombstones_removed", res.Tombstones, "ledger_days", res.Days)
	}
	return true
}
