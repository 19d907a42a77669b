package daypart_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/daypart"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

func day(s string) time.Time {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return d
}

func TestMaintain(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.New(t)
	for _, table := range []string{"events", "details"} {
		_, err := pool.Exec(t.Context(), fmt.Sprintf(`CREATE TABLE %s (at timestamptz NOT NULL, v int) PARTITION BY RANGE (at)`, table))
		require.NoError(t, err)
	}
	_, err := pool.Exec(t.Context(), `CREATE TABLE events_default PARTITION OF events DEFAULT`)
	require.NoError(t, err)
	set := daypart.Set{Tables: []string{"events", "details"}, LockName: schema}

	res, err := set.Maintain(t.Context(), pool, day("2030-01-01"), day("2030-01-03").Add(13*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []time.Time{day("2030-01-01"), day("2030-01-02"), day("2030-01-03")}, res.Created)
	require.Empty(t, res.Dropped)
	require.Equal(t, 3, res.Days)

	// Rows land in their day's partition.
	_, err = pool.Exec(t.Context(), `INSERT INTO events VALUES ('2030-01-01T10:00:00Z', 1), ('2030-01-02T23:59:59Z', 2), ('2030-01-03T00:00:00Z', 3)`)
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM events_p20300102`).Scan(&n))
	require.Equal(t, 1, n)

	// Idempotent.
	res, err = set.Maintain(t.Context(), pool, day("2030-01-01"), day("2030-01-03"))
	require.NoError(t, err)
	require.Empty(t, res.Created)
	require.Empty(t, res.Dropped)

	// A day later: the first day is dropped, with its rows; the rest stay.
	res, err = set.Maintain(t.Context(), pool, day("2030-01-02").Add(time.Hour), day("2030-01-04"))
	require.NoError(t, err)
	require.Equal(t, []time.Time{day("2030-01-01")}, res.Dropped)
	require.Equal(t, []time.Time{day("2030-01-04")}, res.Created)
	require.Equal(t, 3, res.Days)
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM events`).Scan(&n))
	require.Equal(t, 2, n, "the dropped day's row is gone, the others stay")
	days, err := set.Days(t.Context(), pool)
	require.NoError(t, err)
	require.Equal(t, []time.Time{day("2030-01-02"), day("2030-01-03"), day("2030-01-04")}, days)
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FROM pg_inherits WHERE inhparent = 'details'::regclass`).Scan(&n))
	require.Equal(t, 3, n, "every table of the set follows")

	// Ensure adds a far day on demand; the DEFAULT partition is not a day.
	require.NoError(t, set.Ensure(t.Context(), pool, []time.Time{day("2030-02-01").Add(5 * time.Hour), day("2030-01-03")}))
	days, err = set.Days(t.Context(), pool)
	require.NoError(t, err)
	require.Equal(t, []time.Time{day("2030-01-02"), day("2030-01-03"), day("2030-01-04"), day("2030-02-01")}, days)
}

// TestTrimDefault: the default partition loses its rows before the time,
// over as many statements as it takes, and keeps the others; the days'
// partitions are not touched.
func TestTrimDefault(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.New(t)
	_, err := pool.Exec(t.Context(), `
		CREATE TABLE events (at timestamptz NOT NULL, done timestamptz NOT NULL) PARTITION BY RANGE (at);
		CREATE TABLE events_default PARTITION OF events DEFAULT`)
	require.NoError(t, err)
	set := daypart.Set{Tables: []string{"events"}, LockName: schema}
	_, err = set.Maintain(t.Context(), pool, day("2030-01-01"), day("2030-01-01"))
	require.NoError(t, err)
	old := 2*daypart.TrimBatch + 7 // more than one statement's worth
	_, err = pool.Exec(t.Context(), `INSERT INTO events SELECT '2029-01-01T00:00:00Z', '2030-01-01T00:00:00Z' FROM generate_series(1, $1)`, old)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), `
		INSERT INTO events VALUES ('2029-01-02T00:00:00Z', '2030-01-02T12:00:00Z'), ('2030-01-01T10:00:00Z', '2029-01-01T00:00:00Z')`)
	require.NoError(t, err)

	n, err := set.TrimDefault(t.Context(), pool, "done", day("2030-01-02"))
	require.NoError(t, err)
	require.Equal(t, int64(old), n)
	rows, err := pool.Query(t.Context(), `SELECT done FROM events ORDER BY done`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	require.NoError(t, err)
	require.Len(t, left, 2, "the default's newer row and the day's row, whatever its column")
	require.True(t, left[1].Equal(day("2030-01-02").Add(12*time.Hour)))

	_, err = daypart.Set{Tables: []string{"nothing"}, LockName: schema}.TrimDefault(t.Context(), pool, "done", day("2030-01-02"))
	require.Error(t, err, "a table without a default partition")
}

func TestMaintainConcurrently(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.New(t)
	_, err := pool.Exec(t.Context(), `CREATE TABLE events (at timestamptz NOT NULL) PARTITION BY RANGE (at)`)
	require.NoError(t, err)
	set := daypart.Set{Tables: []string{"events"}, LockName: schema}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			_, err := set.Maintain(t.Context(), pool, day("2030-01-01"), day("2030-01-10"))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "replicas maintaining at once do not collide")
	}
	days, err := set.Days(t.Context(), pool)
	require.NoError(t, err)
	require.Len(t, days, 10)
}

func TestSetValidates(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	_, err := daypart.Set{LockName: "x"}.Maintain(t.Context(), pool, time.Now(), time.Now())
	require.Error(t, err)
	_, err = daypart.Set{Tables: []string{"events"}}.Days(t.Context(), pool)
	require.Error(t, err)
}
