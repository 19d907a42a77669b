package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/daypart"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

func TestMaintainKeepsTheLedgerForItsRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keep := store.Retention{Ledger: 2 * 24 * time.Hour, Tombstones: 7 * 24 * time.Hour}
	res, err := e.store.Maintain(t.Context(), ts("2030-03-08T00:00:00Z"), keep)
	require.NoError(t, err)
	require.Len(t, res.Created, 6, "2030-03-06 .. 2030-03-11")

	ledgerRow := func(nominal string) uuid.UUID {
		id := uuid.New()
		_, err := e.pool.Exec(t.Context(), `INSERT INTO ledger (job_id, nominal_time, kind, execution_id, record_time, epoch)
			VALUES ($1, $2, 1, $3, $2, 1)`, id, ts(nominal), uuid.New())
		require.NoError(t, err)
		return id
	}
	dropped := ledgerRow("2030-03-06T10:00:00Z")
	kept := []uuid.UUID{ledgerRow("2030-03-08T00:00:00Z"), ledgerRow("2030-03-10T23:59:59Z")}
	ancient := ledgerRow("2029-01-01T00:00:00Z") // a backfill: the default partition
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM ledger_default`))

	oldGone := newJob(ts("2030-02-01T00:00:00Z"))
	e.apply(t, created(oldGone), store.Upserted)
	e.apply(t, event(kindDeleted, oldGone, 2, ts("2030-03-01T00:00:00Z")), store.Upserted)
	recentGone := newJob(ts("2030-02-01T00:00:00Z"))
	e.apply(t, created(recentGone), store.Upserted)
	e.apply(t, event(kindDeleted, recentGone, 2, ts("2030-03-09T00:00:00Z")), store.Upserted)
	live := newJob(ts("2030-02-01T00:00:00Z"))
	e.apply(t, created(live), store.Upserted)

	res, err = e.store.Maintain(t.Context(), ts("2030-03-10T12:00:00Z"), keep)
	require.NoError(t, err)
	require.Equal(t, []time.Time{ts("2030-03-06T00:00:00Z"), ts("2030-03-07T00:00:00Z")}, res.Dropped)
	require.Equal(t, []time.Time{ts("2030-03-12T00:00:00Z"), ts("2030-03-13T00:00:00Z")}, res.Created)
	require.Equal(t, int64(1), res.DefaultTrimmed)
	require.Equal(t, int64(1), res.Tombstones)

	require.Zero(t, e.count(t, `SELECT count(*) FROM ledger WHERE job_id = ANY($1)`, []uuid.UUID{dropped, ancient}))
	require.Equal(t, 2, e.count(t, `SELECT count(*) FROM ledger WHERE job_id = ANY($1)`, kept))
	days, err := daypart.Set{Tables: []string{"ledger"}, LockName: "x"}.Days(t.Context(), e.pool)
	require.NoError(t, err)
	require.Equal(t, ts("2030-03-08T00:00:00Z"), days[0])
	require.Equal(t, ts("2030-03-13T00:00:00Z"), days[len(days)-1])

	// The old tombstone is gone, the recent one and the live job stay.
	require.Zero(t, e.count(t, `SELECT count(*) FROM jobs WHERE job_id = $1`, oldGone.Id))
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM jobs WHERE job_id = $1 AND deleted`, recentGone.Id))
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM jobs WHERE job_id = $1 AND NOT deleted`, live.Id))

	// A firing commit records into its day's partition.
	job, d := e.setup(t)
	require.Equal(t, ts("2030-03-10T10:05:00Z"), d.NextFire)
	_, err = e.store.Commit(t.Context(), fences(1), []firing.Advance{{Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}}}, d.NextFire)
	require.NoError(t, err)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM ledger_p20300310 WHERE job_id = $1`, job.Id))
}
