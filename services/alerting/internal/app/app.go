// Package app wires the alerting service: configuration, the database, the
// AlertService API, the event consumers, the evaluator, the watchdog and the
// notification sender.
package app

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/lifecycle"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/service"
	"github.com/cronmesh/cronmesh/libs/ssrfguard"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
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
	// DefaultEventsBatch execution event messages are evaluated in one
	// transaction at most: the dispatcher publishes an attempt's STARTED
	// and its outcome in two messages, and evaluated together they write
	// the job's row once.
	DefaultEventsBatch = 32
	// DefaultEventsLinger is how long a batch of execution event messages
	// waits for more: long enough to catch the outcome of an attempt whose
	// target answers at once, short beside the seconds an incident may take.
	DefaultEventsLinger = 50 * time.Millisecond
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
	// Workers is how many batches of execution event messages are
	// evaluated concurrently; EventsBatch the most messages in a batch
	// (each held by its own subscription until its batch commits), and
	// EventsLinger how long a batch waits for more.
	Workers, EventsBatch int
	EventsLinger         time.Duration
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
	service.RegisterFlags(fs, &c.Common, DefaultListen, &c.APIKeys, &c.Keys)
	fs.StringVar(&c.Schema, "schema", DefaultSchema, "PostgreSQL schema of the alerting tables")
	fs.DurationVar(&c.SendTimeout, "send-timeout", notify.DefaultTimeout, "bound on one notification delivery attempt (webhook request or SMTP session)")
	fs.Var(&c.AllowNetworks, "allow-networks", "comma-separated CIDRs that webhook channels and SMTP hosts may resolve to although loopback, private or link-local (e.g. 127.0.0.0/8,::1/128 for development)")
	fs.StringVar(&c.ExecutionsExchange, "executions-exchange", DefaultExecutionsExchange, "RabbitMQ topic exchange of execution lifecycle events")
	fs.StringVar(&c.ExecutionsQueue, "executions-queue", DefaultExecutionsQueue, "alerting's durable queue of execution events")
	fs.StringVar(&c.JobsExchange, "jobs-exchange", DefaultJobsExchange, "RabbitMQ topic exchange of the registry's job events")
	fs.StringVar(&c.JobsQueue, "jobs-queue", DefaultJobsQueue, "alerting's durable queue of job events")
	fs.IntVar(&c.Workers, "workers", 2, "batches of execution event messages evaluated concurrently")
	fs.IntVar(&c.EventsBatch, "events-batch", DefaultEventsBatch, "most execution event messages evaluated in one transaction")
	fs.DurationVar(&c.EventsLinger, "events-linger", DefaultEventsLinger, "how long a batch of execution event messages waits to fill")
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

func (c Config) database() service.Database {
	return service.Database{Schema: c.schema(), Migrations: store.Migrations}
}

// Migrate creates the database when missing and applies the schema's
// migrations; it is the `alerting migrate` subcommand and runs at every
// start.
func Migrate(ctx context.Context, cfg Config, logger *slog.Logger) error {
	return service.Migrate(ctx, cfg.PostgresURL, cfg.database(), logger)
}

