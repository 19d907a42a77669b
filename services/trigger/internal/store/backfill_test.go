package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// backfillStart is the fake clock's reading when backfill tests start.
const backfillStart = "2030-03-10T06:00:00Z"

func newBackfillEnv(t *testing.T) (*env, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(ts(backfillStart))
	return newEnv(t, func(o *store.Options) { o.Clock = clk }), clk
}

// advanceWhileWaiting moves clk forward in 100 ms steps whenever something
// waits on it, until the test ends.
func advanceWhileWaiting(t *testing.T, clk *clock.Fake) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if clk.Waiters() > 0 {
				clk.Advance(100 * time.Millisecond)
				continue
			}
			time.Sleep(100 * time.Microsecond) // polls; asserts nothing about time
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func TestBackfill(t *testing.T) {
	t.Parallel()
	e, clk := newBackfillEnv(t)
	advanceWhileWaiting(t, clk)
	job := newJob(ts("2030-03-09T00:00:00Z"), cron("* * * * *", ""))
	e.apply(t, created(job), store.Upserted)

	// 02:00 to 06:00 inclusive (the end is clamped to now): 241 slots at 100
	// a second, in transactions of 100: two waits of one second.
	res, err := e.store.Backfill(t.Context(), testNamespace, job.Id, ts("2030-03-10T02:00:00Z"), ts("2030-03-10T06:10:00Z"), 100, 0)
	require.NoError(t, err)
	require.Equal(t, store.BackfillResult{Fired: 241}, res)
	require.Equal(t, 2*time.Second, clk.Now().Sub(ts(backfillStart)), "paced at the rate")
	ledger := e.ledger(t, job.Id)
	require.Len(t, ledger, 241)
	for i, l := range ledger {
		nominal := ts("2030-03-10T02:00:00Z").Add(time.Duration(i) * time.Minute)
		require.Equal(t, nominal, l.Nominal)
		require.Equal(t, firing.KindBackfill, l.Kind)
		require.Equal(t, execid.For(job.Id, nominal), l.ExecID)
		require.Zero(t, l.Epoch)
	}
	rows := e.outbox(t)
	require.Len(t, rows, 241)
	require.Equal(t, 2+2+1, e.count(t, `SELECT count(*) FROM outbox`), "transactions of 100, 100 and 41 slots: rows of up to 64")
	req := &dispatchv1.DispatchRequest{}
	require.NoError(t, proto.Unmarshal(rows[0].Payload, req))
	require.Equal(t, dispatchv1.TriggerKind_TRIGGER_KIND_BACKFILL, req.TriggerKind)
	require.Equal(t, ts("2030-03-10T02:00:00Z"), req.NominalTime.AsTime())
	require.Equal(t, execid.For(job.Id, req.NominalTime.AsTime()), rows[0].MessageID)
	require.Equal(t, testDispatch+"|dispatch.high", rows[0].RoutingKey)
	require.True(t, rows[0].DueAt.IsZero(), "a backfill is not the firing promise")

	// An overlapping range fires only what the ledger lacks; skipped slots
	// cost no rate.
	start := clk.Now()
	res, err = e.store.Backfill(t.Context(), testNamespace, job.Id, ts("2030-03-10T01:00:00Z"), ts("2030-03-10T03:00:00Z"), 1000, 0)
	require.NoError(t, err)
	require.Equal(t, store.BackfillResult{Fired: 60, Skipped: 61}, res)
	// Slots 01:00-02:39 make the first batch (60 fired), 02:40-03:00 the
	// second, which waits 60 ms for the rate: one 100 ms step of the clock.
	require.Equal(t, 100*time.Millisecond, clk.Now().Sub(start))
	require.Len(t, e.outbox(t), 241+60)
}

