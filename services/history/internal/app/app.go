package app

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/lifecycle"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/service"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/services/history/internal/api"
	"github.com/cronmesh/cronmesh/services/history/internal/ingest"
	"github.com/cronmesh/cronmesh/services/history/internal/store"
	"github.com/cronmesh/cronmesh/services/history/internal/tracelink"
)

// Defaults of the history service.
const (
	DefaultListen = "127.0.0.1:8084"
	DefaultSchema = "history"
	// DefaultMaintainInterval: partitions are checked hourly, so a new day's
	// partition exists days ahead and an expired day goes within the hour
	// after it expires.
	DefaultMaintainInterval = time.Hour
)

// Config is everything the history service is told at start.
type Config struct {
	config.Common
	APIKeys config.StringList
	// Keys says where the managed API keys come from.
	Keys               keyring.Config
	Schema             string
	ExecutionsExchange string
	Queue              string
	// Retention is how long executions are kept; whole days.
	Retention time.Duration
	// PartitionsAhead is how many days of partitions exist beyond today.
	PartitionsAhead int
	// MaintainInterval is how often partitions are created and dropped.
	MaintainInterval time.Duration
	// Ingest tuning.
	Workers  int
	Prefetch int
	Linger   time.Duration
	// TraceLinkTemplate turns trace ids into links in the API's trace_url
	// (see tracelink.Parse); empty: no links.
	TraceLinkTemplate string
}

// Register adds the history service's flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	service.RegisterFlags(fs, &c.Common, DefaultListen, &c.APIKeys, &c.Keys)
	fs.StringVar(&c.Schema, "schema", DefaultSchema, "PostgreSQL schema of the history's tables")
	fs.StringVar(&c.ExecutionsExchange, "executions-exchange", ingest.DefaultExchange, "exchange of execution lifecycle events")
	fs.StringVar(&c.Queue, "queue", ingest.DefaultQueue, "the history's own durable queue on the executions exchange")
	fs.DurationVar(&c.Retention, "retention", store.DefaultRetention, "how long executions are kept (whole days; older days' partitions are dropped)")
	fs.IntVar(&c.PartitionsAhead, "partitions-ahead", store.DefaultAhead, "days of partitions created ahead of today")
	fs.DurationVar(&c.MaintainInterval, "maintain-interval", DefaultMaintainInterval, "how often partitions are created ahead and expired ones dropped")
	fs.IntVar(&c.Workers, "ingest-workers", ingest.DefaultWorkers, "subscriptions of the ingest consumer: the most event messages in one write")
	fs.IntVar(&c.Prefetch, "ingest-prefetch", ingest.DefaultPrefetch, "AMQP prefetch of each ingest subscription")
	fs.DurationVar(&c.Linger, "ingest-linger", ingest.DefaultLinger, "how long a write batch waits to fill")
	fs.StringVar(&c.TraceLinkTemplate, "trace-link-template", "", "URL of a trace in a tracing UI with {trace_id} in place of the id, e.g. http://127.0.0.1:16686/trace/{trace_id} (Jaeger); fills the API's trace_url; empty: no links")
}

func (c Config) schema() string { return cmp.Or(c.Schema, DefaultSchema) }

func (c Config) database() service.Database {
	return service.Database{Schema: c.schema(), Migrations: store.Migrations}
}

// Migrate creates the database when missing and applies the schema's
// migrations; it is the `history migrate` subcommand and runs at every
// start.
func Migrate(ctx context.Context, cfg Config, logger *slog.Logger) error {
	return service.Migrate(ctx, cfg.PostgresURL, cfg.database(), logger)
}

// Option changes how New builds the service.
type Option func(*options)

type options struct{ clock clock.Clock }

// WithClock makes the service tell time by c (tests drive partitions and
// retention with a fake clock).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// App is a running history service.
type App struct {
	cfg        Config
	logger     *slog.Logger
	clock      clock.Clock
	svc        *service.Service
	store      *store.Store
	partitions prometheus.Gauge
	maintained chan struct{}
}

