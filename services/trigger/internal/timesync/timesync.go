package timesync

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronmesh/cronmesh/libs/clock"
)

// Defaults of a Syncer.
const (
	DefaultTolerance = 100 * time.Millisecond
	DefaultInterval  = 10 * time.Second
	DefaultSamples   = 3
)

// Reference tells the reference clock's time (PostgreSQL's
// clock_timestamp()).
type Reference interface {
	ServerTime(ctx context.Context) (time.Time, error)
}

// Options configure a Syncer. Reference and Clock are required.
type Options struct {
	Reference Reference
	// Clock is the node's corrected clock: an Offset over the host's clock,
	// which the Syncer reads and sets. Everything that decides when a slot
	// is due reads it.
	Clock *clock.Offset
	// Local is the host's clock the offset is measured from (the base of
	// Clock). Default clock.Real{}.
	Local clock.Clock
	// Tolerance is the offset up to which no correction is applied, and by
	// which a new measurement must differ from the applied correction to
	// replace it (so noise does not move the clock). Default 100 ms.
	Tolerance time.Duration
	Interval  time.Duration // between measurements; default 10 s
	Samples   int           // readings per measurement, the fastest kept; default 3
	Logger    *slog.Logger
	Metrics   prometheus.Registerer // nil: not registered
}

// Syncer measures and corrects a node's clock offset.
type Syncer struct {
	opts       Options
	correction prometheus.Gauge
}

// New validates opts and fills the defaults.
func New(opts Options) (*Syncer, error) {
	if opts.Reference == nil || opts.Clock == nil {
		return nil, errors.New("timesync: Reference and Clock are required")
	}
	if opts.Local == nil {
		opts.Local = clock.Real{}
	}
	if opts.Tolerance <= 0 {
		opts.Tolerance = DefaultTolerance
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Samples <= 0 {
		opts.Samples = DefaultSamples
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Syncer{opts: opts, correction: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trigger_clock_correction_seconds",
		Help: "Correction applied to this node's clock to match PostgreSQL's (0 within the tolerance).",
	})}
	if opts.Metrics != nil {
		if err := opts.Metrics.Register(s.correction); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Sync measures the offset once and applies it when it is beyond the
// tolerance (or returns the clock to the host's when the offset is gone).
// It returns the measured offset (reference minus host).
func (s *Syncer) Sync(ctx context.Context) (time.Duration, error) {
	var (
		best    time.Duration
		bestRTT time.Duration = -1
	)
	for range s.opts.Samples {
		sent := s.opts.Local.Now()
		server, err := s.opts.Reference.ServerTime(ctx)
		if err != nil {
			return 0, err
		}
		received := s.opts.Local.Now()
		rtt := received.Sub(sent)
		if bestRTT < 0 || rtt < bestRTT {
			bestRTT = rtt
			best = server.Sub(sent.Add(rtt / 2).Round(0)) // wall clocks: Round(0) drops the monotonic reading
		}
	}
	current := s.opts.Clock.Offset()
	if abs(best-current) <= s.opts.Tolerance {
		return best, nil
	}
	next := best
	if abs(best) <= s.opts.Tolerance {
		next = 0
	}
	s.opts.Clock.Set(next)
	s.correction.Set(next.Seconds())
	level := slog.LevelWarn
	if next == 0 {
		level = slog.LevelInfo
	}
	s.opts.Logger.Log(ctx, level, "timesync: this node's clock is off PostgreSQL's; correcting it",
		"offset", best, "correction", next, "previous", current, "round_trip", bestRTT)
	return best, nil
}

// Run measures every Interval until ctx is done; a failed measurement
// (PostgreSQL down) keeps the last correction and is logged.
func (s *Syncer) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.opts.Local.After(s.opts.Interval):
		}
		if _, err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.opts.Logger.Warn("timesync: measuring the clock offset failed; keeping the last correction", "error", err)
		}
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
