package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/daypart"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/history/internal/store"
)

// writeCounts are PostgreSQL's counters of one day's partitions.
type writeCounts struct {
	execIns, execUpd, execHot int64
	attIns, attUpd, attHot    int64
}

// versions is the row versions written: every insert and every update.
func (c writeCounts) versions() int64 { return c.execIns + c.execUpd + c.attIns + c.attUpd }

// indexEntries is the index tuples those versions added: a version that is
// not a HOT update gets an entry in every index of its table (executions
// has five: the key, three B-trees and the trigram GIN index, which adds
// several trigrams per entry; attempts has its key).
func (c writeCounts) indexEntries() int64 {
	return 5*(c.execIns+c.execUpd-c.execHot) + (c.attIns + c.attUpd - c.attHot)
}

// rowWriteScenario is a stream of batches: each batch holds the next event
// of several executions, each execution's events in separate batches, as
// the dispatcher publishes them (the outcome a batch after the start).
type rowWriteScenario struct {
	name string
	// events of one execution, in the order they are published.
	events func(id, job string, nominal time.Time) []store.Event
	// together puts all the events of an execution in one batch; twice
	// ingests every batch twice (a redelivery).
	together, twice bool
	// want is the exact counts per execution that the store must write
	// (HOT updates are not asserted: they depend on the pages' room).
	wantExec, wantExecUpd, wantAtt, wantAttUpd int64
}

func singleAttempt(excerpt string) func(id, job string, nominal time.Time) []store.Event {
	return func(id, job string, nominal time.Time) []store.Event {
		base := store.Event{ExecutionID: id, JobID: job, Namespace: "ns", JobDisplayName: "bench", TriggerKind: 1,
			NominalTime: nominal, FireTime: nominal.Add(time.Millisecond), StartTime: nominal.Add(2 * time.Millisecond),
			TraceID: "0af7651916cd43dd8448eb211c80319c", Attempt: 1}
		started, done := base, base
		started.Kind, started.OccurTime = store.KindStarted, nominal.Add(2*time.Millisecond)
		done.Kind, done.OccurTime, done.Duration = store.KindSucceeded, nominal.Add(20*time.Millisecond), dur(18*time.Millisecond)
		done.ResponseStatus, done.ResponseExcerpt = 204, excerpt
		if excerpt != "" {
			done.ResponseStatus = 200
		}
		return []store.Event{started, done}
	}
}

func threeAttempts(id, job string, nominal time.Time) []store.Event {
	var out []store.Event
	for a := int32(1); a <= 3; a++ {
		base := store.Event{ExecutionID: id, JobID: job, Namespace: "ns", JobDisplayName: "bench", TriggerKind: 1,
			NominalTime: nominal, FireTime: nominal.Add(time.Millisecond), StartTime: nominal.Add(time.Duration(a) * time.Second),
			TraceID: "0af7651916cd43dd8448eb211c80319c", Attempt: a}
		started, done := base, base
		started.Kind, started.OccurTime = store.KindStarted, base.StartTime
		done.OccurTime, done.Duration = base.StartTime.Add(100*time.Millisecond), dur(100*time.Millisecond)
		if a < 3 {
			done.Kind, done.ResponseStatus, done.Reason, done.ResponseExcerpt = store.KindFailed, 503, "HTTP 503", "upstream busy"
			done.RetryScheduled, done.RetryDelay = true, dur(time.Second)
		} else {
			done.Kind, done.ResponseStatus, done.ResponseExcerpt = store.KindSucceeded, 200, "ok: 42 rows"
		}
		out = append(out, started, done)
	}
	return out
}

