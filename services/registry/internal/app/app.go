package app

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/lifecycle"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/service"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
	"github.com/cronmesh/cronmesh/services/registry/internal/api"
	"github.com/cronmesh/cronmesh/services/registry/internal/failpause"
	"github.com/cronmesh/cronmesh/services/registry/internal/history"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
)

// Defaults of the registry.
const (
	DefaultListen   = "127.0.0.1:8081"
	DefaultSchema   = "registry"
	DefaultExchange = "cronmesh.jobs"
	// DefaultExecutionsExchange is where the dispatcher publishes execution
	// events; DefaultFailuresQueue is the registry's queue of them, for the
	// pause on failure.
	DefaultExecutionsExchange = "cronmesh.executions"
	DefaultFailuresQueue      = "cronmesh.registry.executions"
	// DefaultMaxJobs is the most jobs a namespace may hold unless
	// --max-jobs or --max-jobs-namespaces say otherwise.
	DefaultMaxJobs = 10_000
)

// outboxLockKey is the advisory lock that elects one relay among the
// registry replicas. Advisory locks are database-wide, so the key is derived
// from the schema: registries of different schemas in one database (tests
// run in parallel, staging beside production) each elect their own relay.
func outboxLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("cronmesh.registry.outbox/" + schema))
	return int64(h.Sum64())
}

// Config is everything the registry is told at start.
type Config struct {
	config.Common
	// APIKeys are "namespace=key" or "namespace=sha256:<hex>" entries.
	APIKeys config.StringList
	// Schema is the PostgreSQL schema of the registry's tables.
	Schema string
	// Exchange is the topic exchange job events are published to.
	Exchange string
	// OutboxLanes is the most lanes the relay publishes a cycle in at once.
	OutboxLanes int
	// ExecutionsExchange and ExecutionsQueue: the execution events and the
	// registry's durable queue of them, from which it counts dead letters
	// for Job.pause_after_dead_letters.
	ExecutionsExchange, ExecutionsQueue string
	// PauseOnFailure turns the consumer of execution events on; off, no
	// job is paused for pause_after_dead_letters.
	PauseOnFailure bool
	// MaxJobs caps the jobs of each namespace (--max-jobs,
	// --max-jobs-namespaces); 0 means no cap, the zero value caps nothing.
	MaxJobs quota.Limits
	// Keys paces the refresh of the managed API keys (only Refresh is
	// used: the registry reads them from its own database).
	Keys keyring.Config
	// TargetAMQPAllow gives namespaces AMQP names outside their own
	// "<namespace>." prefix: "namespace=name" or "namespace=prefix*"
	// entries (targetcheck.ParseAllowList). The dispatcher must be given
	// the same list.
	TargetAMQPAllow config.StringList
	// HistoryURL is the history service's base URL, from which
	// RerunExecution reads the execution it re-runs (--history-url). Empty:
	// RerunExecution answers UNIMPLEMENTED, everything else works.
	HistoryURL string
	// HistoryTLS is how an https HistoryURL is trusted, and the client
	// certificate shown when the history asks for one
	// (--history-ca-file, --history-client-cert, --history-client-key).
	HistoryTLS tlsconfig.Client
}

// Register adds the registry's flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	c.Common.Register(fs, DefaultListen)
	keyring.RegisterAPIKeys(fs, &c.APIKeys)
	fs.StringVar(&c.Schema, "schema", DefaultSchema, "PostgreSQL schema of the registry's tables")
	fs.StringVar(&c.Exchange, "exchange", DefaultExchange, "RabbitMQ topic exchange for job events")
	fs.IntVar(&c.OutboxLanes, "outbox-lanes", 16, "most lanes the outbox relay publishes a cycle in at once, one per 64 of its events (order per job is kept)")
	fs.StringVar(&c.ExecutionsExchange, "executions-exchange", DefaultExecutionsExchange, "RabbitMQ topic exchange of execution lifecycle events (for pause_after_dead_letters)")
	fs.StringVar(&c.ExecutionsQueue, "executions-queue", DefaultFailuresQueue, "the registry's durable queue of execution events")
	fs.BoolVar(&c.PauseOnFailure, "pause-on-failure", true, "consume execution events to pause jobs after pause_after_dead_letters dead letters in a row (off: the option is stored but never acted on)")
	fs.IntVar(&c.MaxJobs.Default, "max-jobs", DefaultMaxJobs, "most jobs a namespace may hold (0: no limit); creates beyond are refused with RESOURCE_EXHAUSTED")
	fs.Var(&c.MaxJobs.Namespaces, "max-jobs-namespaces", "per-namespace overrides of --max-jobs, comma separated, each namespace=N (0: no limit)")
	c.Keys.RegisterRefresh(fs)
	fs.StringVar(&c.HistoryURL, "history-url", "", "base URL of the history service, for RerunExecution (empty: RerunExecution answers UNIMPLEMENTED)")
	fs.StringVar(&c.HistoryTLS.CAFile, "history-ca-file", "", "PEM CA certificates an https --history-url must chain to (default: the system's)")
	fs.StringVar(&c.HistoryTLS.CertFile, "history-client-cert", "", "PEM client certificate for a history service that requires one (mutual TLS)")
	fs.StringVar(&c.HistoryTLS.KeyFile, "history-client-key", "", "PEM key of --history-client-cert")
	fs.Var(&c.TargetAMQPAllow, "target-amqp-allow", "comma-separated namespace=name or namespace=prefix* entries: AMQP names a namespace's targets may publish to besides its own <namespace>.* (same list as the dispatcher's)")
}

