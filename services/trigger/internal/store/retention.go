package store

import (
	"context"
	"fmt"
	"time"

	"github.com/cronmesh/cronmesh/libs/daypart"
)

// LedgerDaysAhead is how many days after today have ledger partitions, so
// that a maintenance run missed for a day or two does not send the
// commits of a new day to the default partition.
const LedgerDaysAhead = 3

// retentionBatch bounds one DELETE of the tombstones, so that removing a
// large backlog never holds locks or bloats a transaction for long.
const retentionBatch = 10_000

// Retention says how long the ledger and the tombstones are kept.
type Retention struct {
	// Ledger: a slot's ledger row is kept until its day is this old. The
	// exactly-once defence of a slot lasts as long as its row.
	Ledger time.Duration
	// Tombstones: a deleted job's row is removed this long after its
	// deletion; a job event older than that delivered late could bring
	// the job back, so it should exceed any plausible queue backlog.
	Tombstones time.Duration
}

// MaintainResult says what Maintain did.
type MaintainResult struct {
	daypart.Result
	// DefaultTrimmed is the number of ledger rows deleted from the default
	// partition (rows older than every day kept).
	DefaultTrimmed int64
	// Tombstones is the number of tombstones removed.
	Tombstones int64
}

// Maintain applies the retention at time now: the ledger has a partition
// for every day from now-r.Ledger to LedgerDaysAhead days ahead, older days
// are dropped, the default partition loses its rows older than that, and
// tombstones older than r.Tombstones are removed. It is idempotent; several
// nodes running it at once queue on an advisory lock.
func (s *Store) Maintain(ctx context.Context, now time.Time, r Retention) (MaintainResult, error) {
	var res MaintainResult
	var schema string
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return res, fmt.Errorf("maintain: %w", err)
	}
	cutoff := daypart.Day(now.Add(-r.Ledger))
	days := daypart.Set{Tables: []string{"ledger"}, LockName: "trigger.ledger/" + schema}
	var err error
	if res.Result, err = days.Maintain(ctx, s.pool, cutoff, now.AddDate(0, 0, LedgerDaysAhead)); err != nil {
		return res, err
	}
	if res.DefaultTrimmed, err = days.TrimDefault(ctx, s.pool, "nominal_time", cutoff); err != nil {
		return res, err
	}
	if res.Tombstones, err = s.deleteInBatches(ctx, `
		DELETE FROM jobs WHERE job_id IN (
			SELECT job_id FROM jobs WHERE deleted AND update_time < $1 LIMIT $2)`, now.Add(-r.Tombstones)); err != nil {
		return res, fmt.Errorf("remove old tombstones: %w", err)
	}
	return res, nil
}

// deleteInBatches runs a DELETE taking ($1 cutoff, $2 limit) until it
// deletes fewer than a batch, and returns the rows deleted.
func (s *Store) deleteInBatches(ctx context.Context, sql string, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, sql, cutoff, retentionBatch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < retentionBatch {
			return total, nil
		}
	}
}