// App is a running alerting service.
type App struct {
	svc   *service.Service
	store *store.Store
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
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	db := cfg.database()
	// The configured keys, and the managed ones polled from the registry.
	svc, err := service.New(ctx, service.Options{
		Name: "alerting", Config: cfg.Common, Logger: logger,
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
	a := &App{svc: svc}
	a.store = store.New(store.Options{Pool: svc.Pool, Now: cfg.Clock.Now})
	allowed, err := ssrfguard.ParseNetworks(cfg.AllowNetworks)
	if err != nil {
		return nil, fmt.Errorf("--allow-networks: %w", err)
	}
	sender := notify.NewSender(notify.SenderOptions{Timeout: cfg.SendTimeout, Clock: cfg.Clock, AllowedNetworks: allowed})
	notifier, err := notify.NewLoop(notify.LoopOptions{
		Store: a.store, Sender: sender, Clock: cfg.Clock, Poll: cfg.NotifyPoll,
		Backoff: cfg.NotifyBackoff, MaxBackoff: cfg.NotifyMaxBackoff, Metrics: svc.Metrics,
		Logger: logger.With(slog.String("component", "notify")),
	})
	if err != nil {
		return nil, err
	}
	executionsExchange := cmp.Or(cfg.ExecutionsExchange, DefaultExecutionsExchange)
	executionsQueue := cmp.Or(cfg.ExecutionsQueue, DefaultExecutionsQueue)
	evaluator, err := evaluate.New(evaluate.Options{
		Store: a.store, Clock: cfg.Clock, Refresh: cfg.RuleRefresh, Queued: notifier.Notify, Metrics: svc.Metrics,
		Logger:         logger.With(slog.String("component", "evaluate")),
		TracerProvider: svc.Telemetry.TracerProvider, Propagator: svc.Telemetry.Propagator,
		Exchange: executionsExchange, Queue: executionsQueue,
	})
	if err != nil {
		return nil, err
	}
	eventsBatch := cmp.Or(cfg.EventsBatch, DefaultEventsBatch)
	executions, err := broker.NewConsumer(broker.ConsumerOptions{
		Name: "executions", Handle: evaluator.Handle, AMQPURL: cfg.AMQPURL,
		Exchange: executionsExchange, Queue: executionsQueue, BindingKey: "execution.#",
		QueueArguments: map[string]any{"x-delivery-limit": broker.NoDeliveryLimit},
		Subscriptions:  eventsBatch, MaxBatch: eventsBatch, Batches: cmp.Or(cfg.Workers, 2), Prefetch: cfg.Prefetch,
		Linger:         cmp.Or(cfg.EventsLinger, DefaultEventsLinger),
		TracerProvider: svc.Telemetry.TracerProvider, Propagator: svc.Telemetry.Propagator, Logger: logger,
		// The real clock, as for the job events below: it paces only the
		// linger and the retry backoff.
		Clock: clock.Real{},
	})
	if err != nil {
		return nil, err
	}
	dog, err := watchdog.New(watchdog.Options{
		Store: a.store, Rules: evaluator.Rules, Clock: cfg.Clock, Interval: cfg.WatchdogInterval,
		Queued: notifier.Notify, Metrics: svc.Metrics, Logger: logger.With(slog.String("component", "watchdog")),
	})
	if err != nil {
		return nil, err
	}
	jobs, err := broker.NewConsumer(broker.ConsumerOptions{
		Name: "jobs", Handle: dog.HandleJobEvents, AMQPURL: cfg.AMQPURL,
		Exchange: cmp.Or(cfg.JobsExchange, DefaultJobsExchange), Queue: cmp.Or(cfg.JobsQueue, DefaultJobsQueue), BindingKey: "job.#",
		QueueArguments: map[string]any{"x-delivery-limit": broker.NoDeliveryLimit},
		Subscriptions:  cmp.Or(cfg.JobsWorkers, DefaultJobsWorkers), MaxBatch: cmp.Or(cfg.JobsBatch, DefaultJobsBatch), Prefetch: cfg.Prefetch,
		TracerProvider: svc.Telemetry.TracerProvider, Propagator: svc.Telemetry.Propagator, Logger: logger,
		// The real clock: this consumer's clock paces only the batches'
		// linger and the retry backoff, and a test's fake clock (which
		// the watchdog's decisions follow, through the watchdog's own
		// Clock) would hold every batch until the test moved it.
		Clock: clock.Real{},
	})
	if err != nil {
		return nil, err
	}

	path, handler := alertingv1connect.NewAlertServiceHandler(api.NewHandler(a.store, sender, evaluator.Invalidate, logger), svc.HandlerOptions()...)
	svc.Server.Handle(alertingv1connect.AlertServiceName, path, handler)

	// Once the server drained its calls, the consumers finish the messages
	// under way (unacknowledged ones return to the queue), together: each
	// may wait up to broker.CloseTimeout for an unreachable broker, and one
	// after the other they would add up. Then the watchdog finishes its
	// pass and the sender its attempts. The service is ready once every
	// consumer is subscribed.
	svc.ThenStop(
		lifecycle.Part{Name: "executions consumer", Run: executions.Run, Ready: executions.Ready()},
		lifecycle.Part{Name: "jobs consumer", Run: jobs.Run, Ready: jobs.Ready()},
	)
	svc.ThenStop(lifecycle.Part{Name: "watchdog", Run: dog.Run})
	svc.ThenStop(lifecycle.Part{Name: "notifier", Run: notifier.Run})
	return a, nil
}

// Server is the App's server (for its address in tests).
func (a *App) Server() *server.Server { return a.svc.Server }

// Pool is the App's database pool.
func (a *App) Pool() *pgxpool.Pool { return a.svc.Pool }

// Run consumes, evaluates, sends and serves until ctx is done, then shuts
// down in order: the server drains in-flight calls, the consumers finish
// the messages under way (unacknowledged ones return to the queue), the
// watchdog its pass, the sender its attempts, then the connections close
// and spans are flushed. The health check reports SERVING once every
// consumer is subscribed.
func (a *App) Run(ctx context.Context) error { return a.svc.Run(ctx) }

// Serve builds the app from cfg and runs it until ctx is done: the binary's
// serve command (libs/servicemain).
func Serve(ctx context.Context, cfg Config, logger *slog.Logger) error {
	a, err := New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// Ready is closed once the server listens and every consumer is subscribed.
func (a *App) Ready() <-chan struct{} { return a.svc.Ready() }

// Store is the App's store.
func (a *App) Store() *store.Store { return a.store }
