package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

func TestConnectSearchPath(t *testing.T) {
	t.Parallel()
	// pgtest.New connects through postgres.Connect; a second pool on the same
	// schema shows unqualified names resolve there on every connection.
	_, schema := pgtest.New(t)
	pool, err := postgres.Connect(t.Context(), postgres.Options{URL: pgtest.URL(), Schema: schema, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.EqualValues(t, 2, pool.Config().MaxConns)

	_, err = pool.Exec(t.Context(), "CREATE TABLE things (name text)")
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), "INSERT INTO things VALUES ('a')")
	require.NoError(t, err)

	// Hold both connections at once so each is checked, not one reused.
	var wg sync.WaitGroup
	for range 2 {
		conn, err := pool.Acquire(t.Context())
		require.NoError(t, err)
		wg.Go(func() {
			defer conn.Release()
			var n int
			var current string
			err := conn.QueryRow(t.Context(), "SELECT count(*), current_schema() FROM things").Scan(&n, &current)
			if !assertNoError(t, err) {
				return
			}
			if n != 1 || current != schema {
				t.Errorf("got count %d schema %q, want 1 %q", n, current, schema)
			}
		})
	}
	wg.Wait()

	var path string
	require.NoError(t, pool.QueryRow(t.Context(), "SHOW search_path").Scan(&path))
	require.Equal(t, postgres.SearchPath(schema), path)
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestConnectSchemaNeedsQuoting(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.New(t)
	odd := schema + `-Odd "name"`
	t.Cleanup(func() { require.NoError(t, pgtest.Drop(context.Background(), odd)) })
	pool, err := postgres.Connect(t.Context(), postgres.Options{URL: pgtest.URL(), Schema: odd})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{odd}.Sanitize())
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), "CREATE TABLE t (id int)")
	require.NoError(t, err)
	var current string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_schema()").Scan(&current))
	require.Equal(t, odd, current)
}

func TestConnectTraces(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.New(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pool, err := postgres.Connect(t.Context(), postgres.Options{URL: pgtest.URL(), Schema: schema, TracerProvider: tp})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// otelpgx traces only under a recording span, as in a request handler.
	_, err = pool.Exec(t.Context(), "SELECT 2")
	require.NoError(t, err)
	require.Empty(t, exp.GetSpans(), "no root spans for queries outside a trace")

	ctx, parent := tp.Tracer("test").Start(t.Context(), "request")
	_, err = pool.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	parent.End()
	var query *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "SELECT" {
			query = &s
		}
	}
	require.NotNil(t, query, "query span in %v", exp.GetSpans())
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	require.Contains(t, query.Attributes, semconv.DBSystemNamePostgreSQL)
	require.Contains(t, query.Attributes, semconv.DBNamespace(strings.TrimPrefix(u.Path, "/")))
	require.Contains(t, query.Attributes, semconv.DBQueryText("SELECT 1"))
	require.Equal(t, parent.SpanContext().SpanID(), query.Parent.SpanID())
}

func TestConnectErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    postgres.Options
		want    []string
		notWant string
	}{
		{name: "no url", opts: postgres.Options{Schema: "s"}, want: []string{"URL is required"}},
		{name: "no schema", opts: postgres.Options{URL: pgtest.URL()}, want: []string{"Schema is required"}},
		{
			name:    "unparsable url keeps password secret",
			opts:    postgres.Options{URL: "postgres://u:hunter2@host:notaport/db", Schema: "s"},
			want:    []string{"cannot parse"},
			notWant: "hunter2",
		},
		{
			name:    "unreachable names host and database, not password",
			opts:    postgres.Options{URL: "postgres://u:hunter2@127.0.0.1:1/somedb?sslmode=disable&connect_timeout=5", Schema: "s"},
			want:    []string{"127.0.0.1:1", "somedb"},
			notWant: "hunter2",
		},
		{
			name: "missing database",
			opts: postgres.Options{URL: withDatabase(t, pgtest.URL(), "cronmesh_no_such_db"), Schema: "s"},
			want: []string{"cronmesh_no_such_db"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool, err := postgres.Connect(t.Context(), tt.opts)
			require.Error(t, err)
			require.Nil(t, pool)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
			if tt.notWant != "" {
				require.NotContains(t, err.Error(), tt.notWant)
			}
		})
	}
}

func withDatabase(t *testing.T, raw, db string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.Path = "/" + db
	return u.String()
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), withDatabase(t, pgtest.URL(), "postgres"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var exists bool
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	return exists
}

func TestEnsureDatabase(t *testing.T) {
	t.Parallel()
	name := "cronmesh_ensure_" + strings.ToLower(rand.Text()[:12])
	dbURL := withDatabase(t, pgtest.URL(), name)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), withDatabase(t, pgtest.URL(), "postgres"))
		require.NoError(t, err)
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	})
	require.False(t, databaseExists(t, name))

	// Racing creators all succeed.
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- postgres.EnsureDatabase(t.Context(), dbURL) }()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
	require.True(t, databaseExists(t, name))
	// And again, now that it exists.
	require.NoError(t, postgres.EnsureDatabase(t.Context(), dbURL))

	pool, err := postgres.Connect(t.Context(), postgres.Options{URL: dbURL, Schema: "public"})
	require.NoError(t, err)
	pool.Close()
}

func TestEnsureDatabaseEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		wantErr string
	}{
		{name: "maintenance db is a no-op", url: withDatabase(t, pgtest.URL(), "postgres")},
		{name: "existing test db", url: pgtest.URL()},
		{name: "unreachable", url: "postgres://u:hunter2@127.0.0.1:1/x?sslmode=disable&connect_timeout=5", wantErr: "127.0.0.1:1"},
		{name: "unparsable", url: "postgres://u:hunter2@h:port/x", wantErr: "cannot parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.wantErr == "" {
				// The test db exists once some pgtest.New ran; make sure.
				pgtest.New(t)
			}
			err := postgres.EnsureDatabase(t.Context(), tt.url)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.NotContains(t, err.Error(), "hunter2")
				return
			}
			require.NoError(t, err)
		})
	}
}

func TestErrorClassifiers(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	_, err := pool.Exec(t.Context(), "CREATE TABLE u (id int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), "INSERT INTO u VALUES (1)")
	require.NoError(t, err)
	_, dupErr := pool.Exec(t.Context(), "INSERT INTO u VALUES (1)")
	require.Error(t, dupErr)

	tests := []struct {
		name           string
		err            error
		unique, serial bool
		missingDB      bool
	}{
		{name: "nil", err: nil},
		{name: "plain", err: errors.New("x")},
		{name: "real unique violation", err: dupErr, unique: true},
		{name: "wrapped unique violation", err: fmt.Errorf("insert: %w", dupErr), unique: true},
		{name: "serialization failure", err: &pgconn.PgError{Code: "40001"}, serial: true},
		{name: "deadlock", err: &pgconn.PgError{Code: "40P01"}, serial: true},
		{name: "missing database", err: fmt.Errorf("x: %w", &pgconn.PgError{Code: "3D000"}), missingDB: true},
		{name: "other pg error", err: &pgconn.PgError{Code: "42P01"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.unique, postgres.IsUniqueViolation(tt.err))
			require.Equal(t, tt.serial, postgres.IsSerializationFailure(tt.err))
			require.Equal(t, tt.missingDB, postgres.IsDatabaseMissing(tt.err))
		})
	}
}

func TestConnectIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.New(t)
	pool, err := postgres.Connect(t.Context(), postgres.Options{URL: pgtest.URL(), Schema: schema, MaxConns: 1, IdleInTransactionTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var setting string
	require.NoError(t, pool.QueryRow(t.Context(), `SHOW idle_in_transaction_session_timeout`).Scan(&setting))
	require.Equal(t, "200ms", setting)

	// A transaction left idle (its process frozen) is ended by the server,
	// and with it the locks it held.
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `SELECT 1`)
	require.NoError(t, err)
	time.Sleep(time.Second) // the server's timer, not ours, is under test
	_, err = tx.Exec(t.Context(), `SELECT 1`)
	require.Error(t, err, "the server ended the idle transaction")
	_ = tx.Rollback(t.Context())
}

func TestConnectEncodesUUIDs(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	ids := []uuid.UUID{uuid.New(), uuid.Must(uuid.NewV7()), uuid.Nil}
	var text []string
	var back []uuid.UUID
	var one uuid.UUID
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT $1::uuid[]::text[], $1::uuid[], $2::uuid`, ids, ids[0]).Scan(&text, &back, &one))
	require.Equal(t, []string{ids[0].String(), ids[1].String(), ids[2].String()}, text, "the server sees the ids the client sent")
	require.Equal(t, ids, back)
	require.Equal(t, ids[0], one)
	var null uuid.NullUUID
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT NULL::uuid`).Scan(&null))
	require.False(t, null.Valid)

	// The codec is registered (pgx's own decodes to [16]byte), so a
	// uuid.UUID parameter is sent as bytes, not through its text Valuer.
	rows, err := pool.Query(t.Context(), `SELECT $1::uuid`, ids[0])
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next())
	values, err := rows.Values()
	require.NoError(t, err)
	require.Equal(t, ids[0], values[0], "decoded as a uuid.UUID")
}

// BenchmarkEncodeUUIDArray is the look-up of a batch of 1,000 execution ids
// by primary key, as the dispatcher and the trigger send them.
func BenchmarkEncodeUUIDArray(b *testing.B) {
	pool, _ := pgtest.New(b)
	ids := make([]uuid.UUID, 1000)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	b.ReportAllocs()
	for b.Loop() {
		var n int
		if err := pool.QueryRow(b.Context(), `SELECT cardinality($1::uuid[])`, ids).Scan(&n); err != nil || n != len(ids) {
			b.Fatal(n, err)
		}
	}
}

// TestCloseWithServerUnreachable: a connection whose query was cancelled
// while the server is unreachable spends 15 s trying to send it a cancel
// request, and pgxpool's Close waits for it; Close gives up after
// CloseTimeout instead.
func TestCloseWithServerUnreachable(t *testing.T) {
	t.Parallel()
	proxy := pgtest.NewProxy(t, false)
	t.Cleanup(proxy.Up) // before the proxy's own cleanup: cut the held connections
	_, schema := pgtest.New(t)
	pool, err := postgres.Connect(t.Context(), postgres.Options{URL: proxy.URL(), Schema: schema})
	require.NoError(t, err)

	proxy.Blackhole()
	queryCtx, cancelQuery := context.WithCancel(context.Background())
	failed := make(chan error, 1)
	go func() {
		_, err := pool.Exec(queryCtx, "SELECT 1")
		failed <- err
	}()
	time.Sleep(100 * time.Millisecond) // the query is sent, into the silence
	cancelQuery()
	require.Error(t, <-failed)

	closed := make(chan error, 1)
	go func() { closed <- postgres.Close(context.Background(), pool) }()
	select {
	case err := <-closed:
		require.ErrorContains(t, err, "still closing", "the cancelled connection could not have closed yet")
	case <-time.After(postgres.CloseTimeout + 5*time.Second):
		t.Fatal("Close waited for the unreachable server")
	}
}
