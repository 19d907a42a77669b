package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// waitFor bounds the waits of the watch tests; never a way to let time pass.
const waitFor = 10 * time.Second

// startWatch runs a ChangeWatch on e's schema until the test ends.
func startWatch(t *testing.T, e *env) (*store.ChangeWatch, *prometheus.Registry, chan error) {
	t.Helper()
	reg := prometheus.NewRegistry()
	// Check: an hour, so that no ping replaces the LISTEN the kill test finds.
	w, err := store.NewChangeWatch(store.ChangeWatchOptions{Pool: e.pool, Metrics: reg, Retry: 50 * time.Millisecond, Check: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("ChangeWatch.Run did not return")
		}
	})
	return w, reg, done
}

// quiet waits until the watch listens and has reported its start (all),
// and returns with nothing reported since.
func quiet(t *testing.T, w *store.ChangeWatch, reg *prometheus.Registry) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := testutil.GatherAndCount(reg, "trigger_job_watch_listening")
		return err == nil && n == 1 && listening(t, reg)
	}, waitFor, 10*time.Millisecond)
	_, all := w.Changed()
	require.True(t, all, "the start of listening reports all")
	parts, all := w.Changed()
	require.False(t, all)
	require.Empty(t, parts)
}

func listening(t *testing.T, reg *prometheus.Registry) bool {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "trigger_job_watch_listening" {
			return mf.GetMetric()[0].GetGauge().GetValue() == 1
		}
	}
	return false
}

// TestChangeWatchReportsAppliedPartitions: a job event applied on any
// node reaches the watch as its partition; until the watch listens,
// everything counts as changed.
func TestChangeWatchReportsAppliedPartitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, reg, _ := startWatch(t, e)
	quiet(t, w, reg)

	base := ts("2030-03-10T10:00:00Z")
	a, b := newJob(base), newJob(base)
	e.apply(t, created(a), store.Upserted)
	e.apply(t, created(b), store.Upserted)
	want := map[int]bool{e.state(t, a).Partition: true, e.state(t, b).Partition: true}
	got := map[int]bool{}
	require.Eventually(t, func() bool {
		parts, all := w.Changed()
		require.False(t, all)
		for _, p := range parts {
			got[p] = true
		}
		return len(got) == len(want)
	}, waitFor, 10*time.Millisecond)
	require.Equal(t, want, got)

	// A pause is a change of the row too.
	e.apply(t, event(kindPaused, a, 2, base), store.Upserted)
	require.Eventually(t, func() bool {
		parts, _ := w.Changed()
		return len(parts) == 1 && parts[0] == e.state(t, a).Partition
	}, waitFor, 10*time.Millisecond)
}

// TestChangeWatchReportsAllAfterItsConnectionDies: changes committed while
// the watch's connection is gone cannot be heard, so it reports all until
// it listens again, and once more then.
func TestChangeWatchReportsAllAfterItsConnectionDies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, reg, _ := startWatch(t, e)
	quiet(t, w, reg)

	var schema string
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT current_schema()`).Scan(&schema))
	var killed int
	require.NoError(t, e.pool.QueryRow(t.Context(), `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query LIKE 'LISTEN %' || $1 || '%'`, schema).Scan(&killed))
	require.Equal(t, 1, killed)

	_, all := w.Changed()
	if !all {
		// The watch has not noticed yet: it does at once, its read fails.
		require.Eventually(t, func() bool { return !listening(t, reg) }, waitFor, time.Millisecond)
		_, all = w.Changed()
	}
	require.True(t, all)
	quiet(t, w, reg) // back, and says so by reporting all once
}

// TestChangeWatchStopsWithADeadServer: Run returns at once when its
// context ends, also while it cannot connect.
func TestChangeWatchStopsWithADeadServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.pool.Config()
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", 1 // nothing listens there
	bad, err := pgxpool.NewWithConfig(t.Context(), cfg)       // connects lazily
	require.NoError(t, err)
	t.Cleanup(bad.Close)
	w, err := store.NewChangeWatch(store.ChangeWatchOptions{Pool: bad})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	time.Sleep(100 * time.Millisecond) // let it fail to connect at least once
	_, all := w.Changed()
	require.True(t, all)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Run did not return")
	}
}