// TestRowWritesPerExecution counts the row versions the history writes per
// execution, from PostgreSQL's own counters (pg_stat_user_tables) of each
// scenario's day partitions, and logs them with -v: the numbers of ADR 0020.
func TestRowWritesPerExecution(t *testing.T) {
	t.Parallel()
	const (
		perScenario = 1000 // executions
		perBatch    = 100  // executions whose next event each batch holds
	)
	scenarios := []rowWriteScenario{
		{name: "1 attempt, empty body (204)", events: singleAttempt(""), wantExec: 1, wantExecUpd: 1},
		{name: "1 attempt, body", events: singleAttempt("ok: 42 rows"), wantExec: 1, wantExecUpd: 1},
		{name: "1 attempt, body, redelivered", events: singleAttempt("ok: 42 rows"), twice: true, wantExec: 1, wantExecUpd: 1},
		{name: "1 attempt, one batch", events: singleAttempt("ok: 42 rows"), together: true, wantExec: 1},
		{name: "3 attempts", events: threeAttempts, wantExec: 1, wantExecUpd: 5, wantAtt: 2},
		{name: "3 attempts, one batch", events: threeAttempts, together: true, wantExec: 1, wantAtt: 2},
	}
	ctx := t.Context()
	admin, schema := pgtest.New(t)
	migrations, err := store.Migrations()
	require.NoError(t, err)
	_, err = migrate.ApplyAll(ctx, admin, schema, migrations)
	require.NoError(t, err)

	// The store gets a pool of its own, closed before the counters are
	// read: a backend flushes its counters when it exits.
	pool, err := postgres.Connect(ctx, postgres.Options{URL: pgtest.URL(), Schema: schema})
	require.NoError(t, err)
	defer pool.Close()
	s, err := store.New(store.Options{Pool: pool, Schema: schema})
	require.NoError(t, err)
	_, err = s.Maintain(ctx, now)
	require.NoError(t, err)

	for i, sc := range scenarios {
		// Each scenario on a day of its own, so its partitions' counters
		// are its own.
		day := daypart.Day(now).AddDate(0, 0, -1-i)
		job := uuid.NewString()
		var execs [][]store.Event
		for n := range perScenario {
			nominal := day.Add(time.Duration(n) * time.Second)
			execs = append(execs, sc.events(execid.For(job, nominal), job, nominal))
		}
		if sc.together {
			for g := range perScenario / perBatch {
				var batch []store.Event
				for _, evs := range execs[g*perBatch : (g+1)*perBatch] {
					batch = append(batch, evs...)
				}
				_, err := s.Ingest(ctx, batch, now)
				require.NoError(t, err)
			}
			continue
		}
		steps := len(execs[0])
		groups := perScenario / perBatch
		// Batch b holds event k of group b-k: a pipeline, so each group's
		// events are in consecutive batches and every batch but the first
		// and last few mixes several groups' events.
		for b := range groups + steps - 1 {
			var batch []store.Event
			for k := range steps {
				g := b - k
				if g < 0 || g >= groups {
					continue
				}
				for _, evs := range execs[g*perBatch : (g+1)*perBatch] {
					batch = append(batch, evs[k])
				}
			}
			_, err := s.Ingest(ctx, batch, now)
			require.NoError(t, err)
			if sc.twice {
				_, err := s.Ingest(ctx, batch, now)
				require.NoError(t, err)
			}
		}
	}
	pool.Close()

	var report strings.Builder
	fmt.Fprintf(&report, "\nrow writes per execution (%d executions per scenario, %d per batch):\n", perScenario, perBatch)
	fmt.Fprintf(&report, "%-32s %9s %9s %9s %9s %9s %9s %9s %9s\n", "scenario", "exec ins", "exec upd", "exec HOT", "att ins", "att upd", "att HOT", "versions", "idx ent.")
	for i, sc := range scenarios {
		day := daypart.Day(now).AddDate(0, 0, -1-i)
		c := waitForCounts(ctx, t, admin, schema, day, perScenario)
		per := func(v int64) string { return fmt.Sprintf("%.2f", float64(v)/perScenario) }
		fmt.Fprintf(&report, "%-32s %9s %9s %9s %9s %9s %9s %9s %9s\n", sc.name, per(c.execIns), per(c.execUpd), per(c.execHot),
			per(c.attIns), per(c.attUpd), per(c.attHot), per(c.versions()), per(c.indexEntries()))
		assert.Equal(t, sc.wantExec*perScenario, c.execIns, sc.name)
		assert.Equal(t, sc.wantExecUpd*perScenario, c.execUpd, sc.name)
		assert.Equal(t, sc.wantAtt*perScenario, c.attIns, sc.name)
		assert.Equal(t, sc.wantAttUpd*perScenario, c.attUpd, sc.name)
	}
	t.Log(report.String())
}

// waitForCounts reads the counters of day's partitions once they have
// settled: the closed pool's backends flush them as they exit.
func waitForCounts(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, day time.Time, inserts int64) writeCounts {
	t.Helper()
	suffix := "_p" + day.Format("20060102")
	read := func() writeCounts {
		var c writeCounts
		rows, err := pool.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE schemaname = $1 AND relname IN ($2, $3)`, schema, "executions"+suffix, "attempts"+suffix)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var name string
			var ins, upd, hot int64
			require.NoError(t, rows.Scan(&name, &ins, &upd, &hot))
			if strings.HasPrefix(name, "executions") {
				c.execIns, c.execUpd, c.execHot = ins, upd, hot
			} else {
				c.attIns, c.attUpd, c.attHot = ins, upd, hot
			}
		}
		require.NoError(t, rows.Err())
		return c
	}
	deadline := time.Now().Add(30 * time.Second)
	prev := read()
	for {
		time.Sleep(300 * time.Millisecond)
		c := read()
		if c == prev && c.execIns >= inserts {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counters of %s did not settle: %+v", schema, c)
		}
		prev = c
	}
}
