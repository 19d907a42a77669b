// Package daypart keeps tables that are range-partitioned by day (on a
// timestamptz column, in UTC) at the right set of partitions: every day from
// a retention cutoff to some days ahead exists, and every day wholly older
// than the cutoff is dropped. Dropping a day's partitions is how retention
// works at tens of millions of rows a day: a DROP TABLE costs no DELETE, no
// vacuum and no bloat.
//
// Each day has one partition per table, named <table>_pYYYYMMDD; a table
// may have a DEFAULT partition named <table>_default for rows outside every
// day kept, which TrimDefault empties of old rows. Tables are given
// unqualified: the connection's search_path selects the schema.
package daypart

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const layout = "20060102"

// Set is a group of tables partitioned by the same days. The first table
// is the one whose partitions are listed to learn which days exist.
type Set struct {
	// Tables are the partitioned parents, created by the service's
	// migrations with PARTITION BY RANGE (<timestamptz column>). Required.
	Tables []string
	// LockName identifies the set for the transaction-level advisory lock
	// that serialises maintenance of several replicas; advisory locks are
	// database-wide, so include the schema. Required.
	LockName string
}

// Result says what Maintain changed.
type Result struct {
	// Created and Dropped are the days whose partitions were created or
	// dropped, oldest first.
	Created, Dropped []time.Time
	// Days is how many days have partitions afterwards.
	Days int
}

// Day is the UTC midnight starting t's day.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// Maintain creates the partitions of every day from Day(cutoff) to
// Day(last) that has none, and drops the days before Day(cutoff), all in one
// transaction under the set's advisory lock, so it is idempotent and safe
// to run from several replicas at once.
func (s Set) Maintain(ctx context.Context, db Beginner, cutoff, last time.Time) (Result, error) {
	if err := s.validate(); err != nil {
		return Result{}, err
	}
	cutoff, last = Day(cutoff), Day(last)
	var res Result
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		res = Result{}
		if err := s.lock(ctx, tx); err != nil {
			return err
		}
		have, err := s.days(ctx, tx)
		if err != nil {
			return err
		}
		for _, d := range have {
			if d.Before(cutoff) {
				if err := s.drop(ctx, tx, d); err != nil {
					return err
				}
				res.Dropped = append(res.Dropped, d)
			}
		}
		for d := cutoff; !d.After(last); d = d.AddDate(0, 0, 1) {
			if !slices.ContainsFunc(have, d.Equal) {
				if err := s.create(ctx, tx, d); err != nil {
					return err
				}
				res.Created = append(res.Created, d)
			}
		}
		res.Days = len(have) - len(res.Dropped) + len(res.Created)
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("maintain the partitions of %s: %w", strings.Join(s.Tables, ", "), err)
	}
	return res, nil
}

// Ensure creates the partitions of the given days that are missing (for
// rows beyond the days Maintain created ahead), under the same lock.
func (s Set) Ensure(ctx context.Context, db Beginner, days []time.Time) error {
	if err := s.validate(); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := s.lock(ctx, tx); err != nil {
			return err
		}
		have, err := s.days(ctx, tx)
		if err != nil {
			return err
		}
		for _, d := range days {
			d = Day(d)
			if !slices.ContainsFunc(have, d.Equal) {
				if err := s.create(ctx, tx, d); err != nil {
					return err
				}
				have = append(have, d)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create partitions of %s: %w", strings.Join(s.Tables, ", "), err)
	}
	return nil
}

// Days returns the days that have partitions, oldest first.
func (s Set) Days(ctx context.Context, db Beginner) ([]time.Time, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	var days []time.Time
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		days, err = s.days(ctx, tx)
		return err
	})
	return days, err
}

// TrimBatch bounds the rows of one DELETE of TrimDefault, so that trimming
// a large backlog never holds locks or bloats a transaction for long.
const TrimBatch = 10_000

// TrimDefault deletes the rows of each table's DEFAULT partition
// (<table>_default) whose column is before t, TrimBatch rows a statement,
// and returns how many. The default partition holds what no day kept
// covers (old backfills, rows from before partitioning), so it is kept
// small by DELETE while the days are dropped whole.
func (s Set) TrimDefault(ctx context.Context, db Execer, column string, t time.Time) (int64, error) {
	if err := s.validate(); err != nil {
		return 0, err
	}
	var total int64
	for _, table := range s.Tables {
		def := pgx.Identifier{table + "_default"}.Sanitize()
		sql := fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid IN (SELECT ctid FROM %[1]s WHERE %[2]s < $1 LIMIT $2)`,
			def, pgx.Identifier{column}.Sanitize())
		for {
			tag, err := db.Exec(ctx, sql, t, TrimBatch)
			if err != nil {
				return total, fmt.Errorf("trim the default partition of %s: %w", table, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < TrimBatch {
				break
			}
		}
	}
	return total, nil
}

// Execer runs statements: a *pgxpool.Pool or a *pgx.Conn.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Beginner starts transactions: a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

func (s Set) validate() error {
	if len(s.Tables) == 0 || s.LockName == "" {
		return errors.New("daypart: Set needs Tables and a LockName")
	}
	return nil
}

func (s Set) lock(ctx context.Context, tx pgx.Tx) error {
	h := fnv.New64a()
	h.Write([]byte("cronmesh.daypart/" + s.LockName))
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(h.Sum64()))
	return err
}

// days lists the days with a partition of the first table, oldest first;
// partitions not named by this package (a DEFAULT partition) are ignored.
func (s Set) days(ctx context.Context, tx pgx.Tx) ([]time.Time, error) {
	rows, err := tx.Query(ctx, `
		SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass`, s.Tables[0])
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var days []time.Time
	for _, n := range names {
		suffix, ok := strings.CutPrefix(n, s.Tables[0]+"_p")
		if !ok {
			continue
		}
		if d, err := time.Parse(layout, suffix); err == nil {
			days = append(days, d)
		}
	}
	slices.SortFunc(days, time.Time.Compare)
	return days, nil
}

// PartitionName is the partition of table for day d (quoted).
func PartitionName(table string, d time.Time) string {
	return pgx.Identifier{table + "_p" + Day(d).Format(layout)}.Sanitize()
}

func (s Set) create(ctx context.Context, tx pgx.Tx, d time.Time) error {
	for _, t := range s.Tables {
		sql := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')",
			PartitionName(t, d), pgx.Identifier{t}.Sanitize(), d.Format(time.RFC3339), d.AddDate(0, 0, 1).Format(time.RFC3339))
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("create the partition of %s for %s: %w", t, d.Format(time.DateOnly), err)
		}
	}
	return nil
}

func (s Set) drop(ctx context.Context, tx pgx.Tx, d time.Time) error {
	for _, t := range s.Tables {
		if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+PartitionName(t, d)); err != nil {
			return fmt.Errorf("drop the partition of %s for %s: %w", t, d.Format(time.DateOnly), err)
		}
	}
	return nil
}
