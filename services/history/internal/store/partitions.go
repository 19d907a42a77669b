package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// partitionedTables are the tables partitioned by day of nominal_time; each
// day has one partition of each, named <table>_pYYYYMMDD.
var partitionedTables = [...]string{"executions", "attempts"}

const partitionLayout = "20060102"

// MaintainResult says what Maintain changed.
type MaintainResult struct {
	// Created and Dropped are the days whose partitions were created or
	// dropped.
	Created, Dropped []time.Time
	// Days is how many days have partitions afterwards.
	Days int
}

// Maintain makes the partitions match now: every day from the retention
// cutoff to Ahead days after today exists, and every day wholly older than
// the cutoff is dropped (DROP TABLE of the day's partitions: retention never
// deletes rows, so it costs no vacuum and no bloat). It is idempotent and
// safe to run from several replicas at once (a transaction-level advisory
// lock per schema serialises them).
func (s *Store) Maintain(ctx context.Context, now time.Time) (MaintainResult, error) {
	var res MaintainResult
	cutoff := s.Cutoff(now)
	last := day(now).AddDate(0, 0, s.ahead)
	var want []time.Time
	for d := cutoff; !d.After(last); d = d.AddDate(0, 0, 1) {
		want = append(want, d)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = MaintainResult{}
		if err := s.lockPartitions(ctx, tx); err != nil {
			return err
		}
		have, err := existingDays(ctx, tx)
		if err != nil {
			return err
		}
		for _, d := range have {
			if d.Before(cutoff) {
				if err := dropDay(ctx, tx, d); err != nil {
					return err
				}
				res.Dropped = append(res.Dropped, d)
			}
		}
		for _, d := range want {
			if !slices.ContainsFunc(have, d.Equal) {
				if err := createDay(ctx, tx, d); err != nil {
					return err
				}
				res.Created = append(res.Created, d)
			}
		}
		res.Days = len(have) - len(res.Dropped) + len(res.Created)
		return nil
	})
	if err != nil {
		return MaintainResult{}, fmt.Errorf("maintain partitions: %w", err)
	}
	s.mu.Lock()
	for _, d := range res.Dropped {
		delete(s.days, d)
	}
	for _, d := range want {
		s.days[d] = true
	}
	s.mu.Unlock()
	return res, nil
}

// Days returns the days that have partitions, oldest first.
func (s *Store) Days(ctx context.Context) ([]time.Time, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	return existingDays(ctx, tx)
}

// ensureDays creates the partitions of days that are missing (an event
// about a slot beyond the days Maintain created ahead, such as a one-off job
// due in a month). Days already known are skipped without a query.
func (s *Store) ensureDays(ctx context.Context, days []time.Time) error {
	s.mu.Lock()
	var missing []time.Time
	for _, d := range days {
		if !s.days[d] {
			missing = append(missing, d)
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.lockPartitions(ctx, tx); err != nil {
			return err
		}
		have, err := existingDays(ctx, tx)
		if err != nil {
			return err
		}
		for _, d := range missing {
			if !slices.ContainsFunc(have, d.Equal) {
				if err := createDay(ctx, tx, d); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create partitions: %w", err)
	}
	s.mu.Lock()
	for _, d := range missing {
		s.days[d] = true
	}
	s.mu.Unlock()
	return nil
}

// lockPartitions takes the schema's partition lock for the transaction.
// Advisory locks are database-wide, so the key is derived from the schema.
func (s *Store) lockPartitions(ctx context.Context, tx pgx.Tx) error {
	h := fnv.New64a()
	h.Write([]byte("cronmesh.history.partitions/" + s.schema))
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(h.Sum64()))
	return err
}

// existingDays lists the days with an executions partition, oldest first.
func existingDays(ctx context.Context, tx pgx.Tx) ([]time.Time, error) {
	rows, err := tx.Query(ctx, `
		SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'executions'::regclass`)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var days []time.Time
	for _, n := range names {
		suffix, ok := strings.CutPrefix(n, "executions_p")
		if !ok {
			continue
		}
		d, err := time.Parse(partitionLayout, suffix)
		if err != nil {
			continue // not one of ours
		}
		days = append(days, d)
	}
	slices.SortFunc(days, time.Time.Compare)
	return days, nil
}

func partitionName(table string, d time.Time) string {
	return pgx.Identifier{table + "_p" + d.Format(partitionLayout)}.Sanitize()
}

func createDay(ctx context.Context, tx pgx.Tx, d time.Time) error {
	for _, t := range partitionedTables {
		sql := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')",
			partitionName(t, d), t, d.Format(time.RFC3339), d.AddDate(0, 0, 1).Format(time.RFC3339))
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("create partition of %s for %s: %w", t, d.Format(time.DateOnly), err)
		}
	}
	return nil
}

func dropDay(ctx context.Context, tx pgx.Tx, d time.Time) error {
	for _, t := range partitionedTables {
		if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+partitionName(t, d)); err != nil {
			return fmt.Errorf("drop partition of %s for %s: %w", t, d.Format(time.DateOnly), err)
		}
	}
	return nil
}