// New connects to PostgreSQL (applying migrations and creating the
// partitions) and builds every part. Nothing consumes or serves until Run.
func New(ctx context.Context, cfg Config, logger *slog.Logger, opts ...Option) (_ *App, err error) {
	// A job's AMQP target must never reach the history's topology (it
	// would forge executions).
	if err := targetcheck.CheckInternalNames(
		targetcheck.InternalName{Flag: "executions-exchange", Name: cfg.ExecutionsExchange},
		targetcheck.InternalName{Flag: "queue", Name: cfg.Queue},
	); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	traceLinks, err := tracelink.Parse(cfg.TraceLinkTemplate)
	if err != nil {
		return nil, fmt.Errorf("--trace-link-template (CRONMESH_TRACE_LINK_TEMPLATE): %w", err)
	}
	if cfg.MaintainInterval < 0 {
		return nil, errors.New("--maintain-interval must not be negative")
	}
	cfg.MaintainInterval = cmp.Or(cfg.MaintainInterval, DefaultMaintainInterval)
	db := cfg.database()
	// The configured keys, and the managed ones polled from the registry.
	svc, err := service.New(ctx, service.Options{
		Name: "history", Config: cfg.Common, Logger: logger,
		Keys: &cfg.Keys, APIKeys: cfg.APIKeys, Database: &db,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			svc.Close(context.Background())
		}
	}()
	a := &App{cfg: cfg, logger: logger, svc: svc, clock: cmp.Or[clock.Clock](o.clock, clock.Real{}), maintained: make(chan struct{}, 1)}
	a.store, err = store.New(store.Options{Pool: svc.Pool, Schema: cfg.schema(), Retention: cfg.Retention, Ahead: cfg.PartitionsAhead})
	if err != nil {
		return nil, err
	}
	a.partitions = prometheus.NewGauge(prometheus.GaugeOpts{Name: "history_partition_days", Help: "Days that have partitions (retention plus the days ahead)."})
	if err := svc.Metrics.Register(a.partitions); err != nil {
		return nil, err
	}
	if err := a.maintain(ctx); err != nil {
		return nil, err
	}
	consumer, err := ingest.New(ingest.Options{
		AMQPURL: cfg.AMQPURL, Store: a.store, Exchange: cfg.ExecutionsExchange, Queue: cfg.Queue,
		Workers: cfg.Workers, Prefetch: cfg.Prefetch, Linger: cfg.Linger,
		Clock: a.clock, TracerProvider: svc.Telemetry.TracerProvider, Propagator: svc.Telemetry.Propagator,
		Metrics: svc.Metrics, Logger: logger.With(slog.String("component", "ingest")),
	})
	if err != nil {
		return nil, err
	}
	handler, err := api.NewHandler(api.Options{Store: a.store, Clock: a.clock, Logger: logger.With(slog.String("component", "api")), TraceLinks: traceLinks})
	if err != nil {
		return nil, err
	}
	path, h := historyv1connect.NewHistoryServiceHandler(handler, svc.HandlerOptions()...)
	svc.Server.Handle(historyv1connect.HistoryServiceName, path, h)
	// The consumer writes the batch in hand and acks it while the server
	// finishes its calls; the service is ready once it is subscribed.
	svc.WithServer(
		lifecycle.Part{Name: "ingest", Run: consumer.Run, Ready: consumer.Ready()},
		lifecycle.Part{Name: "partition maintenance", Run: a.maintainLoop},
	)
	return a, nil
}

// Server is the API server.
func (a *App) Server() *server.Server { return a.svc.Server }

// Store is the history store (tests and the benchmark read it directly).
func (a *App) Store() *store.Store { return a.store }

// Maintained receives after each partition maintenance run of Run's loop
// (tests that drive the clock wait on it instead of sleeping).
func (a *App) Maintained() <-chan struct{} { return a.maintained }

// Run consumes and serves until ctx is done. Readiness (grpc.health.v1
// SERVING) waits until the consumer is subscribed. Shutdown: the API stops
// taking calls and finishes its own while the consumer writes the batch in
// hand and acks it; then the connections close.
func (a *App) Run(ctx context.Context) error { return a.svc.Run(ctx) }

// maintain creates the partitions ahead and drops the expired ones.
func (a *App) maintain(ctx context.Context) error {
	res, err := a.store.Maintain(ctx, a.clock.Now())
	if err != nil {
		return err
	}
	a.partitions.Set(float64(res.Days))
	for _, d := range res.Dropped {
		a.logger.Info("dropped an expired day of history", slog.String("day", d.Format(time.DateOnly)))
	}
	return nil
}

// Serve builds the app from cfg and runs it until ctx is done: the binary's
// serve command (libs/servicemain).
func Serve(ctx context.Context, cfg Config, logger *slog.Logger) error {
	a, err := New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// maintainLoop runs maintain every MaintainInterval on the clock until ctx
// is done; a failure is logged and tried again next time (the days ahead
// leave room).
func (a *App) maintainLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.clock.After(a.cfg.MaintainInterval):
		}
		if err := a.maintain(ctx); err != nil && ctx.Err() == nil {
			a.logger.Warn("partition maintenance failed", slog.Any("error", err))
		}
		select {
		case a.maintained <- struct{}{}:
		default:
		}
	}
}
