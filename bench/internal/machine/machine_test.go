package machine_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/machine"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	m := machine.Describe(t.Context(), pool, nil)
	require.Positive(t, m.Cores)
	require.NotEmpty(t, m.Go)
	require.NotEmpty(t, m.PostgreSQL, "read from the server")
	require.Contains(t, m.PostgresSettings, "shared_buffers")
	require.Empty(t, m.RabbitMQ, "no connection given")
	md := m.Markdown()
	require.Contains(t, md, "| PostgreSQL | "+m.PostgreSQL)
	require.Contains(t, md, "| Go | "+m.Go)
	require.Contains(t, m.PostgresSettings, "autovacuum ")
	require.Equal(t, strings.Contains(m.PostgresSettings, "autovacuum off"), m.AutovacuumOff, "read from the server")
	require.Equal(t, m.AutovacuumOff, strings.Contains(md, "autovacuum off**"), "said above the figures only when it is off")
	m.AutovacuumOff = true
	require.Contains(t, m.Markdown(), "**PostgreSQL ran with autovacuum off**")
}
