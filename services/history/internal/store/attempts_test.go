package store_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/history/internal/store"
)

// newStoreAndPool is newStore with the pool and schema, for tests that read
// the tables themselves.
func newStoreAndPool(t *testing.T) (*store.Store, *pgxpool.Pool, string) {
	t.Helper()
	pool, schema := pgtest.New(t)
	migrations, err := store.Migrations()
	require.NoError(t, err)
	_, err = migrate.ApplyAll(t.Context(), pool, schema, migrations)
	require.NoError(t, err)
	s, err := store.New(store.Options{Pool: pool, Schema: schema})
	require.NoError(t, err)
	_, err = s.Maintain(t.Context(), now)
	require.NoError(t, err)
	return s, pool, schema
}

// tableRows is what the tables hold of an execution: whether it has its
// row, and the attempts rows' numbers.
func tableRows(t *testing.T, pool *pgxpool.Pool, id string) (int, []int32) {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM executions WHERE execution_id = $1", id).Scan(&n))
	rows, err := pool.Query(t.Context(), "SELECT attempt FROM attempts WHERE execution_id = $1 ORDER BY attempt", id)
	require.NoError(t, err)
	var attempts []int32
	for rows.Next() {
		var a int32
		require.NoError(t, rows.Scan(&a))
		attempts = append(attempts, a)
	}
	require.NoError(t, rows.Err())
	return n, attempts
}

func ingest(t *testing.T, s *store.Store, evs ...store.Event) {
	t.Helper()
	_, err := s.Ingest(t.Context(), evs, now)
	require.NoError(t, err)
}

// attemptsLifecycle is the events of an execution that fails attempts-1
// times (each with a retry scheduled after attempt seconds) and then
// succeeds, in publication order: STARTED and the outcome of each attempt.
func attemptsLifecycle(ns, jobID string, nominal time.Time, attempts int32) []store.Event {
	id := execid.For(jobID, nominal)
	var out []store.Event
	for a := int32(1); a <= attempts; a++ {
		start := nominal.Add(time.Duration(a) * 10 * time.Second)
		base := store.Event{ExecutionID: id, JobID: jobID, Namespace: ns, JobDisplayName: "nightly", TriggerKind: 1,
			Attempt: a, NominalTime: nominal, FireTime: nominal.Add(time.Millisecond), StartTime: start,
			TraceID: "0af7651916cd43dd8448eb211c80319c"}
		started, done := base, base
		started.Kind, started.OccurTime = store.KindStarted, start
		done.OccurTime, done.Duration = start.Add(time.Duration(a)*100*time.Millisecond), dur(time.Duration(a)*100*time.Millisecond)
		if a < attempts {
			done.Kind, done.ResponseStatus, done.Reason = store.KindFailed, 500+a, fmt.Sprintf("HTTP %d", 500+a)
			done.ResponseExcerpt = fmt.Sprintf("attempt %d failed", a)
			done.RetryScheduled, done.RetryDelay = true, dur(time.Duration(a)*time.Second)
		} else {
			done.Kind, done.ResponseStatus, done.ResponseExcerpt = store.KindSucceeded, 200, "ok: 42 rows"
		}
		out = append(out, started, done)
	}
	return out
}

func TestSingleAttemptIsOneRow(t *testing.T) {
	t.Parallel()
	s, pool, _ := newStoreAndPool(t)
	ctx := t.Context()
	evs := attemptsLifecycle("ns", uuid.NewString(), now.Add(-time.Hour), 1)
	id := evs[0].ExecutionID

	ingest(t, s, evs[0])
	n, attempts := tableRows(t, pool, id)
	assert.Equal(t, 1, n)
	assert.Empty(t, attempts, "a running first attempt is the execution row alone")
	got, gotAttempts, err := s.Get(ctx, "ns", id)
	require.NoError(t, err)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, got.GetStatus())
	require.Len(t, gotAttempts, 1)
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, gotAttempts[0].GetStatus())
	assert.Nil(t, gotAttempts[0].GetDuration(), "unset while it runs")

	ingest(t, s, evs[1])
	n, attempts = tableRows(t, pool, id)
	assert.Equal(t, 1, n)
	assert.Empty(t, attempts, "a finished single attempt is the execution row alone")
	got, gotAttempts, err = s.Get(ctx, "ns", id)
	require.NoError(t, err)
	want := []*historyv1.Attempt{{
		Attempt: 1, Status: historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, StartTime: got.GetStartTime(),
		Duration: got.GetDuration(), ResponseStatus: 200, ResponseExcerpt: "ok: 42 rows",
	}}
	assert.Empty(t, cmp.Diff(want, gotAttempts, protocmp.Transform()))
	assert.Equal(t, evs[0].StartTime, gotAttempts[0].GetStartTime().AsTime())
	assert.Equal(t, 100*time.Millisecond, gotAttempts[0].GetDuration().AsDuration())
}

