package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronmesh/cronmesh/libs/audit"
	"github.com/cronmesh/cronmesh/libs/authz"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/lifecycle"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/telemetry"
)

// Options say what a service is and has.
type Options struct {
	// Name is the service's name: of its server, its traces and its
	// metrics' service label ("registry"); required.
	Name string
	// Config is the service's common configuration: the listener, TLS,
	// request limits, rate limit, telemetry, database URL, audit
	// retention and shutdown timeout.
	Config config.Common
	// Logger is the service's logger; nil discards.
	Logger *slog.Logger
	// Keys, when set, authenticates the API's calls with the configured
	// APIKeys (the --api-keys entries) and the managed keys polled from
	// the registry Keys names. The registry, which reads the managed keys
	// from its own database, leaves it nil and calls Authenticate once its
	// store exists; a service without an API of its own (the console)
	// leaves both unset.
	Keys    *keyring.Config
	APIKeys []string
	// Database, when set, is the service's PostgreSQL schema: New creates
	// the database when it is missing, connects, applies the migrations
	// and mounts the audit log (AuditService, and the interceptor of
	// HandlerOptions) kept in it.
	Database *Database
}

// Database is a service's PostgreSQL schema.
type Database struct {
	// Schema is the schema of the service's tables; required.
	Schema string
	// Migrations returns the service's own migrations; the audit log's is
	// applied with them.
	Migrations func() ([]migrate.Migration, error)
	// MaxConns and IdleInTransactionTimeout: see postgres.Options.
	MaxConns                 int32
	IdleInTransactionTimeout time.Duration
}

// Service is what every service has. Its fields are set by New and read by
// the app; Keys and Audit are nil for a service without them.
type Service struct {
	Logger    *slog.Logger
	Telemetry *telemetry.Telemetry
	// Metrics is Telemetry's registry with the label service=<Name>.
	Metrics prometheus.Registerer
	// Pool is the database's pool; nil without Options.Database.
	Pool   *pgxpool.Pool
	Server *server.Server
	// Keys authenticates the API; it runs (refreshing the managed keys)
	// until the keyring's stage, after every other part.
	Keys  *keyring.Ring
	Audit *audit.Log

	group      *lifecycle.Group
	withServer []lifecycle.Part
	stages     [][]lifecycle.Part
	ran        bool
}

// New sets up the telemetry, the database (see Options.Database), the
// server and the API keys, in that order; nothing serves until Run. The
// configured API keys are parsed first, so that a configuration mistake
// fails before anything connects. When New fails it closes what it opened.
func New(ctx context.Context, opts Options) (_ *Service, err error) {
	if opts.Name == "" {
		return nil, errors.New("service: Options.Name is required")
	}
	logger := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	var keys *keyring.Ring
	if opts.Keys != nil {
		client, err := opts.Keys.HTTPClient()
		if err != nil {
			return nil, err
		}
		keys, err = opts.Keys.NewRegistryRing(opts.APIKeys, client, logger.With(slog.String("component", "keyring")), nil)
		if err != nil {
			return nil, err
		}
	}
	s := &Service{Logger: logger}
	s.group = lifecycle.New(lifecycle.Options{
		Logger:      logger,
		StopTimeout: opts.Config.ShutdownTimeout,
		OnReady:     func() { s.Server.SetServing(true) },
	})
	defer func() {
		if err != nil {
			s.Close(context.Background())
		}
	}()
	s.Telemetry, err = telemetry.Setup(ctx, telemetry.Options{ServiceName: opts.Name, OTLPEndpoint: opts.Config.OTLPEndpoint, Logger: logger})
	if err != nil {
		return nil, err
	}
	// Spans of the shutdown are flushed too: the exporter closes with the
	// connections, after every part stopped.
	s.group.OnClose("telemetry", s.Telemetry.Shutdown)
	s.Metrics = prometheus.WrapRegistererWith(prometheus.Labels{"service": opts.Name}, s.Telemetry.Metrics)
	if opts.Database != nil {
		if err := postgres.EnsureDatabase(ctx, opts.Config.PostgresURL); err != nil {
			return nil, err
		}
		s.Pool, err = connectPool(ctx, opts.Config.PostgresURL, *opts.Database, s.Telemetry)
		if err != nil {
			return nil, err
		}
		s.group.OnClose("the database pool", func(ctx context.Context) error { return postgres.Close(ctx, s.Pool) })
		if err := applyMigrations(ctx, s.Pool, *opts.Database, logger); err != nil {
			return nil, err
		}
	}
	s.Server, err = server.New(server.Options{
		Name: opts.Name, Listen: opts.Config.Listen, Logger: logger, Telemetry: s.Telemetry,
		ShutdownTimeout: opts.Config.ShutdownTimeout, Profiling: opts.Config.Pprof,
		RateLimit: opts.Config.RateLimit, TLS: opts.Config.TLS, Limits: opts.Config.Limits,
	})
	if err != nil {
		return nil, err
	}
	if s.Pool != nil {
		s.Audit = audit.New(audit.Options{Pool: s.Pool, Logger: logger, Retention: opts.Config.AuditRetention})
		s.Audit.Mount(s.Server)
	}
	if keys != nil {
		if err := keys.RegisterMetrics(s.Metrics); err != nil {
			return nil, err
		}
		s.Authenticate(keys)
	}
	return s, nil
}