// amqpPolicy is where AMQP targets may publish: the allow-list, and never
// to the job events exchange.
func (c *Config) amqpPolicy() (*targetcheck.AMQPPolicy, error) {
	allow, err := targetcheck.ParseAllowList(c.TargetAMQPAllow)
	if err != nil {
		return nil, fmt.Errorf("--target-amqp-allow: %w", err)
	}
	return targetcheck.NewAMQPPolicy(targetcheck.AMQPPolicyOptions{
		Internal: []targetcheck.InternalName{
			{Flag: "exchange", Name: cmp.Or(c.Exchange, DefaultExchange)},
			{Flag: "executions-exchange", Name: cmp.Or(c.ExecutionsExchange, DefaultExecutionsExchange)},
			{Flag: "executions-queue", Name: cmp.Or(c.ExecutionsQueue, DefaultFailuresQueue)},
		},
		Allow: allow,
	})
}

// Migrate creates the database when missing and applies the schema's
// migrations; it is the `registry migrate` subcommand and runs at every start.
func Migrate(ctx context.Context, cfg Config, logger *slog.Logger) error {
	return service.Migrate(ctx, cfg.PostgresURL, cfg.database(), logger)
}

func (c Config) schema() string { return cmp.Or(c.Schema, DefaultSchema) }

func (c Config) database() service.Database {
	return service.Database{Schema: c.schema(), Migrations: store.Migrations}
}

// App is a running registry.
type App struct {
	svc      *service.Service
	failures *failpause.Consumer
}

