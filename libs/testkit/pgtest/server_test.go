package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

// TestServerSurvivesACrash: a test's own cluster takes writes, breaks its
// clients' connections when stopped, refuses new ones while down, and
// after Start holds every committed row, as a crashed server's recovery
// must.
func TestServerSurvivesACrash(t *testing.T) {
	t.Parallel()
	srv := pgtest.NewServer(t)
	require.NotEqual(t, pgtest.URL(), srv.URL())
	ctx := t.Context()
	require.NoError(t, postgres.EnsureDatabase(ctx, srv.URL()))

	conn, err := pgx.Connect(ctx, srv.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1), (2)")
	require.NoError(t, err)

	srv.Stop()
	require.Error(t, conn.Ping(ctx), "a stopped cluster breaks its clients' connections")
	_, err = pgx.Connect(ctx, srv.URL())
	require.Error(t, err, "a stopped cluster refuses connections")

	srv.Start()
	again, err := pgx.Connect(ctx, srv.URL())
	require.NoError(t, err)
	defer again.Close(context.Background())
	var rows int
	require.NoError(t, again.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&rows))
	require.Equal(t, 2, rows, "committed rows survive the crash")
}