// Migrate creates the database when missing and applies db's migrations
// and the audit log's: a service's `migrate` subcommand.
func Migrate(ctx context.Context, postgresURL string, db Database, logger *slog.Logger) error {
	if err := postgres.EnsureDatabase(ctx, postgresURL); err != nil {
		return err
	}
	pool, err := connectPool(ctx, postgresURL, db, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	return applyMigrations(ctx, pool, db, cmp.Or(logger, slog.New(slog.DiscardHandler)))
}

// connectPool opens db's pool, traced by tel's tracer provider when tel is not
// nil.
func connectPool(ctx context.Context, url string, db Database, tel *telemetry.Telemetry) (*pgxpool.Pool, error) {
	opts := postgres.Options{
		URL: url, Schema: db.Schema,
		MaxConns: db.MaxConns, IdleInTransactionTimeout: db.IdleInTransactionTimeout,
	}
	if tel != nil {
		opts.TracerProvider = tel.TracerProvider
	}
	return postgres.Connect(ctx, opts)
}

func applyMigrations(ctx context.Context, pool *pgxpool.Pool, db Database, logger *slog.Logger) error {
	var migrations []migrate.Migration
	if db.Migrations != nil {
		var err error
		if migrations, err = db.Migrations(); err != nil {
			return err
		}
	}
	migrations = append(migrations, audit.Migration())
	applied, err := migrate.ApplyAll(ctx, pool, db.Schema, migrations)
	if err != nil {
		return fmt.Errorf("migrate schema %s: %w", db.Schema, err)
	}
	logger.Info("migrations applied", slog.String("schema", db.Schema), slog.Any("versions", applied))
	return nil
}

// Authenticate makes keys the API's authentication (the middleware in front
// of every service mounted on the server) and runs it with the service.
// New calls it when Options.Keys is set; call it at most once, before Run.
func (s *Service) Authenticate(keys *keyring.Ring) {
	s.Keys = keys
	s.Server.UseMiddleware(keys.Middleware().Wrap)
}

// HandlerOptions are the options every API of the service is mounted with
// (its generated NewXxxServiceHandler): the server's, then the audit log's
// interceptor (outside the role check, so refused calls are recorded
// too), then the role check of libs/authz.
func (s *Service) HandlerOptions() []connect.HandlerOption {
	if s.Audit == nil {
		return s.Server.HandlerOptions(authz.NewInterceptor())
	}
	return s.Server.HandlerOptions(s.Audit.Interceptor(), authz.NewInterceptor())
}

// WithServer adds parts that are told to stop when the shutdown begins,
// together with the server while it drains the calls in flight.
func (s *Service) WithServer(parts ...lifecycle.Part) { s.withServer = append(s.withServer, parts...) }

// ThenStop adds a stage: parts told to stop together once the server and
// the stages added before have stopped.
func (s *Service) ThenStop(parts ...lifecycle.Part) { s.stages = append(s.stages, parts) }

// OnClose adds a close that runs after every part stopped, together with
// the closes of the pool and the telemetry (lifecycle.Group.OnClose): a
// broker publisher, an etcd client.
func (s *Service) OnClose(name string, close func(ctx context.Context) error) {
	s.group.OnClose(name, close)
}

// Ready is closed once the server listens and every part with a Ready
// channel is ready; the server reports SERVING from then on.
func (s *Service) Ready() <-chan struct{} { return s.group.Ready() }

// Run runs the server and the parts until ctx is done or a part fails,
// then stops them in order (the server with the parts of WithServer; each
// ThenStop stage; the keyring) and closes the connections and the
// telemetry (lifecycle.Group.Run). Call it once: a second call returns an
// error.
func (s *Service) Run(ctx context.Context) error {
	if s.ran {
		return errors.New("service: Run called twice")
	}
	s.ran = true
	s.group.Stage(append([]lifecycle.Part{{Name: "server", Run: s.Server.Run, Ready: s.Server.Ready()}}, s.withServer...)...)
	for _, stage := range s.stages {
		s.group.Stage(stage...)
	}
	if s.Keys != nil {
		s.group.Stage(lifecycle.Part{Name: "keyring", Run: s.Keys.Run})
	}
	return s.group.Run(ctx)
}

// Close closes what New and the app opened (the closes of OnClose), for an
// app whose New fails after New; Run closes them itself. Safe twice.
func (s *Service) Close(ctx context.Context) { s.group.Close(ctx) }