// New connects to PostgreSQL, applies migrations and builds the server and
// the relay. Nothing serves until Run. The broker may be down: the relay
// connects lazily and retries, and writes are accepted meanwhile.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (_ *App, err error) {
	configured, err := keyring.ParseConfigured(cfg.APIKeys)
	if err != nil {
		return nil, err
	}
	if err := cfg.MaxJobs.Validate("max-jobs"); err != nil {
		return nil, err
	}
	amqpPolicy, err := cfg.amqpPolicy()
	if err != nil {
		return nil, err
	}
	db := cfg.database()
	svc, err := service.New(ctx, service.Options{Name: "registry", Config: cfg.Common, Logger: logger, Database: &db})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			svc.Close(context.Background())
		}
	}()
	a := &App{svc: svc}
	exchange := cmp.Or(cfg.Exchange, DefaultExchange)
	publisher, err := broker.NewPublisher(broker.PublisherOptions{
		Config: broker.TopicPublisherConfig(cfg.AMQPURL, exchange, cfg.OutboxLanes),
		Logger: logger.With(slog.String("component", "publisher")),
	})
	if err != nil {
		return nil, err
	}
	svc.OnClose("publisher", func(context.Context) error { return publisher.Close() })
	relay, err := outbox.NewRelay(outbox.RelayOptions{
		Pool:      svc.Pool,
		Publisher: publisher,
		Logger:    logger.With(slog.String("component", "outbox")),
		// A stop drains for up to twice this (confirms, then the
		// DELETE): a quarter of the shutdown timeout each leaves the rest
		// of the shutdown half of it, with a broker that swallows
		// confirms. What does not make it is published again.
		DrainTimeout: cfg.ShutdownTimeout / 4,
		Metrics:      svc.Metrics,
		Lanes:        cfg.OutboxLanes,
		LockKey:      outboxLockKey(cfg.schema()),
		// A job event's row carries the trace of the RPC that changed the
		// job: its publish is a span of that trace.
		TracerProvider: svc.Telemetry.TracerProvider,
		Propagator:     svc.Telemetry.Propagator,
		Destination:    func(key string) (string, string) { return exchange, key },
	})
	if err != nil {
		return nil, err
	}
	refusals, err := quota.NewRefusals(svc.Telemetry.Metrics)
	if err != nil {
		return nil, err
	}
	st := store.New(store.Options{
		Pool: svc.Pool, Propagator: svc.Telemetry.Propagator, Notify: relay.Notify,
		MaxJobs: quota.New("jobs", cfg.MaxJobs, refusals),
	})

	if cfg.PauseOnFailure {
		a.failures, err = failpause.New(failpause.Options{
			Store: st, AMQPURL: cfg.AMQPURL,
			Exchange: cmp.Or(cfg.ExecutionsExchange, DefaultExecutionsExchange),
			Queue:    cmp.Or(cfg.ExecutionsQueue, DefaultFailuresQueue),
			Logger:   logger.With(slog.String("component", "failpause")),
		})
		if err != nil {
			return nil, err
		}
	}

	// The registry's own copy of the managed keys comes straight from its
	// database, and a change made through this replica applies at once.
	keys, err := keyring.New(keyring.Options{
		Configured: configured, Source: st, Interval: cfg.Keys.Refresh,
		Logger:  logger.With(slog.String("component", "keyring")),
		Metrics: svc.Metrics,
	})
	if err != nil {
		return nil, err
	}
	if err := keys.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("load the managed API keys: %w", err)
	}
	svc.Authenticate(keys)
	hist, err := cfg.historyClient(svc.Telemetry, logger)
	if err != nil {
		return nil, err
	}
	path, handler := registryv1connect.NewJobServiceHandler(api.NewHandler(st, targetcheck.New(amqpPolicy), hist, logger), svc.HandlerOptions()...)
	svc.Server.Handle(registryv1connect.JobServiceName, path, handler)
	keysChanged := func(ctx context.Context) {
		if err := keys.Refresh(ctx); err != nil {
			logger.WarnContext(ctx, "refreshing the managed API keys after a change", slog.Any("error", err))
		}
	}
	path, handler = registryv1connect.NewKeyServiceHandler(api.NewKeyHandler(st, logger, keysChanged), svc.HandlerOptions()...)
	svc.Server.Handle(registryv1connect.KeyServiceName, path, handler)

	// The server drains the calls in flight; then the relay stops: events
	// it has not published yet stay in the outbox and go out after the
	// next start.
	relayPart := lifecycle.Part{Name: "outbox relay", Run: relay.Run}
	if a.failures == nil {
		svc.ThenStop(relayPart)
	} else {
		// The consumer's subscription may be stuck on a broker that
		// stopped answering (watermill's Subscribe does not heed its
		// context): it is given what a broker close is given, alongside
		// the relay's drain, and then left behind; what it has not
		// acknowledged is redelivered.
		svc.ThenStop(relayPart, lifecycle.Part{Name: "pause on failure", Run: a.failures.Run, StopTimeout: broker.CloseTimeout})
	}
	return a, nil
}

// historyClient is the client RerunExecution reads executions with; nil
// without --history-url. The connection is made at the first call, so the
// registry starts, and serves everything else, while the history is down.
func (c Config) historyClient(tel *telemetry.Telemetry, logger *slog.Logger) (*history.Client, error) {
	if c.HistoryURL == "" {
		logger.Info("no --history-url: RerunExecution answers UNIMPLEMENTED")
		return nil, nil
	}
	u, err := url.Parse(c.HistoryURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--history-url %q: want an http:// or https:// base URL", c.HistoryURL)
	}
	httpClient, err := rpcclient.NewHTTPClient(c.HistoryTLS)
	if err != nil {
		return nil, fmt.Errorf("--history-ca-file, --history-client-cert, --history-client-key: %w", err)
	}
	return history.New(httpClient, c.HistoryURL, tel.Propagator), nil
}

// FailuresReady is closed once the pause on failure consumes execution
// events; never when PauseOnFailure is off.
func (a *App) FailuresReady() <-chan struct{} {
	if a.failures == nil {
		return nil
	}
	return a.failures.Ready()
}

// Server is the App's server (for its address in tests).
func (a *App) Server() *server.Server { return a.svc.Server }

// Pool is the App's database pool.
func (a *App) Pool() *pgxpool.Pool { return a.svc.Pool }

// Run serves and relays events until ctx is done, then shuts down in order:
// the server drains in-flight calls, then the relay stops (events it has not
// published yet stay in the outbox and go out after the next start), then
// the connections close and spans are flushed. The registry is ready as
// soon as it listens: the broker may be down.
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
