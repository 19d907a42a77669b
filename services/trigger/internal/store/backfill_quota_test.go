package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// The ranges of these tests, for a job firing every minute: a long one of
// 241 slots commits its first batch of 100 then waits for its rate (the
// fake clock stands still, so it keeps running), a short one of 61 is done
// in one batch.
var (
	longFrom, longTo   = ts("2030-03-10T02:00:00Z"), ts("2030-03-10T06:00:00Z")
	shortFrom, shortTo = ts("2030-03-10T01:00:00Z"), ts("2030-03-10T02:00:00Z")
)

// newQuotaEnv is a backfill env whose store caps concurrent backfills.
func newQuotaEnv(t *testing.T, limits quota.Limits) (*env, *clock.Fake, *quota.Refusals) {
	t.Helper()
	refusals, err := quota.NewRefusals(prometheus.NewRegistry())
	require.NoError(t, err)
	clk := clock.NewFake(ts(backfillStart))
	e := newEnv(t, func(o *store.Options) {
		o.Clock = clk
		o.MaxBackfills = quota.New(store.BackfillQuota, limits, refusals)
	})
	return e, clk, refusals
}

// everyMinute creates a job of namespace firing every minute.
func (e *env) everyMinute(t *testing.T, namespace string) *registryv1.Job {
	t.Helper()
	job := newJob(ts("2030-03-09T00:00:00Z"), cron("* * * * *", ""), func(j *registryv1.Job) { j.Namespace = namespace })
	e.apply(t, created(job), store.Upserted)
	return job
}

// running is a backfill started in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

// startBackfill runs a long backfill of job on s until stopped, and waits
// until it waits for its rate, or returns its error if it ends first.
func startBackfill(t *testing.T, s *store.Store, clk *clock.Fake, job *registryv1.Job) (*running, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	waiting := clk.Waiters()
	go func() {
		_, err := s.Backfill(ctx, job.Namespace, job.Id, longFrom, longTo, 100, 0)
		r.done <- err
	}()
	for clk.Waiters() == waiting {
		select {
		case err := <-r.done:
			cancel()
			return nil, err
		default:
			time.Sleep(100 * time.Microsecond) // polls; asserts nothing about time
		}
	}
	t.Cleanup(r.stop)
	return r, nil
}

func (r *running) stop() {
	r.cancel()
	<-r.done
	r.done <- context.Canceled // stop may be called again
}

func (e *env) runningBackfills(t *testing.T, namespace string) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM backfills WHERE namespace = $1`, namespace).Scan(&n))
	return n
}

func requireExceeded(t *testing.T, err error, namespace string) {
	t.Helper()
	var exceeded *quota.ExceededError
	require.ErrorAs(t, err, &exceeded)
	require.Equal(t, namespace, exceeded.Namespace)
	require.Equal(t, store.BackfillQuota, exceeded.Quota)
}

func TestConcurrentBackfillsBeyondTheQuotaAreRefused(t *testing.T) {
	t.Parallel()
	e, clk, refusals := newQuotaEnv(t, quota.Limits{Default: 2, Namespaces: quota.Overrides{"beta": 0}})
	first, err := startBackfill(t, e.store, clk, e.everyMinute(t, testNamespace))
	require.NoError(t, err)
	_, err = startBackfill(t, e.store, clk, e.everyMinute(t, testNamespace))
	require.NoError(t, err)
	require.Equal(t, 2, e.runningBackfills(t, testNamespace))

	short := e.everyMinute(t, testNamespace)
	res, err := e.store.Backfill(t.Context(), testNamespace, short.Id, shortFrom, shortTo, 0, 0)
	requireExceeded(t, err, testNamespace)
	require.Zero(t, res)
	require.Empty(t, e.ledger(t, short.Id), "a refused backfill writes nothing")
	require.Equal(t, 1.0, testutil.ToFloat64(refusals.Collector(testNamespace, store.BackfillQuota)))

	// Another namespace is not held up, beta's override lifts its cap.
	beta := e.everyMinute(t, "beta")
	for range 3 {
		_, err := startBackfill(t, e.store, clk, beta)
		require.NoError(t, err)
	}
	require.Zero(t, e.runningBackfills(t, "beta"), "an unlimited namespace keeps no rows")

	// A backfill that ends frees its place.
	first.stop()
	require.Equal(t, 1, e.runningBackfills(t, testNamespace))
	res, err = e.store.Backfill(t.Context(), testNamespace, short.Id, shortFrom, shortTo, 0, 0)
	require.NoError(t, err)
	require.Equal(t, store.BackfillResult{Fired: 61}, res)
	require.Equal(t, 1, e.runningBackfills(t, testNamespace), "the short backfill released its row")

	// Requests that are wrong take no place and are not counted as refusals.
	_, err = e.store.Backfill(t.Context(), testNamespace, short.Id, shortTo, shortFrom, 0, 0)
	require.ErrorIs(t, err, store.ErrInvalidRange)
	require.Equal(t, 1.0, testutil.ToFloat64(refusals.Collector(testNamespace, store.BackfillQuota)))
}

func TestConcurrentBackfillClaimsNeverOvershoot(t *testing.T) {
	t.Parallel()
	const limit, callers = 2, 8
	e, clk, _ := newQuotaEnv(t, quota.Limits{Default: limit})
	jobs := make([]*registryv1.Job, callers)
	for i := range jobs {
		jobs[i] = e.everyMinute(t, testNamespace)
	}
	// The claims go through a store of their own, with a connection for
	// each, so that they all reach the database at once.
	var schema string
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT current_schema()`).Scan(&schema))
	pool, err := postgres.Connect(t.Context(), postgres.Options{URL: pgtest.URL(), Schema: schema, MaxConns: callers})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	claims, err := store.New(store.Options{
		Pool: pool, Partitions: testPartitions, NodeID: testNode, DispatchExchange: testDispatch,
		Clock: clk, MaxBackfills: quota.New(store.BackfillQuota, quota.Limits{Default: limit}, nil),
	})
	require.NoError(t, err)
	// Hold the claims back until every caller is at the door, then let them
	// all through at once.
	gate, err := e.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = gate.Rollback(context.Background()) }()
	_, err = gate.Exec(t.Context(), `LOCK TABLE backfills IN EXCLUSIVE MODE`)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	results := make(chan error, callers)
	for _, job := range jobs {
		go func() {
			_, err := claims.Backfill(ctx, testNamespace, job.Id, longFrom, longTo, 100, 0)
			results <- err
		}()
	}
	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%backfills%'`) >= callers
	}, 10*time.Second, time.Millisecond, "every claim waits at the gate")
	require.NoError(t, gate.Rollback(t.Context()))

	refused := 0
	require.Eventually(t, func() bool {
		for {
			select {
			case err := <-results:
				requireExceeded(t, err, testNamespace)
				refused++
				continue
			default:
			}
			return refused+clk.Waiters() == callers
		}
	}, 10*time.Second, time.Millisecond, "every backfill is refused or runs")
	require.Equal(t, limit, clk.Waiters(), "exactly the quota runs")
	require.Equal(t, limit, e.runningBackfills(t, testNamespace))
	cancel()
	for range limit {
		require.ErrorIs(t, <-results, context.Canceled)
	}
	require.Zero(t, e.runningBackfills(t, testNamespace), "stopped backfills release their rows")
}

func TestBackfillQuotaHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	limits := quota.Limits{Default: 2}
	e, clk, _ := newQuotaEnv(t, limits)
	other, err := store.New(store.Options{
		Pool: e.pool, Partitions: testPartitions, NodeID: "node-b", DispatchExchange: testDispatch,
		Clock: clk, MaxBackfills: quota.New(store.BackfillQuota, limits, nil),
	})
	require.NoError(t, err)

	a, err := startBackfill(t, e.store, clk, e.everyMinute(t, testNamespace))
	require.NoError(t, err)
	b, err := startBackfill(t, other, clk, e.everyMinute(t, testNamespace))
	require.NoError(t, err)
	_, err = startBackfill(t, e.store, clk, e.everyMinute(t, testNamespace))
	requireExceeded(t, err, testNamespace)
	_, err = startBackfill(t, other, clk, e.everyMinute(t, testNamespace))
	requireExceeded(t, err, testNamespace)
	a.stop()
	b.stop()

	// A node that died mid-backfill leaves its row; it counts until it
	// expires, a minute after its last renewal.
	_, err = e.pool.Exec(t.Context(), `
		INSERT INTO backfills (id, namespace, job_id, node_id, start_time, expire_time)
		SELECT gen_random_uuid(), $1, gen_random_uuid(), 'dead-node', $2, $2::timestamptz + interval '1 minute'
		FROM generate_series(1, 2)`, testNamespace, clk.Now())
	require.NoError(t, err)
	short := e.everyMinute(t, testNamespace)
	_, err = e.store.Backfill(t.Context(), testNamespace, short.Id, shortFrom, shortTo, 0, 0)
	requireExceeded(t, err, testNamespace)
	clk.Advance(time.Minute)
	_, err = e.store.Backfill(t.Context(), testNamespace, short.Id, shortFrom, shortTo, 0, 0)
	require.NoError(t, err, "the dead node's rows expired")
	require.Zero(t, e.runningBackfills(t, testNamespace), "and were dropped")
}

func TestLongBackfillKeepsItsPlace(t *testing.T) {
	t.Parallel()
	e, clk, _ := newQuotaEnv(t, quota.Limits{Default: 1})
	// At one slot a second, the second batch waits 100 s, longer than a
	// row lives without renewal.
	slow := e.everyMinute(t, testNamespace)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := e.store.Backfill(ctx, testNamespace, slow.Id, longFrom, longTo, 1, 0)
		done <- err
	}()
	short := e.everyMinute(t, testNamespace)
	for elapsed := time.Duration(0); elapsed < 3*time.Minute; elapsed += 20 * time.Second {
		for clk.Waiters() == 0 {
			time.Sleep(100 * time.Microsecond) // polls; asserts nothing about time
		}
		_, err := e.store.Backfill(t.Context(), testNamespace, short.Id, shortFrom, shortTo, 0, 0)
		requireExceeded(t, err, testNamespace)
		clk.Advance(20 * time.Second)
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Len(t, e.ledger(t, slow.Id), 200, "two batches ran, 100 s apart")
}
