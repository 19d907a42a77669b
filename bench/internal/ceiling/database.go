package ceiling

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cronmesh/cronmesh/bench/internal/pause"
)

// DatabaseOptions configure the PostgreSQL measurement.
type DatabaseOptions struct {
	Pool     *pgxpool.Pool
	Schema   string        // created for the measurement and dropped afterwards
	Batch    int           // rows per INSERT, one transaction each (default 1,000)
	Writers  int           // concurrent writers (default 4, the trigger's in-flight commits)
	Duration time.Duration // measured time after a 2 s warm-up (default 15 s)
}

// DatabaseResult is the measured database ceiling.
type DatabaseResult struct {
	Rows, Commits int
	Elapsed       time.Duration
	Batch         int
}

// RowsPerSecond is rows committed per second.
func (r DatabaseResult) RowsPerSecond() float64 { return float64(r.Rows) / r.Elapsed.Seconds() }

// Database inserts batches of rows into a table with the columns and
// primary key of the trigger's ledger (job_id, nominal_time, kind,
// execution_id, record_time, epoch, reason), as the trigger does: one
// `INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING RETURNING` a
// batch, each its own transaction, Writers at a time, for Duration. The
// trigger's commit also advances the jobs and writes the outbox, so a slot
// costs it more than one row here: the result is a ceiling, not a target.
func Database(ctx context.Context, o DatabaseOptions) (DatabaseResult, error) {
	o.Batch = cmp.Or(o.Batch, 1000)
	o.Writers = cmp.Or(o.Writers, 4)
	o.Duration = cmp.Or(o.Duration, 15*time.Second)
	schema := pgx.Identifier{o.Schema}.Sanitize()
	if _, err := o.Pool.Exec(ctx, `CREATE SCHEMA `+schema+`;
		CREATE TABLE `+schema+`.ledger (
			job_id uuid NOT NULL, nominal_time timestamptz NOT NULL, kind smallint NOT NULL,
			execution_id uuid NOT NULL, record_time timestamptz NOT NULL, epoch bigint NOT NULL,
			reason text NOT NULL DEFAULT '', PRIMARY KEY (job_id, nominal_time))`); err != nil {
		return DatabaseResult{}, fmt.Errorf("ceiling: postgresql: %w", err)
	}
	defer func() {
		_, _ = o.Pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+schema+` CASCADE`)
	}()
	insert := `INSERT INTO ` + schema + `.ledger (job_id, nominal_time, kind, execution_id, record_time, epoch, reason)
		SELECT id, nominal, kind, exec, $7, epoch, reason
		FROM unnest($1::uuid[], $2::timestamptz[], $3::smallint[], $4::uuid[], $5::bigint[], $6::text[])
			AS u(id, nominal, kind, exec, epoch, reason)
		ON CONFLICT DO NOTHING
		RETURNING execution_id::text`

	var rows, commits atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, o.Writers)
	base := time.Now().UTC().Truncate(time.Second)
	for w := range o.Writers {
		wg.Go(func() {
			ids := make([]string, o.Batch)
			nominals := make([]time.Time, o.Batch)
			kinds := make([]int16, o.Batch)
			execs := make([]string, o.Batch)
			epochs := make([]int64, o.Batch)
			reasons := make([]string, o.Batch)
			for round := 0; runCtx.Err() == nil; round++ {
				for i := range o.Batch {
					// Each writer its own jobs, each round its own second:
					// every row is new, as every fired slot is.
					ids[i] = uuid.NewSHA1(uuid.Nil, fmt.Appendf(nil, "%d/%d", w, i)).String()
					nominals[i] = base.Add(time.Duration(round) * time.Second)
					kinds[i] = 1
					execs[i] = uuid.NewString()
					epochs[i] = 1
				}
				var inserted []string
				err := pgx.BeginFunc(runCtx, o.Pool, func(tx pgx.Tx) error {
					r, err := tx.Query(runCtx, insert, ids, nominals, kinds, execs, epochs, reasons, time.Now())
					if err != nil {
						return err
					}
					inserted, err = pgx.CollectRows(r, pgx.RowTo[string])
					return err
				})
				if err != nil {
					if runCtx.Err() == nil {
						errs <- err
					}
					return
				}
				rows.Add(int64(len(inserted)))
				commits.Add(1)
			}
		})
	}
	if err := pause.For(ctx, 2*time.Second); err != nil {
		return DatabaseResult{}, err
	}
	r0, c0, t0 := rows.Load(), commits.Load(), time.Now()
	if err := pause.For(ctx, o.Duration); err != nil {
		return DatabaseResult{}, err
	}
	result := DatabaseResult{Rows: int(rows.Load() - r0), Commits: int(commits.Load() - c0), Elapsed: time.Since(t0), Batch: o.Batch}
	stop()
	wg.Wait()
	select {
	case err := <-errs:
		return result, fmt.Errorf("ceiling: postgresql: %w", err)
	default:
	}
	return result, nil
}
