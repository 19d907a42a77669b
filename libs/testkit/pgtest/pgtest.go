package pgtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/postgres"
)

const (
	// DefaultURL is the test database when CRONMESH_TEST_POSTGRES_URL is
	// unset: the local server `make test` starts, with trust auth.
	DefaultURL = "postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable"
	// URLEnv overrides DefaultURL.
	URLEnv = "CRONMESH_TEST_POSTGRES_URL"
	// SchemaPrefix starts the name of every schema New creates, so leftovers
	// of killed test runs are easy to find and drop.
	SchemaPrefix = "t_"

	// setupTimeout bounds connecting and creating the schema; a healthy local
	// server needs milliseconds.
	setupTimeout = 30 * time.Second
)

// URL returns the test database URL: the CRONMESH_TEST_POSTGRES_URL
// environment variable if set and non-empty, else DefaultURL. (Reading the
// environment here rather than in libs/config is deliberate: it is test
// infrastructure, configured the way `go test` is run.)
func URL() string {
	v, _ := os.LookupEnv(URLEnv)
	return cmp.Or(v, DefaultURL)
}

// New creates a fresh, uniquely named schema (SchemaPrefix + 16 hex digits)
// in the test database and returns a pool whose search_path is that schema
// (via libs/postgres.Connect, exactly as services connect) and the schema
// name. t.Cleanup closes the pool and drops the schema with CASCADE, so a test
// may close the pool itself without harm. It creates the test database when
// missing, and fails the test (never skips) when PostgreSQL is unreachable,
// saying to run `make test`.
func New(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	url := URL()

	conn, err := connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: PostgreSQL is unreachable (%v); run `make test`, which starts it, or point %s at a server", err, URLEnv)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	schema := SchemaPrefix + randomHex()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create schema %s: %v", schema, err)
	}
	// Registered before the pool's Close so that, cleanups being LIFO, the
	// pool's connections are gone before the DROP.
	t.Cleanup(func() {
		if err := Drop(context.Background(), schema); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})

	pool, err := postgres.Connect(ctx, postgres.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, schema
}

// Migrated is New with the migrations that migrations returns (a service
// store's Migrations) applied to the schema; it fails the test when they
// cannot be read or applied.
func Migrated(t testing.TB, migrations func() ([]migrate.Migration, error)) (*pgxpool.Pool, string) {
	t.Helper()
	pool, schema := New(t)
	ms, err := migrations()
	if err != nil {
		t.Fatalf("pgtest: migrations: %v", err)
	}
	if _, err := migrate.ApplyAll(context.Background(), pool, schema, ms); err != nil {
		t.Fatalf("pgtest: apply the migrations: %v", err)
	}
	return pool, schema
}

// Drop drops schema and everything in it from the test database; a schema
// that does not exist is not an error. New's cleanup calls it; it is exported
// for tools that sweep schemas left over by killed test runs.
func Drop(ctx context.Context, schema string) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	conn, err := connect(ctx, URL())
	if err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// connect opens a single connection to url, creating its database first if
// PostgreSQL says it does not exist.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, url)
	if err == nil || !postgres.IsDatabaseMissing(err) {
		return conn, err
	}
	if err := postgres.EnsureDatabase(ctx, url); err != nil {
		return nil, err
	}
	return pgx.Connect(ctx, url)
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	return hex.EncodeToString(b)
}