func TestBackfillLimits(t *testing.T) {
	t.Parallel()
	e, _ := newBackfillEnv(t)
	job := newJob(ts("2030-03-09T00:00:00Z"), cron("* * * * *", ""))
	e.apply(t, created(job), store.Upserted)
	tests := []struct {
		name       string
		namespace  string
		start, end time.Time
		err        error
		want       store.BackfillResult
	}{
		{name: "10,001 slots", start: ts("2030-03-01T00:00:00Z"), end: ts("2030-03-07T22:40:00Z"), err: store.ErrTooManySlots},
		{name: "end before start", start: ts("2030-03-02T00:00:00Z"), end: ts("2030-03-01T00:00:00Z"), err: store.ErrInvalidRange},
		{name: "other namespace", namespace: "beta", start: ts("2030-03-01T00:00:00Z"), end: ts("2030-03-01T00:01:00Z"), err: store.ErrNotFound},
		{name: "entirely in the future", start: ts("2030-03-10T06:00:01Z"), end: ts("2030-03-11T00:00:00Z")},
		{name: "no slot in range", start: ts("2030-03-01T00:00:01Z"), end: ts("2030-03-01T00:00:59Z")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := tt.namespace
			if ns == "" {
				ns = testNamespace
			}
			res, err := e.store.Backfill(t.Context(), ns, job.Id, tt.start, tt.end, 0, 0)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, res)
		})
	}
	require.Empty(t, e.ledger(t, job.Id))
	require.Empty(t, e.outbox(t))
}

func TestBackfillCancelledWhilePacing(t *testing.T) {
	t.Parallel()
	e, clk := newBackfillEnv(t)
	job := newJob(ts("2030-03-09T00:00:00Z"), cron("* * * * *", ""))
	e.apply(t, created(job), store.Upserted)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for clk.Waiters() == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		cancel()
	}()
	res, err := e.store.Backfill(ctx, testNamespace, job.Id, ts("2030-03-10T02:00:00Z"), ts("2030-03-10T06:00:00Z"), 100, 0)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, store.BackfillResult{Fired: 100}, res, "the first batch committed")
	require.Len(t, e.ledger(t, job.Id), 100)

	// A retry picks up where it stopped.
	advanceWhileWaiting(t, clk)
	res, err = e.store.Backfill(t.Context(), testNamespace, job.Id, ts("2030-03-10T02:00:00Z"), ts("2030-03-10T06:00:00Z"), 100, 0)
	require.NoError(t, err)
	require.Equal(t, store.BackfillResult{Fired: 141, Skipped: 100}, res)
}

// TestBackfillOverlapPolicy: a backfill's executions carry the job's
// overlap policy, or the one the backfill gives.
func TestBackfillOverlapPolicy(t *testing.T) {
	t.Parallel()
	e, _ := newBackfillEnv(t)
	job := newJob(ts("2030-03-09T00:00:00Z"), cron("0 * * * *", ""), func(j *registryv1.Job) {
		j.OverlapPolicy = registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP
	})
	e.apply(t, created(job), store.Upserted)

	res, err := e.store.Backfill(t.Context(), testNamespace, job.Id, ts("2030-03-10T01:00:00Z"), ts("2030-03-10T01:00:00Z"), 0,
		registryv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED)
	require.NoError(t, err)
	require.Equal(t, 1, res.Fired)
	res, err = e.store.Backfill(t.Context(), testNamespace, job.Id, ts("2030-03-10T02:00:00Z"), ts("2030-03-10T02:00:00Z"), 0,
		registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER)
	require.NoError(t, err)
	require.Equal(t, 1, res.Fired)

	rows := e.outbox(t)
	require.Len(t, rows, 2)
	policies := map[time.Time]registryv1.OverlapPolicy{}
	for _, row := range rows {
		req := &dispatchv1.DispatchRequest{}
		require.NoError(t, proto.Unmarshal(row.Payload, req))
		policies[req.NominalTime.AsTime()] = req.OverlapPolicy
	}
	require.Equal(t, map[time.Time]registryv1.OverlapPolicy{
		ts("2030-03-10T01:00:00Z"): registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP,
		ts("2030-03-10T02:00:00Z"): registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER,
	}, policies)
}
