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

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/services/alerting/internal/api"
	"github.com/cronmesh/cronmesh/services/alerting/internal/notify"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// Defaults of the alerting service.
const (
	DefaultListen = "127.0.0.1:8085"
	DefaultSchema = "alerting"
)

// Config is everything the alerting service is told at start.
type Config struct {
	config.Common
	// APIKeys are "namespace=key" or "namespace=sha256:<hex>" entries.
	APIKeys config.StringList
	// Schema is the PostgreSQL schema of the alerting tables.
	Schema string
	// SendTimeout bounds one delivery attempt of a notification.
	SendTimeout time.Duration
	// Clock is the time source of the loops (tests drive it). Not a flag:
	// nil means the real clock.
	Clock clock.Clock
}

// Register adds the alerting flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	c.Common.Register(fs, DefaultListen)
	fs.Var(&c.APIKeys, "api-keys", "comma-separated API keys, each namespace=key or namespace=sha256:<hex digest of the key>")
	fs.StringVar(&c.Schema, "schema", DefaultSchema, "PostgreSQL schema of the alerting tables")
	fs.DurationVar(&c.SendTimeout, "send-timeout", notify.DefaultTimeout, "bound on one notification delivery attempt (webhook request or SMTP session)")
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
	pool      *pgxpool.Pool
	store     *store.Store
	closeOnce sync.Once
}

// New connects to PostgreSQL, applies migrations and builds the parts.
// Nothing serves until Run.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (_ *App, err error) {
	keys, err := apikey.Parse(cfg.APIKeys)
	if err != nil {
		return nil, err
	}
	if keys.Len() == 0 {
		return nil, errors.New("no API keys configured (--api-keys or CRONMESH_API_KEYS): every call would be refused")
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
	sender := notify.NewSender(notify.SenderOptions{Timeout: cfg.SendTimeout, Clock: cfg.Clock})

	a.server, err = server.New(server.Options{
		Name: "alerting", Listen: cfg.Listen, Logger: logger, Telemetry: a.telemetry, ShutdownTimeout: cfg.ShutdownTimeout, Profiling: cfg.Pprof,
	})
	if err != nil {
		return nil, err
	}
	a.server.UseMiddleware(keys.Middleware().Wrap)
	path, handler := alertingv1connect.NewAlertServiceHandler(api.NewHandler(a.store, sender, nil, logger), a.server.HandlerOptions()...)
	a.server.Handle(alertingv1connect.AlertServiceName, path, handler)
	return a, nil
}

// Server is the App's server (for its address in tests).
func (a *App) Server() *server.Server { return a.server }

// Pool is the App's database pool.
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// Run serves until ctx is done, then shuts down.
func (a *App) Run(ctx context.Context) error {
	a.server.SetServing(true)
	serveErr := a.server.Run(ctx)
	a.close(context.WithoutCancel(ctx))
	return serveErr
}

func (a *App) close(ctx context.Context) {
	a.closeOnce.Do(func() {
		if a.pool != nil {
			a.pool.Close()
		}
		if a.telemetry != nil {
			if err := a.telemetry.Shutdown(ctx); err != nil {
				a.logger.Warn("flushing telemetry", slog.Any("error", err))
			}
		}
	})
}
