package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cronmesh/cronmesh/bench/internal/report"
)

// drainPoll is how often the outbox is checked while waiting for the relay:
// often enough to resolve drain times of a few seconds.
const drainPoll = 250 * time.Millisecond

// outboxEmpty reports whether the outbox holds no event. It asks EXISTS
// rather than count(*) = 0: a count of a 300,000-event backlog is a parallel
// sequential scan of ~100 ms, and four of them a second took a fifth of the
// machine from the relay being measured. count(*) only feeds the progress
// log, every few seconds.
func outboxEmpty(ctx context.Context, b *bench, db *pgxpool.Pool) (bool, error) {
	var pending bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+b.table("outbox")+`)`).Scan(&pending); err != nil {
		return false, fmt.Errorf("check the outbox: %w", err)
	}
	return !pending, nil
}

// table qualifies a table of the registry's schema.
func (b *bench) table(name string) string {
	return pgx.Identifier{b.opts.schema, name}.Sanitize()
}

func outboxCount(ctx context.Context, b *bench, db *pgxpool.Pool) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+b.table("outbox")).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the outbox: %w", err)
	}
	return n, nil
}

// waitDrained returns once the outbox is empty, or an error after timeout.
func waitDrained(ctx context.Context, b *bench, db *pgxpool.Pool, timeout time.Duration) error {
	_, err := drainedAt(ctx, b, db, timeout)
	return err
}

// drainedAt polls the outbox until it is empty and returns when it first
// was, logging the backlog every few seconds.
func drainedAt(ctx context.Context, b *bench, db *pgxpool.Pool, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		empty, err := outboxEmpty(ctx, b, db)
		if err != nil {
			return time.Time{}, err
		}
		if empty {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			n, _ := outboxCount(ctx, b, db)
			return time.Time{}, fmt.Errorf("the outbox still holds %d events after %s: is the registry's relay publishing? (see its log)", n, timeout)
		}
		if time.Since(lastLog) >= 10*time.Second {
			if n, err := outboxCount(ctx, b, db); err == nil {
				b.logf("outbox: %s events waiting", report.Num(n))
			}
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// measureDrain waits for the events of run to leave the outbox.
func measureDrain(ctx context.Context, b *bench, db *pgxpool.Pool, run *batchRun, timeout time.Duration) (drainResult, error) {
	done, err := drainedAt(ctx, b, db, timeout)
	if err != nil {
		return drainResult{}, err
	}
	return drainResult{events: run.jobs, done: done}, nil
}

func jobCount(ctx context.Context, b *bench, db *pgxpool.Pool) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+b.table("jobs")).Scan(&n); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	return n, nil
}

// relationSize is the on-disk size of one table or index.
type relationSize struct {
	name, kind string
	bytes      int64
}

// relationSizes lists the registry schema's tables (with TOAST, without
// indexes) and indexes, largest first, and the total of each table with its
// indexes (pg_total_relation_size).
func relationSizes(ctx context.Context, b *bench, db *pgxpool.Pool) ([]relationSize, error) {
	rows, err := db.Query(ctx, `
		SELECT c.relname,
		       CASE c.relkind WHEN 'i' THEN 'index of ' || t.relname ELSE 'table' END,
		       CASE c.relkind WHEN 'i' THEN pg_relation_size(c.oid) ELSE pg_table_size(c.oid) END
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_index x ON x.indexrelid = c.oid
		LEFT JOIN pg_class t ON t.oid = x.indrelid
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'i')
		UNION ALL
		SELECT c.relname || ' (total)', 'table + indexes', pg_total_relation_size(c.oid)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r'
		ORDER BY 3 DESC`, b.opts.schema)
	if err != nil {
		return nil, fmt.Errorf("read relation sizes: %w", err)
	}
	sizes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (relationSize, error) {
		var s relationSize
		err := r.Scan(&s.name, &s.kind, &s.bytes)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("read relation sizes: %w", err)
	}
	return sizes, nil
}

// standInForAutovacuum runs VACUUM (ANALYZE) on the registry's tables when
// the server has autovacuum off, and says so in the returned report line
// ("" when autovacuum is on). Production servers run autovacuum, which
// after a bulk load analyzes jobs (without statistics the planner guesses
// how selective ListJobs filters are) and vacuums the outbox (every event is
// inserted and deleted once); a server with it off (CI configurations do
// that) would otherwise measure a database no deployment has.
func standInForAutovacuum(ctx context.Context, b *bench, db *pgxpool.Pool) (string, error) {
	var on string
	if err := db.QueryRow(ctx, `SELECT current_setting('autovacuum')`).Scan(&on); err != nil {
		return "", fmt.Errorf("read the autovacuum setting: %w", err)
	}
	if on == "on" {
		return "", nil
	}
	start := time.Now()
	for _, t := range []string{"jobs", "outbox", "job_requests"} {
		if _, err := db.Exec(ctx, `VACUUM (ANALYZE) `+b.table(t)); err != nil {
			return "", fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	return fmt.Sprintf("This PostgreSQL server runs with autovacuum off, so the benchmark ran `VACUUM (ANALYZE)` on jobs, outbox and job_requests "+
		"in its place (%s), as autovacuum would have on a production server.\n", time.Since(start).Round(100*time.Millisecond)), nil
}
