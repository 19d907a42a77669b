package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

// TestWatch: Watch hands over the notifications of its channel, returns
// the error when its backend is terminated, and nil at once when its
// context ends.
func TestWatch(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.New(t)
	channel := "watch_" + schema
	connect := func() *pgx.Conn {
		conn, err := pgx.ConnectConfig(t.Context(), pool.Config().ConnConfig.Copy())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		_, err = conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{channel}.Sanitize())
		require.NoError(t, err)
		return conn
	}

	conn := connect()
	pid := conn.PgConn().PID()
	got := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- postgres.Watch(context.Background(), conn, 50*time.Millisecond, func(n *pgconn.Notification) { got <- n.Payload })
	}()
	_, err := pool.Exec(t.Context(), "SELECT pg_notify($1, 'hello')", channel)
	require.NoError(t, err)
	select {
	case p := <-got:
		require.Equal(t, "hello", p)
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
	time.Sleep(150 * time.Millisecond) // silent for longer than check: pinged, still watching
	_, err = pool.Exec(t.Context(), "SELECT pg_terminate_backend($1)", pid)
	require.NoError(t, err)
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return when its backend was terminated")
	}

	ctx, cancel := context.WithCancel(context.Background())
	conn = connect()
	go func() { done <- postgres.Watch(ctx, conn, time.Hour, nil) }()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return when its context ended")
	}
}
