// Package app wires the alerting service: configuration, the database, the
// AlertService API, the event consumers, the evaluator, the watchdog and the
// notification sender.
package app

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	"github.com/cronmesh/cronmesh/libs/audit"
	"github.com/cronmesh/cronmesh/libs/authz"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/ssrfguard"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/services/alerting/internal/api"
	"github.com/cronmesh/cronmesh/services/alerting/internal/evaluate"
	"github.com/cronmesh/cronmesh/services/alerting/internal/notify"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
	"github.com/cronmesh/cronmesh/services/alerting/internal/watchdog"
)

// Defaults of the alerting service.
const (
	DefaultListen             = "127.0.0.1:8085"
	DefaultSchema             = "alerting"
	DefaultExecutionsExchange = "cronmesh.executions"
	DefaultExecutionsQueue    = "cronmesh.alerting.executions"
	DefaultJobsExchange       = "cronmesh.jobs"
	DefaultJobsQueue          = "cronmesh.alerting.jobs"
	// DefaultJobsWorkers subscriptions fill the job event batches (a
	// subscription holds one message until its batch commits).
	DefaultJobsWorkers = 128
	// DefaultJobsBatch job events in one transaction amortise its round
	// trips and commit in a few tens of milliseconds.
	DefaultJobsBatch = 128
)

// Config is everything the alerting service is told at start.
type Config struct {
	config.Common
	// APIKeys are "namespace=key" or "namespace=sha256:<hex>" entries.
	APIKeys config.StringList
	// Keys says where the managed API keys come from.
	Keys keyring.Config
	// Schema is the PostgreSQL schema of the alerting tables.
	Schema string
	// SendTimeout bounds one delivery attempt of a notification.
	SendTimeout time.Duration
	// AllowNetworks are CIDRs webhook channels and SMTP hosts may resolve to although
	// loopback, private or link-local (the SSRF guard, as the dispatcher's).
	AllowNetworks config.StringList
	// ExecutionsExchange and ExecutionsQueue: the lifecycle events and
	// alerting's own durable queue bound to every one ("execution.#").
	ExecutionsExchange, ExecutionsQueue string
	// JobsExchange and JobsQueue: the registry's job events and alerting's
	// own durable queue bound to "job.#".
	JobsExchange, JobsQueue string
	// Workers is how many execution event messages are evaluated
	// concurrently.
	Workers int
	// JobsWorkers is how many subscriptions of the job event queue are
	// held, each with one message in hand, and JobsBatch the most job
	// events applied in one transaction (at most JobsWorkers).
	JobsWorkers, JobsBatch int
	// Prefetch is the AMQP prefetch of each worker.
	Prefetch int
	// NotifyPoll, NotifyBackoff and NotifyMaxBackoff pace the notification
	// sender: how often it looks for due notifications, and the backoff of
	// a channel that fails.
	NotifyPoll, NotifyBackoff, NotifyMaxBackoff time.Duration
	// RuleRefresh bounds how stale the evaluator's rules may be.
	RuleRefresh time.Duration
	// WatchdogInterval is how often the watchdog looks for overdue slots.
	WatchdogInterval time.Duration
	// Clock is the time source of the loops (tests drive it). Not a flag:
	// nil means the real clock.
	Clock clock.Clock
}

