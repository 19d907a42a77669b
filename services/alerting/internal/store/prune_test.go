package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// TestPruneKeepsTheRunningFailureCount: old records that only guard
// against redelivery and failures before the job's latest success go;
// failures after it stay however old.
func TestPruneKeepsTheRunningFailureCount(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.Migrated(t, store.Migrations)
	ctx := context.Background()
	s := store.New(store.Options{Pool: pool})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old, recent := t0, t0.Add(10*24*time.Hour)
	_, err := pool.Exec(ctx, `INSERT INTO jobs (id, namespace, version, create_time, last_success_nominal) VALUES ('j', 'ns', 1, $1, $2)`, t0, t0.Add(time.Hour))
	require.NoError(t, err)
	for _, r := range []struct {
		id      string
		failed  bool
		nominal time.Time
		seen    time.Time
	}{
		{"failed-before-success", true, t0, old},
		{"failed-after-success", true, t0.Add(2 * time.Hour), old},
		{"missed-old", false, t0, old},
		{"missed-recent", false, recent, recent},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO execution_events (execution_id, attempt, kind, job_id, nominal_time, failed, seen_time)
			VALUES ($1, 1, 3, 'j', $2, $3, $4)`, r.id, r.nominal, r.failed, r.seen)
		require.NoError(t, err)
	}
	events, _, err := s.Prune(ctx, recent.Add(-7*24*time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, int64(2), events)
	rows, err := pool.Query(ctx, `SELECT execution_id FROM execution_events ORDER BY execution_id`)
	require.NoError(t, err)
	var left []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"failed-after-success", "missed-recent"}, left)
}
