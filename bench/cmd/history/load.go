package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/postgres"
)

// loadColumns are the executions columns COPY fills.
var loadColumns = []string{"nominal_time", "execution_id", "namespace", "job_id", "job_display_name", "trigger_kind",
	"status", "attempt", "rank", "fire_time", "start_time", "duration_us", "response_status", "response_excerpt", "reason",
	"trace_id", "update_time"}

// loadDays returns the days of the load, oldest first, ending today.
func loadDays(o options) []time.Time {
	today := time.Now().UTC().Truncate(24 * time.Hour)
	days := make([]time.Time, o.days)
	for i := range days {
		days[i] = today.AddDate(0, 0, i-o.days+1)
	}
	return days
}

func loadJobs(o options) []string {
	n := o.jobs
	if n == 0 {
		n = (o.executions + o.days*1440 - 1) / (o.days * 1440)
	}
	jobs := make([]string, n)
	for i := range jobs {
		// Deterministic, so query can name the jobs without reading them.
		jobs[i] = uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "history-bench-job-%d", i)).String()
	}
	return jobs
}

// load fills the schema's executions with o.executions rows over o.days
// days, every job running every minute, the way a bulk load should go: each
// day's partition is built as a plain table (COPY, then its indexes built
// in one pass each) and attached to the partitioned table, whose matching
// indexes it adopts. Inserting 10,000,000 rows through the service would
// measure the ingest again (measured separately), not the queries. Only
// executions are loaded: the queries measured do not read attempts.
func load(ctx context.Context, out io.Writer, o options) error {
	if o.schema == "" {
		return errors.New("--schema is required")
	}
	pool, err := postgres.Connect(ctx, postgres.Options{URL: o.postgresURL, Schema: o.schema})
	if err != nil {
		return err
	}
	defer pool.Close()
	days, jobs := loadDays(o), loadJobs(o)
	perDay := min(len(jobs)*1440, (o.executions+o.days-1)/o.days)
	start := time.Now()
	var rows atomic.Int64
	work := make(chan time.Time)
	errs := make(chan error, o.workers)
	var wg sync.WaitGroup
	for range o.workers {
		wg.Go(func() {
			for d := range work {
				n, err := loadDay(ctx, pool, d, jobs, perDay, o.namespace)
				if err != nil {
					errs <- fmt.Errorf("day %s: %w", d.Format(time.DateOnly), err)
					return
				}
				rows.Add(n)
			}
		})
	}
feed:
	for _, d := range days {
		select {
		case work <- d:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "ANALYZE executions"); err != nil {
		return err
	}
	var size string
	if err := pool.QueryRow(ctx, `SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid))) FROM pg_inherits WHERE inhparent = 'executions'::regclass`).Scan(&size); err != nil {
		return err
	}
	elapsed := time.Since(start)
	fmt.Fprintf(out, "\n### Load\n\n%d executions (%d jobs, each every minute, %d days ending today; 94%% succeeded, 2%% dead, 2.5%% failed, 0.5%% retrying, 1%% missed) loaded by COPY into plain per-day tables, indexed, then attached as partitions, %d days at once: %.0f s (%.0f rows/s including the index builds). Executions table with indexes: %s.\n",
		rows.Load(), len(jobs), o.days, o.workers, elapsed.Seconds(), float64(rows.Load())/elapsed.Seconds(), size)
	return nil
}

func loadDay(ctx context.Context, pool *pgxpool.Pool, d time.Time, jobs []string, perDay int, namespace string) (int64, error) {
	name := "executions_p" + d.Format("20060102")
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+ident+" (LIKE executions INCLUDING DEFAULTS)"); err != nil {
		return 0, err
	}
	i := 0
	n, err := pool.CopyFrom(ctx, pgx.Identifier{name}, loadColumns, pgx.CopyFromFunc(func() ([]any, error) {
		if i >= perDay {
			return nil, nil
		}
		j, minute := i%len(jobs), i/len(jobs)
		i++
		nominal := d.Add(time.Duration(minute)*time.Minute + time.Duration(j%60)*time.Second)
		r := (j*7919 + minute*31) % 1000
		var (
			status, rank   int16 = 2, 3
			attempt        int32 = 1
			reason, excerp string
			respStatus     int32 = 200
		)
		switch {
		case r < 940:
			excerp = fmt.Sprintf(`{"status":"ok","processed":%d}`, (j*31+minute)%5000)
		case r < 960:
			status, rank, attempt, respStatus = 5, 5, 6, 500
			reason = "HTTP 500"
			excerp = fmt.Sprintf("internal error: deadlock detected while updating orders_%d", (j*131+minute)%100000)
		case r < 985:
			status, rank, respStatus = 4, 2, 0
			reason = fmt.Sprintf("dial tcp 10.0.%d.%d:443: connection refused", j%256, minute%256)
		case r < 990:
			status, rank, respStatus = 3, 2, 503
			reason, excerp = "HTTP 503", "upstream temporarily unavailable"
		default:
			status, rank, attempt, respStatus = 7, 6, 0, 0
			reason = "older than the catch-up window: no trigger held the partition"
		}
		trigger := int16(1)
		if r%100 == 7 {
			trigger = 2
		}
		id := uuid.MustParse(execid.For(jobs[j], nominal))
		var fire, startT any
		var dur any
		if status != 7 {
			fire, startT = nominal.Add(3*time.Millisecond), nominal.Add(5*time.Millisecond)
			dur = int64(5000 + (r*997)%495000)
		}
		return []any{nominal, pgtype.UUID{Bytes: id, Valid: true}, namespace, jobs[j], "bench job", trigger,
			status, attempt, rank, fire, startT, dur, respStatus, excerp, reason,
			fmt.Sprintf("%016x%016x", j, i), nominal.Add(time.Second)}, nil
	}))
	if err != nil {
		return 0, err
	}
	for _, ddl := range []string{
		"ALTER TABLE %s ADD PRIMARY KEY (nominal_time, execution_id)",
		"CREATE INDEX ON %s (namespace, job_id, nominal_time DESC, execution_id DESC)",
		"CREATE INDEX ON %s (namespace, nominal_time DESC, execution_id DESC)",
		"CREATE INDEX ON %s (execution_id)",
		"CREATE INDEX ON %s USING gin ((reason || E'\\n' || response_excerpt) public.gin_trgm_ops)",
		"ALTER TABLE executions ATTACH PARTITION %s FOR VALUES FROM ('" + d.Format(time.RFC3339) + "') TO ('" + d.AddDate(0, 0, 1).Format(time.RFC3339) + "')",
	} {
		if _, err := pool.Exec(ctx, fmt.Sprintf(ddl, ident)); err != nil {
			return 0, fmt.Errorf("%s: %w", fmt.Sprintf(ddl, ident), err)
		}
	}
	att := pgx.Identifier{"attempts_p" + d.Format("20060102")}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+att+" PARTITION OF attempts FOR VALUES FROM ('"+d.Format(time.RFC3339)+"') TO ('"+d.AddDate(0, 0, 1).Format(time.RFC3339)+"')"); err != nil {
		return 0, err
	}
	return n, nil
}

// cleanup drops the run's schema and deletes its queue and exchange.
func cleanup(ctx context.Context, o options, queue string) error {
	var errs []error
	if o.schema != "" {
		conn, err := pgx.Connect(ctx, o.postgresURL)
		if err == nil {
			_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{o.schema}.Sanitize()+" CASCADE")
			_ = conn.Close(ctx)
		}
		errs = append(errs, err)
	}
	if o.exchange != "" || queue != "" {
		conn, err := amqp091.Dial(o.amqpURL)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if queue != "" {
			_, err = ch.QueueDelete(queue, false, false, false)
			errs = append(errs, err)
		}
		if o.exchange != "" {
			errs = append(errs, ch.ExchangeDelete(o.exchange, false, false))
		}
	}
	return errors.Join(errs...)
}