// Register adds the alerting flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	// This API's requests are small: see server.SmallAPIMaxRequestBytes.
	c.Limits.MaxRequestBytes = server.SmallAPIMaxRequestBytes
	c.Common.Register(fs, DefaultListen)
	fs.Var(&c.APIKeys, "api-keys", "comma-separated API keys, each namespace=key or namespace=sha256:<hex digest of the key>, admin of the namespace; namespace:editor=... or namespace:viewer=... for a lesser role")
	c.Keys.Register(fs)
	fs.StringVar(&c.Schema, "schema", DefaultSchema, "PostgreSQL schema of the alerting tables")
	fs.DurationVar(&c.SendTimeout, "send-timeout", notify.DefaultTimeout, "bound on one notification delivery attempt (webhook request or SMTP session)")
	fs.Var(&c.AllowNetworks, "allow-networks", "comma-separated CIDRs that webhook channels and SMTP hosts may resolve to although loopback, private or link-local (e.g. 127.0.0.0/8,::1/128 for development)")
	fs.StringVar(&c.ExecutionsExchange, "executions-exchange", DefaultExecutionsExchange, "RabbitMQ topic exchange of execution lifecycle events")
	fs.StringVar(&c.ExecutionsQueue, "executions-queue", DefaultExecutionsQueue, "alerting's durable queue of execution events")
	fs.StringVar(&c.JobsExchange, "jobs-exchange", DefaultJobsExchange, "RabbitMQ topic exchange of the registry's job events")
	fs.StringVar(&c.JobsQueue, "jobs-queue", DefaultJobsQueue, "alerting's durable queue of job events")
	fs.IntVar(&c.Workers, "workers", 2, "execution event messages evaluated concurrently")
	fs.IntVar(&c.JobsWorkers, "jobs-workers", DefaultJobsWorkers, "subscriptions of the job event queue, each holding one message while its batch gathers")
	fs.IntVar(&c.JobsBatch, "jobs-batch", DefaultJobsBatch, "most job events applied in one transaction (at most --jobs-workers)")
	fs.IntVar(&c.Prefetch, "prefetch", 8, "AMQP prefetch per worker")
	fs.DurationVar(&c.NotifyPoll, "notify-poll", notify.DefaultPoll, "how often the sender looks for due notifications")
	fs.DurationVar(&c.NotifyBackoff, "notify-backoff", notify.DefaultBackoff, "wait after a notification's first failed attempt (doubles per attempt)")
	fs.DurationVar(&c.NotifyMaxBackoff, "notify-max-backoff", notify.DefaultMaxBackoff, "longest wait between attempts of a notification")
	fs.DurationVar(&c.WatchdogInterval, "watchdog-interval", watchdog.DefaultInterval, "how often the missed-schedule watchdog looks for overdue slots")
	fs.DurationVar(&c.RuleRefresh, "rule-refresh", evaluate.DefaultRefresh, "how stale the evaluator's copy of the rules may get (changes through this replica apply at once)")
}

func (c Config) schema() string { return cmp.Or(c.Schema, DefaultSchema) }

// Migrate creates the database when missing and applies the schema's
// migrations; it is the `alerting migrate` subcommand and runs at every
// start.
func Migrate(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if err := postgres.EnsureDatabase(ctx, cfg.PostgresURL); err != nil {
		return err
	}
	pool, err := postgres.Connect(ctx, postgres.Options{URL: cfg.PostgresURL, Schema: cfg.schema()})
	if err != nil {
		return err
	}
	defer pool.Close()
	return applyMigrations(ctx, pool, cfg.schema(), logger)
}