// wantAttempts is what Get lists of attemptsLifecycle's execution once all
// its events are in.
func wantAttempts(evs []store.Event) []*historyv1.Attempt {
	var out []*historyv1.Attempt
	for i := 1; i < len(evs); i += 2 {
		e := evs[i]
		a := &historyv1.Attempt{Attempt: e.Attempt, Status: historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED,
			ResponseStatus: e.ResponseStatus, ResponseExcerpt: e.ResponseExcerpt, Reason: e.Reason}
		if e.Kind == store.KindFailed {
			a.Status = historyv1.ExecutionStatus_EXECUTION_STATUS_RETRYING
			a.RetryDelay = durationOf(*e.RetryDelay)
		}
		a.StartTime = timestampOf(e.StartTime)
		a.Duration = durationOf(*e.Duration)
		out = append(out, a)
	}
	return out
}

// TestAttemptsMoveWhenReplaced: the execution row holds the latest attempt,
// and each attempt moves to the attempts table when the next one starts;
// Get lists every attempt once, oldest first.
func TestAttemptsMoveWhenReplaced(t *testing.T) {
	t.Parallel()
	s, pool, _ := newStoreAndPool(t)
	ctx := t.Context()
	evs := attemptsLifecycle("ns", uuid.NewString(), now.Add(-time.Hour), 3)
	id := evs[0].ExecutionID
	for i, e := range evs {
		ingest(t, s, e)
		n, attempts := tableRows(t, pool, id)
		assert.Equal(t, 1, n)
		var older []int32
		for a := int32(1); a < e.Attempt; a++ {
			older = append(older, a)
		}
		assert.Equal(t, older, attempts, "after event %d the attempts table holds the attempts before %d", i, e.Attempt)
		got, gotAttempts, err := s.Get(ctx, "ns", id)
		require.NoError(t, err)
		assert.Equal(t, e.Attempt, got.GetAttempt())
		require.Len(t, gotAttempts, int(e.Attempt))
		for j, a := range gotAttempts {
			assert.EqualValues(t, j+1, a.GetAttempt())
		}
	}
	_, gotAttempts, err := s.Get(ctx, "ns", id)
	require.NoError(t, err)
	assert.Empty(t, cmp.Diff(wantAttempts(evs), gotAttempts, protocmp.Transform()))
}

