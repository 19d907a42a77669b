package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Options for Connect.
type Options struct {
	// URL is a PostgreSQL connection URL or keyword/value string; required.
	URL string
	// Schema becomes search_path = <schema>, public on every connection, so
	// unqualified names resolve in it; required. The schema need not exist
	// yet (libs/migrate creates it).
	Schema string
	// TracerProvider traces queries made under a recording span (inside a
	// traced request, say); queries outside any trace make no root spans.
	// Nil means no tracing.
	TracerProvider trace.TracerProvider
	// MaxConns caps the pool; 0 keeps pgx's default (the larger of 4 and
	// the number of CPUs) or the URL's pool_max_conns.
	MaxConns int32
	// IdleInTransactionTimeout, when positive, makes the server end a
	// session whose transaction stays idle that long
	// (idle_in_transaction_session_timeout). A process frozen in the
	// middle of a transaction (SIGSTOP, a VM pause) otherwise keeps its row
	// locks for as long as its TCP connection lives, and whoever needs
	// those rows waits with it.
	IdleInTransactionTimeout time.Duration
}

// Connect opens a pgxpool traced with otelpgx (spans carry the database
// semantic-convention attributes: db.system.name, server.address,
// db.namespace, db.query.text), with search_path set through RuntimeParams so
// it holds for every connection of the pool, and pings it so a bad URL or a
// down server fails here rather than at the first query. Errors name the
// host, port and database that failed, never the password. The caller closes
// the pool.
func Connect(ctx context.Context, opts Options) (*pgxpool.Pool, error) {
	if opts.URL == "" {
		return nil, errors.New("postgres: URL is required")
	}
	if opts.Schema == "" {
		return nil, errors.New("postgres: Schema is required")
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		// pgconn redacts the password in its parse errors.
		return nil, fmt.Errorf("postgres: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = SearchPath(opts.Schema)
	if opts.IdleInTransactionTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(opts.IdleInTransactionTimeout.Milliseconds(), 10)
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	cfg.ConnConfig.Tracer = otelpgx.NewTracer(
		otelpgx.WithTracerProvider(tp),
		// Metrics come from Prometheus; otelpgx would otherwise use the
		// global OpenTelemetry meter provider.
		otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
	// google/uuid.UUID is a driver.Valuer that formats a string, which
	// the server parses back: in the batched statements (arrays of
	// thousands of ids) that was most of the dispatcher's encoding time.
	// Registered, it is sent as the 16 binary bytes.
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		pgxuuid.Register(conn.TypeMap())
		return nil
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	target := describe(cfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open pool for %s: %w", target, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s: %w", target, err)
	}
	return pool, nil
}

// SearchPath returns the search_path value Connect sets for schema: the
// schema, quoted as an identifier, then public (where extensions live).
func SearchPath(schema string) string {
	return pgx.Identifier{schema}.Sanitize() + ", public"
}

// describe names the server and database of cfg for error messages, without
// the password.
func describe(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s/%s (user %s)",
		net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), cfg.Database, cfg.User)
}

// PostgreSQL error codes (SQLSTATE) this package tests for.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeDuplicateDatabase    = "42P04"
	codeInvalidCatalogName   = "3D000"
)

func hasCode(err error, codes ...string) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return false
	}
	for _, c := range codes {
		if pgErr.Code == c {
			return true
		}
	}
	return false
}

// IsUniqueViolation reports whether err (or an error it wraps) is a
// PostgreSQL unique_violation (23505). False for nil.
func IsUniqueViolation(err error) bool { return hasCode(err, codeUniqueViolation) }

// IsSerializationFailure reports whether err (or an error it wraps) is a
// serialization_failure (40001) or deadlock_detected (40P01): the errors
// after which the whole transaction should simply be retried. False for nil.
func IsSerializationFailure(err error) bool {
	return hasCode(err, codeSerializationFailure, codeDeadlockDetected)
}

// IsDatabaseMissing reports whether err (or an error it wraps) says the
// database does not exist (invalid_catalog_name, 3D000), the case
// EnsureDatabase fixes. False for nil.
func IsDatabaseMissing(err error) bool { return hasCode(err, codeInvalidCatalogName) }

// EnsureDatabase connects to the "postgres" maintenance database of the
// server url points at and creates url's database if it does not exist. It is
// idempotent and safe to race: a concurrent creator winning is not an error.
// It needs the CREATEDB privilege only when the database is missing. A url
// naming the "postgres" database itself is a no-op.
func EnsureDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	name := cfg.Database
	if name == "" {
		return errors.New("postgres: EnsureDatabase: the URL names no database")
	}
	if name == "postgres" {
		return nil
	}
	cfg.Database = "postgres"
	target := describe(cfg)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres: connect to %s: %w", target, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var exists bool
	if err := conn.QueryRow(ctx,
		"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name,
	).Scan(&exists); err != nil {
		return fmt.Errorf("postgres: look up database %q on %s: %w", name, target, err)
	}
	if exists {
		return nil
	}
	// CREATE DATABASE takes no parameters, hence the quoted identifier. Two
	// creators racing past the check above get duplicate_database, or a
	// unique_violation on pg_database when they collide mid-way.
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if err != nil && !hasCode(err, codeDuplicateDatabase, codeUniqueViolation) {
		return fmt.Errorf("postgres: create database %q on %s: %w", name, target, err)
	}
	return nil
}

// CloseTimeout bounds Close's wait for the pool's connections to close.
const CloseTimeout = time.Second

// Close closes pool and waits at most CloseTimeout, or until ctx is done,
// for its connections to close, returning an error if it stopped waiting.
// pgxpool's own Close waits for every connection, and a connection whose
// query was cancelled first sends the server a cancel request, for up to
// 15 s when the server is unreachable: a service's shutdown must not wait
// for that. A connection not closed in time is closed by the process exit.
func Close(ctx context.Context, pool *pgxpool.Pool) error {
	done := make(chan struct{})
	go func() {
		pool.Close()
		close(done)
	}()
	timer := time.NewTimer(CloseTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
		return fmt.Errorf("postgres: connections still closing after %s; left to the process exit", CloseTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}