func applyMigrations(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) error {
	migrations, err := store.Migrations()
	if err != nil {
		return err
	}
	migrations = append(migrations, audit.Migration())
	applied, err := migrate.ApplyAll(ctx, pool, schema, migrations)
	if err != nil {
		return fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	logger.Info("migrations applied", slog.String("schema", schema), slog.Any("versions", applied))
	return nil
}

// App is a running alerting service.
type App struct {
	cfg       Config
	logger    *slog.Logger
	telemetry *telemetry.Telemetry
	server    *server.Server
	keys      *keyring.Ring
	pool      *pgxpool.Pool
	store     *store.Store
	evaluator *evaluate.Evaluator
	notifier  *notify.Loop
	watchdog  *watchdog.Watchdog
	consumers []*broker.Consumer
	closeOnce sync.Once
}

// New connects to PostgreSQL, applies migrations and builds the parts.
// Nothing serves until Run.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (_ *App, err error) {
	// A job's AMQP target must never reach alerting's topology (it would
	// forge executions or jobs).
	if err := targetcheck.CheckInternalNames(
		targetcheck.InternalName{Flag: "executions-exchange", Name: cfg.ExecutionsExchange},
		targetcheck.InternalName{Flag: "executions-queue", Name: cfg.ExecutionsQueue},
		targetcheck.InternalName{Flag: "jobs-exchange", Name: cfg.JobsExchange},
		targetcheck.InternalName{Flag: "jobs-queue", Name: cfg.JobsQueue},
	); err != nil {
		return nil, err
	}
	// The configured keys, and the managed ones polled from the registry.
	registryClient, err := cfg.Keys.HTTPClient()
	if err != nil {
		return nil, err
	}
	keys, err := cfg.Keys.NewRegistryRing(cfg.APIKeys, registryClient, logger.With(slog.String("component", "keyring")), nil)
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	a := &App{cfg: cfg, logger: logger}
	defer func() {
		if err != nil {
			a.close(context.Background())
		}
	}()
	a.telemetry, err = telemetry.Setup(ctx, telemetry.Options{ServiceName: "alerting", OTLPEndpoint: cfg.OTLPEndpoint, Logger: logger})
	if err != nil {
		return nil, err
	}
	a.keys = keys
	if err := keys.RegisterMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"service": "alerting"}, a.telemetry.Metrics)); err != nil {
		return nil, err
	}
	if err := postgres.EnsureDatabase(ctx, cfg.PostgresURL); err != nil {
		return nil, err
	}
	a.pool, err = postgres.Connect(ctx, postgres.Options{
		URL: cfg.PostgresURL, Schema: cfg.schema(), TracerProvider: a.telemetry.TracerProvider,
	})
	if err != nil {
		return nil, err
	}
	if err := applyMigrations(ctx, a.pool, cfg.schema(), logger); err != nil {
		return nil, err
	}
	a.store = store.New(store.Options{Pool: a.pool, Now: cfg.Clock.Now})
	allowed, err := ssrfguard.ParseNetworks(cfg.AllowNetworks)
	if err != nil {
		return nil, fmt.Errorf("--allow-networks: %w", err)
	}
	sender := notify.NewSender(notify.SenderOptions{Timeout: cfg.SendTimeout, Clock: cfg.Clock, AllowedNetworks: allowed})
	metrics := prometheus.WrapRegistererWith(prometheus.Labels{"service": "alerting"}, a.telemetry.Metrics)
	a.notifier, err = notify.NewLoop(notify.LoopOptions{
		Store: a.store, Sender: sender, Clock: cfg.Clock, Poll: cfg.NotifyPoll,
		Backoff: cfg.NotifyBackoff, MaxBackoff: cfg.NotifyMaxBackoff, Metrics: metrics,
		Logger: logger.With(slog.String("component", "notify")),
	})
	if err != nil {
		return nil, err
	}
	executionsExchange := cmp.Or(cfg.ExecutionsExchange, DefaultExecutionsExchange)
	executionsQueue := cmp.Or(cfg.ExecutionsQueue, DefaultExecutionsQueue)
	a.evaluator, err = evaluate.New(evaluate.Options{
		Store: a.store, Clock: cfg.Clock, Refresh: cfg.RuleRefresh, Queued: a.notifier.Notify, Metrics: metrics,
		Logger:         logger.With(slog.String("component", "evaluate")),
		TracerProvider: a.telemetry.TracerProvider, Propagator: a.telemetry.Propagator,
		Exchange: executionsExchange, Queue: executionsQueue,
	})
	if err != nil {
		return nil, err
	}
	workers := cmp.Or(cfg.Workers, 2)
	executions, err := broker.NewConsumer(broker.ConsumerOptions{
		Name: "executions", Handle: broker.EachMessage(a.evaluator.Handle), AMQPURL: cfg.AMQPURL,
		Exchange: executionsExchange, Queue: executionsQueue, BindingKey: "execution.#",
		QueueArguments: map[string]any{"x-delivery-limit": broker.NoDeliveryLimit},
		Subscriptions:  workers, MaxBatch: 1, Batches: workers, Prefetch: cfg.Prefetch,
		TracerProvider: a.telemetry.TracerProvider, Propagator: a.telemetry.Propagator, Logger: logger, Clock: cfg.Clock,
	})
	if err != nil {
		return nil, err
	}
	a.watchdog, err = watchdog.New(watchdog.Options{
		Store: a.store, Rules: a.evaluator.Rules, Clock: cfg.Clock, Interval: cfg.WatchdogInterval,
		Queued: a.notifier.Notify, Metrics: metrics, Logger: logger.With(slog.String("component", "watchdog")),
	})
	if err != nil {
		return nil, err
	}
	jobs, err := broker.NewConsumer(broker.ConsumerOptions{
		Name: "jobs", Handle: a.watchdog.HandleJobEvents, AMQPURL: cfg.AMQPURL,
		Exchange: cmp.Or(cfg.JobsExchange, DefaultJobsExchange), Queue: cmp.Or(cfg.JobsQueue, DefaultJobsQueue), BindingKey: "job.#",
		QueueArguments: map[string]any{"x-delivery-limit": broker.NoDeliveryLimit},
		Subscriptions:  cmp.Or(cfg.JobsWorkers, DefaultJobsWorkers), MaxBatch: cmp.Or(cfg.JobsBatch, DefaultJobsBatch), Prefetch: cfg.Prefetch,
		TracerProvider: a.telemetry.TracerProvider, Propagator: a.telemetry.Propagator, Logger: logger,
		// The real clock: this consumer's clock paces only the batches'
		// linger and the retry backoff, and a test's fake clock (which
		// the watchdog's decisions follow, through the watchdog's own
		// Clock) would hold every batch until the test moved it.
		Clock: clock.Real{},
	})
	if err != nil {
		return nil, err
	}
	a.consumers = append(a.consumers, executions, jobs)

	a.server, err = server.New(server.Options{
		Name: "alerting", Listen: cfg.Listen, Logger: logger, Telemetry: a.telemetry, ShutdownTimeout: cfg.ShutdownTimeout, Profiling: cfg.Pprof,
		RateLimit: cfg.RateLimit,
		TLS:       cfg.TLS,
		Limits:    cfg.Limits,
	})
	if err != nil {
		return nil, err
	}
	a.server.UseMiddleware(keys.Middleware().Wrap)
	auditLog := audit.New(audit.Options{Pool: a.pool, Logger: logger, Retention: cfg.AuditRetention})
	auditLog.Mount(a.server)
	path, handler := alertingv1connect.NewAlertServiceHandler(api.NewHandler(a.store, sender, a.evaluator.Invalidate, logger), a.server.HandlerOptions(auditLog.Interceptor(), authz.NewInterceptor())...)
	a.server.Handle(alertingv1connect.AlertServiceName, path, handler)
	return a, nil
}