// TestAttemptsOutOfOrder: named orders first, then random orders, batch
// cuts and duplicates of a three-attempt execution all end in the same
// rows: the execution row at attempt 3 and attempts rows 1 and 2 only.
func TestAttemptsOutOfOrder(t *testing.T) {
	t.Parallel()
	s, pool, _ := newStoreAndPool(t)
	ctx := t.Context()
	job := uuid.NewString()
	check := func(t *testing.T, evs []store.Event) {
		t.Helper()
		id := evs[0].ExecutionID
		last := evs[len(evs)-1].Attempt
		n, attempts := tableRows(t, pool, id)
		assert.Equal(t, 1, n)
		var older []int32
		for a := int32(1); a < last; a++ {
			older = append(older, a)
		}
		assert.Equal(t, older, attempts)
		got, gotAttempts, err := s.Get(ctx, "ns", id)
		require.NoError(t, err)
		assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, got.GetStatus())
		assert.Equal(t, last, got.GetAttempt())
		assert.Equal(t, "ok: 42 rows", got.GetResponseExcerpt())
		assert.Empty(t, cmp.Diff(wantAttempts(evs), gotAttempts, protocmp.Transform()))
	}
	nominal := now.Add(-2 * time.Hour)
	next := func(attempts int32) []store.Event {
		nominal = nominal.Add(time.Second)
		return attemptsLifecycle("ns", job, nominal, attempts)
	}
	// S1 F1 S2 F2 S3 OK3 are events 0..5; a row of indexes is one order,
	// each event in a batch of its own.
	named := []struct {
		name  string
		order []int
	}{
		{"outcome before its start", []int{1, 0}},
		{"attempt 2 before attempt 1's outcome", []int{0, 2, 1, 3}},
		{"attempt 2's outcome first", []int{3, 1, 0, 2}},
		{"the last attempt first, then the rest backwards", []int{5, 4, 3, 2, 1, 0}},
		{"attempt 3 before attempt 1's outcome", []int{0, 4, 2, 1, 5, 3}},
		{"duplicates", []int{0, 0, 1, 2, 1, 3, 2, 4, 5, 5, 4, 3, 0}},
	}
	for _, tc := range named {
		t.Run(tc.name, func(t *testing.T) {
			attempts := int32(1)
			for _, i := range tc.order {
				attempts = max(attempts, int32(i/2+1))
			}
			evs := next(attempts)
			for _, i := range tc.order {
				ingest(t, s, evs[i])
			}
			check(t, evs)
		})
	}

	rng := rand.New(rand.NewPCG(21, 2))
	for round := range 60 {
		evs := next(3)
		// Every event once or twice, shuffled, cut into batches of 1 to 4.
		var stream []store.Event
		for _, e := range evs {
			stream = append(stream, e)
			if rng.IntN(3) == 0 {
				stream = append(stream, e)
			}
		}
		rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
		for len(stream) > 0 {
			k := min(len(stream), 1+rng.IntN(4))
			ingest(t, s, stream[:k]...)
			stream = stream[k:]
		}
		t.Run(fmt.Sprint("random ", round), func(t *testing.T) { check(t, evs) })
	}
}

