package pgtest_test

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var exists bool
	require.NoError(t, conn.QueryRow(t.Context(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	return exists
}

func TestNew(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.New(t)
	require.True(t, strings.HasPrefix(schema, pgtest.SchemaPrefix))
	require.True(t, schemaExists(t, schema))

	var current string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_schema()").Scan(&current))
	require.Equal(t, schema, current)

	// Unqualified names land in the test's schema.
	_, err := pool.Exec(t.Context(), "CREATE TABLE widgets (id int PRIMARY KEY)")
	require.NoError(t, err)
	var tableSchema string
	require.NoError(t, pool.QueryRow(t.Context(),
		"SELECT table_schema FROM information_schema.tables WHERE table_name = 'widgets' AND table_schema = $1", schema,
	).Scan(&tableSchema))
	require.Equal(t, schema, tableSchema)
}

// TestMigrated: the schema New makes holds what the migrations create.
func TestMigrated(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Migrated(t, func() ([]migrate.Migration, error) {
		return []migrate.Migration{migrate.New(1, "widgets", "CREATE TABLE widgets (id int PRIMARY KEY)")}, nil
	})
	require.True(t, strings.HasPrefix(schema, pgtest.SchemaPrefix))
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM widgets").Scan(&n))
	require.Zero(t, n)
}

func TestSchemasAreUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 5 {
		_, schema := pgtest.New(t)
		require.False(t, seen[schema])
		seen[schema] = true
	}
}

func TestCleanupDropsSchema(t *testing.T) {
	t.Parallel()
	var (
		schema string
		pool   *pgxpool.Pool
	)
	// The subtest is not parallel, so t.Run returns only after its cleanups.
	t.Run("inner", func(t *testing.T) {
		pool, schema = pgtest.New(t)
		_, err := pool.Exec(t.Context(), "CREATE TABLE leftovers (id int)")
		require.NoError(t, err)
		require.True(t, schemaExists(t, schema))
	})
	require.NotEmpty(t, schema)
	require.False(t, schemaExists(t, schema), "schema %s survived cleanup", schema)
	require.Error(t, pool.Ping(t.Context()), "pool closed by cleanup")
}

func TestCleanupAfterPoolClosedByTest(t *testing.T) {
	t.Parallel()
	var schema string
	t.Run("inner", func(t *testing.T) {
		var pool *pgxpool.Pool
		pool, schema = pgtest.New(t)
		pool.Close()
	})
	require.False(t, schemaExists(t, schema))
}

func TestDropMissingSchema(t *testing.T) {
	t.Parallel()
	require.NoError(t, pgtest.Drop(t.Context(), "t_does_not_exist"))
}

// The tests below change the environment, so they cannot be parallel.

func TestURL(t *testing.T) {
	tests := []struct {
		env  string
		want string
	}{
		{env: "", want: pgtest.DefaultURL},
		{env: "postgres://elsewhere/db", want: "postgres://elsewhere/db"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(pgtest.URLEnv, tt.env)
			require.Equal(t, tt.want, pgtest.URL())
		})
	}
}

// fatalTB records Fatalf instead of failing the real test.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func TestUnreachableFailsNotSkips(t *testing.T) {
	t.Setenv(pgtest.URLEnv, "postgres://postgres@127.0.0.1:1/cronmesh?sslmode=disable&connect_timeout=5")
	fake := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pgtest.New(fake)
	}()
	<-done
	require.False(t, t.Skipped())
	fake.mu.Lock()
	defer fake.mu.Unlock()
	t.Log(fake.msg)
	require.Contains(t, fake.msg, "make test")
	require.Contains(t, fake.msg, "127.0.0.1")
}

func TestCreatesMissingDatabase(t *testing.T) {
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	dbName := "cronmesh_pgtest_" + strings.ToLower(crand.Text()[:12])
	u.Path = "/" + dbName
	// Registered before pgtest.New's cleanups, so it runs after them.
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), strings.Replace(u.String(), "/"+dbName, "/postgres", 1))
		require.NoError(t, err)
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)")
		require.NoError(t, err)
	})
	t.Setenv(pgtest.URLEnv, u.String())

	pool, _ := pgtest.New(t)
	var current string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&current))
	require.Equal(t, dbName, current)
}

// TestProxy: the proxy carries a real PostgreSQL session, and Down cuts it
// and refuses new ones until Up.
func TestProxy(t *testing.T) {
	t.Parallel()
	p := pgtest.NewProxy(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, conn.Ping(ctx))

	p.Down()
	require.Error(t, conn.Ping(ctx), "a cut connection")
	_, err = pgx.Connect(ctx, p.URL())
	require.Error(t, err, "down refuses")

	p.Up()
	again, err := pgx.Connect(ctx, p.URL())
	require.NoError(t, err)
	require.NoError(t, again.Close(ctx))
}