// Server is the App's server (for its address in tests).
func (a *App) Server() *server.Server { return a.server }

// Pool is the App's database pool.
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// Run consumes, evaluates, sends and serves until ctx is done, then shuts
// down in order: the server drains in-flight calls, the consumers finish
// the messages under way (unacknowledged ones return to the queue), the
// sender finishes its attempts, then spans are flushed. The health check
// reports SERVING once every consumer is subscribed.
func (a *App) Run(ctx context.Context) error {
	bg := context.WithoutCancel(ctx)
	consumeCtx, stopConsuming := context.WithCancel(bg)
	defer stopConsuming()
	consumeErrs := make(chan error, len(a.consumers))
	var consumersStopped sync.WaitGroup
	for _, c := range a.consumers {
		consumersStopped.Go(func() { consumeErrs <- c.Run(consumeCtx) })
	}
	if err := a.notifier.Start(bg); err != nil {
		return err
	}
	if err := a.watchdog.Start(bg); err != nil {
		return err
	}
	keysDone := make(chan error, 1)
	go func() { keysDone <- a.keys.Run(bg) }()
	go func() {
		for _, c := range a.consumers {
			select {
			case <-c.Ready():
			case <-ctx.Done():
				return
			}
		}
		a.server.SetServing(true)
	}()
	serveErr := a.server.Run(ctx)
	// Together: each may wait up to broker.CloseTimeout for an unreachable
	// broker, and one after the other they would add up.
	stopConsuming()
	consumersStopped.Wait()
	close(consumeErrs)
	for err := range consumeErrs {
		serveErr = errors.Join(serveErr, err)
	}
	a.watchdog.Stop()
	a.notifier.Stop()
	a.keys.Stop()
	keysErr := <-keysDone
	a.close(bg)
	return errors.Join(serveErr, keysErr)
}

// Ready is closed once every consumer is subscribed.
func (a *App) Ready() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for _, c := range a.consumers {
			<-c.Ready()
		}
		close(ch)
	}()
	return ch
}

// Store is the App's store.
func (a *App) Store() *store.Store { return a.store }

func (a *App) close(ctx context.Context) {
	a.closeOnce.Do(func() {
		if a.pool != nil {
			if err := postgres.Close(ctx, a.pool); err != nil {
				a.logger.Warn("closing the database pool", slog.Any("error", err))
			}
		}
		if a.telemetry != nil {
			if err := a.telemetry.Shutdown(ctx); err != nil {
				a.logger.Warn("flushing telemetry", slog.Any("error", err))
			}
		}
	})
}