// TestRowsOfTheOldScheme: executions written before migration 0003 (an
// attempts row for every attempt, the latest one's included, and no retry
// delay on the execution row) read the same after it, list each attempt
// once, and take later events correctly.
func TestRowsOfTheOldScheme(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, schema := pgtest.New(t)
	migrations, err := store.Migrations()
	require.NoError(t, err)
	i := slices.IndexFunc(migrations, func(m migrate.Migration) bool { return m.Version == 3 })
	require.GreaterOrEqual(t, i, 0)
	_, err = migrate.ApplyAll(ctx, pool, schema, migrations[:i])
	require.NoError(t, err)
	s, err := store.New(store.Options{Pool: pool, Schema: schema})
	require.NoError(t, err)
	_, err = s.Maintain(ctx, now)
	require.NoError(t, err)

	// The rows the previous version wrote for: a succeeded single attempt
	// (done), an execution whose second attempt failed with a retry
	// scheduled (retrying), and a running first attempt (running).
	job := uuid.NewString()
	n := now.Add(-time.Hour)
	done, retrying, running := execid.For(job, n), execid.For(job, n.Add(time.Second)), execid.For(job, n.Add(2*time.Second))
	_, err = pool.Exec(ctx, `
		INSERT INTO executions (nominal_time, execution_id, namespace, job_id, job_display_name, trigger_kind, status, attempt, rank,
			fire_time, start_time, duration_us, response_status, response_excerpt, reason, trace_id, update_time)
		VALUES ($1, $2, 'ns', $7, 'nightly', 1, 2, 1, 3, $1, $1, 1000, 200, 'ok', '', '', $1),
		       ($3, $4, 'ns', $7, 'nightly', 1, 3, 2, 2, $3, $3::timestamptz + interval '20s', 2000, 503, 'busy', 'HTTP 503', '', $3::timestamptz + interval '21s'),
		       ($5, $6, 'ns', $7, 'nightly', 1, 1, 1, 1, $5, $5, NULL, 0, '', '', '', $5)`,
		n, done, n.Add(time.Second), retrying, n.Add(2*time.Second), running, job)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO attempts (nominal_time, execution_id, attempt, status, rank, start_time, duration_us, response_status,
			response_excerpt, reason, retry_delay_us, update_time)
		VALUES ($1, $2, 1, 2, 3, $1, 1000, 200, 'ok', '', NULL, $1),
		       ($3, $4, 1, 3, 2, $3, 1000, 500, 'boom', 'HTTP 500', 10000000, $3::timestamptz + interval '1s'),
		       ($3, $4, 2, 3, 2, $3::timestamptz + interval '20s', 2000, 503, 'busy', 'HTTP 503', 30000000, $3::timestamptz + interval '21s'),
		       ($5, $6, 1, 1, 1, $5, NULL, 0, '', '', NULL, $5)`,
		n, done, n.Add(time.Second), retrying, n.Add(2*time.Second), running)
	require.NoError(t, err)
	_, err = migrate.ApplyAll(ctx, pool, schema, migrations)
	require.NoError(t, err)

	statuses := func(as []*historyv1.Attempt) []historyv1.ExecutionStatus {
		var out []historyv1.ExecutionStatus
		for _, a := range as {
			out = append(out, a.GetStatus())
		}
		return out
	}
	const (
		runningS  = historyv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
		succeeded = historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
		retryingS = historyv1.ExecutionStatus_EXECUTION_STATUS_RETRYING
	)

	_, as, err := s.Get(ctx, "ns", done)
	require.NoError(t, err)
	assert.Equal(t, []historyv1.ExecutionStatus{succeeded}, statuses(as), "the latest attempt once")
	assert.Equal(t, "ok", as[0].GetResponseExcerpt())

	_, as, err = s.Get(ctx, "ns", retrying)
	require.NoError(t, err)
	require.Equal(t, []historyv1.ExecutionStatus{retryingS, retryingS}, statuses(as))
	assert.Equal(t, 10*time.Second, as[0].GetRetryDelay().AsDuration())
	assert.Equal(t, 30*time.Second, as[1].GetRetryDelay().AsDuration(), "from the old attempts row: the execution row had no retry delay")
	assert.Equal(t, "HTTP 503", as[1].GetReason())

	_, as, err = s.Get(ctx, "ns", running)
	require.NoError(t, err)
	assert.Equal(t, []historyv1.ExecutionStatus{runningS}, statuses(as))

	// Later events: the running attempt succeeds (its old attempts row
	// stays behind, stale, and is not listed twice), and the retrying
	// execution's third attempt replaces its second, which merges into the
	// old row of attempt 2.
	base := store.Event{JobID: job, Namespace: "ns", TriggerKind: 1}
	ok := base
	ok.Kind, ok.ExecutionID, ok.Attempt, ok.NominalTime, ok.OccurTime = store.KindSucceeded, running, 1, n.Add(2*time.Second), n.Add(3*time.Second)
	ok.Duration, ok.ResponseStatus, ok.ResponseExcerpt = dur(time.Second), 200, "fine"
	third := base
	third.Kind, third.ExecutionID, third.Attempt, third.NominalTime, third.OccurTime = store.KindStarted, retrying, 3, n.Add(time.Second), n.Add(time.Minute)
	ingest(t, s, ok)
	ingest(t, s, third)

	e, as, err := s.Get(ctx, "ns", running)
	require.NoError(t, err)
	assert.Equal(t, succeeded, e.GetStatus())
	assert.Equal(t, []historyv1.ExecutionStatus{succeeded}, statuses(as))
	assert.Equal(t, "fine", as[0].GetResponseExcerpt())
	assert.Equal(t, time.Second, as[0].GetDuration().AsDuration())

	e, as, err = s.Get(ctx, "ns", retrying)
	require.NoError(t, err)
	assert.EqualValues(t, 3, e.GetAttempt())
	require.Equal(t, []historyv1.ExecutionStatus{retryingS, retryingS, runningS}, statuses(as))
	assert.Equal(t, 30*time.Second, as[1].GetRetryDelay().AsDuration())
	assert.Equal(t, "busy", as[1].GetResponseExcerpt())
	assert.Nil(t, as[2].GetRetryDelay())
	_, rows := tableRows(t, pool, retrying)
	assert.Equal(t, []int32{1, 2}, rows)
}

// TestConcurrentIngesters: two replicas (stores with pools of their own)
// ingest the same events at the same time, in different orders and batch
// cuts, wave by wave so that both handle the same or neighbouring steps of
// the same executions at once (both moving attempt 1 away when attempt 2
// starts, or one merging attempt 1's outcome while the other moves it).
// Nothing fails, and after every wave each execution is exactly as one
// ingester of the same events leaves it: no attempt is lost, even for a
// while.
func TestConcurrentIngesters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const executions = 100
	replica := func(s *store.Store, rng *rand.Rand, wave []store.Event) error {
		w := slices.Clone(wave)
		// Half the time in the same key order as the other replica (so
		// they contend row by row), cut differently.
		if rng.IntN(2) == 0 {
			rng.Shuffle(len(w), func(i, j int) { w[i], w[j] = w[j], w[i] })
		}
		for len(w) > 0 {
			n := min(len(w), 1+rng.IntN(40))
			if _, err := s.Ingest(ctx, w[:n], now); err != nil {
				return err
			}
			w = w[n:]
		}
		return nil
	}
	for round, orders := range [][2][]int{
		{{0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}}, // the same events at the same time
		{{0, 1, 2, 3, 4, 5}, {1, 0, 3, 2, 5, 4}}, // pairs swapped
		{{0, 1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 0}}, // one replica a step ahead
	} {
		t.Run(fmt.Sprint(orders[1]), func(t *testing.T) {
			ref, refPool, _ := newStoreAndPool(t)
			s1, pool, schema := newStoreAndPool(t)
			pool2, err := postgres.Connect(ctx, postgres.Options{URL: pgtest.URL(), Schema: schema})
			require.NoError(t, err)
			t.Cleanup(pool2.Close)
			s2, err := store.New(store.Options{Pool: pool2, Schema: schema})
			require.NoError(t, err)
			job := uuid.NewString()
			var all [][]store.Event
			for i := range executions {
				all = append(all, attemptsLifecycle("ns", job, now.Add(-time.Hour+time.Duration(i)*time.Second), int32(1+i%3)))
			}
			// waves[k] is event k of every execution that has one.
			waves := make([][]store.Event, 6)
			for _, evs := range all {
				for k, e := range evs {
					waves[k] = append(waves[k], e)
				}
			}
			rng1, rng2 := rand.New(rand.NewPCG(uint64(round), 1)), rand.New(rand.NewPCG(uint64(round), 2))
			done := map[int]bool{}
			for step := range orders[0] {
				var wg sync.WaitGroup
				errs := make([]error, 2)
				wg.Go(func() { errs[0] = replica(s1, rng1, waves[orders[0][step]]) })
				wg.Go(func() { errs[1] = replica(s2, rng2, waves[orders[1][step]]) })
				wg.Wait()
				require.NoError(t, errs[0])
				require.NoError(t, errs[1])
				for _, k := range []int{orders[0][step], orders[1][step]} {
					if !done[k] {
						_, err := ref.Ingest(ctx, waves[k], now)
						require.NoError(t, err)
						done[k] = true
					}
				}
				// The rows themselves, every attempts column but the
				// update time (a moved attempt takes its execution's).
				require.Equal(t, dumpRows(t, refPool), dumpRows(t, pool), "step %d", step)
			}
			for _, evs := range all {
				id := evs[0].ExecutionID
				want, wantAs, err := ref.Get(ctx, "ns", id)
				require.NoError(t, err)
				got, gotAs, err := s1.Get(ctx, "ns", id)
				require.NoError(t, err)
				assert.Empty(t, cmp.Diff(want, got, protocmp.Transform()))
				assert.Empty(t, cmp.Diff(wantAs, gotAs, protocmp.Transform()))
			}
			for _, evs := range all {
				_, rows := tableRows(t, pool, evs[0].ExecutionID)
				assert.Len(t, rows, len(evs)/2-1, "the attempts table holds the replaced attempts")
			}
		})
	}
}

// dumpRows is the tables' rows as text, in key order.
func dumpRows(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT format('%s', e) FROM executions e
		UNION ALL
		SELECT format('%s %s %s %s %s %s %s %s %s %s %s', nominal_time, execution_id, attempt, status, rank, start_time,
			duration_us, response_status, response_excerpt, reason, retry_delay_us) FROM attempts
		ORDER BY 1`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func timestampOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
