package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// TestRedeliveryOfCompletedAttempt: the trigger's relay may publish a
// request twice (it crashed between the confirm and deleting its outbox
// row). A second copy of an attempt that succeeded, of one whose retry is
// scheduled, or of one that went dead is acknowledged without reaching the
// target, and emits no event; the scheduled retry itself is delivered.
func TestRedeliveryOfCompletedAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startDrainer()
	f := &fake{fn: func(_ context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
		switch req.JobDisplayName {
		case "flaky": // fails once, then succeeds
			if req.Attempt == 1 {
				return deliver.Outcome{Result: deliver.Retryable, StatusCode: 503, Reason: "HTTP 503"}
			}
		case "gone":
			return deliver.Outcome{Result: deliver.Permanent, StatusCode: 410, Reason: "HTTP 410"}
		}
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200}
	}}
	r := e.start(f)
	named := func(name string) *dispatchv1.DispatchRequest {
		return request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) {
			r.JobDisplayName = name
			// The retry waits long enough for the duplicate of attempt 1 to
			// arrive first.
			r.RetryPolicy.InitialBackoff = nil
		})
	}
	ok, flaky, gone := named("ok"), named("flaky"), named("gone")
	e.dispatch(nil, ok, flaky, gone)
	e.waitFor(ok.ExecutionId, succeeded, 1)
	e.waitFor(flaky.ExecutionId, failed, 1)
	e.waitFor(gone.ExecutionId, dead, 1)

	// Recorded before acknowledged; the test sees the events a little
	// earlier.
	require.Eventually(t, func() bool {
		got, err := e.store.Completed(t.Context(), []store.AttemptRef{
			attemptOf(ok, 1), attemptOf(flaky, 1), attemptOf(gone, 1),
		})
		require.NoError(t, err)
		return got[0] && got[1] && got[2]
	}, 30*time.Second, 5*time.Millisecond)
	// The relay's second copies, which it flags as possibly published before.
	e.dispatch(possibleDuplicate, ok, flaky, gone)
	require.Eventually(t, func() bool { return metric(t, r.reg, "duplicates_skipped_total") == 3 }, 30*time.Second, 5*time.Millisecond)
	e.waitFor(flaky.ExecutionId, succeeded, 2)

	require.Len(t, f.of(ok.ExecutionId), 1)
	require.Len(t, f.of(gone.ExecutionId), 1)
	require.Len(t, f.of(flaky.ExecutionId), 2, "attempt 1 once, its retry once")
	require.Equal(t, map[string]int{"started/1": 1, "succeeded/1": 1}, e.events.kinds(ok.ExecutionId))
	require.Equal(t, map[string]int{"started/1": 1, "failed/1": 1, "started/2": 1, "succeeded/2": 1}, e.events.kinds(flaky.ExecutionId))

	// A stray copy of the finished execution's retry is not delivered either.
	require.Eventually(t, func() bool {
		got, err := e.store.Completed(t.Context(), []store.AttemptRef{attemptOf(flaky, 2)})
		require.NoError(t, err)
		return got[0]
	}, 30*time.Second, 5*time.Millisecond)
	stray := named("flaky")
	stray.ExecutionId, stray.JobId, stray.NominalTime, stray.Attempt = flaky.ExecutionId, flaky.JobId, flaky.NominalTime, 2
	e.dispatch(nil, stray)
	require.Eventually(t, func() bool { return metric(t, r.reg, "duplicates_skipped_total") == 4 }, 30*time.Second, 5*time.Millisecond)
	require.Len(t, f.of(flaky.ExecutionId), 2)
	r.stop(t)
	require.Zero(t, e.queueDepth(e.dispatchQueue("normal")))
}

// TestRedeliveryOfUnfinishedAttempt: a dispatcher that stops in the middle
// of a delivery has not completed the attempt; the redelivered message is
// delivered by the next dispatcher, with the same execution id (the
// webhook-id), however the dedupe stands.
func TestRedeliveryOfUnfinishedAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	inside := make(chan struct{})
	blocking := &fake{fn: func(ctx context.Context, _ *dispatchv1.DispatchRequest) deliver.Outcome {
		close(inside)
		<-ctx.Done()
		return deliver.Outcome{Result: deliver.Retryable, Reason: ctx.Err().Error()}
	}}
	first := e.start(blocking, func(o *pipeline.Options) { o.DrainTimeout = 10 * time.Millisecond })
	req := request(registryv1.Priority_PRIORITY_HIGH)
	e.dispatch(nil, req)
	<-inside
	first.stop(t)

	next := &fake{}
	second := e.start(next)
	e.waitFor(req.ExecutionId, succeeded, 1)
	calls := next.of(req.ExecutionId)
	require.Len(t, calls, 1)
	require.Equal(t, req.ExecutionId, calls[0].req.ExecutionId)
	require.EqualValues(t, 1, calls[0].req.Attempt)
	require.Zero(t, metric(t, second.reg, "duplicates_skipped_total"))
	require.Zero(t, metric(t, second.reg, "lookups_skipped_total"), "the broker flagged the redelivery: looked up")
}

// possibleDuplicate are the headers of a request the trigger's relay
// republished.
var possibleDuplicate = amqp091.Table{outbox.PossibleDuplicateHeader: "true"}

// countingChecks is the store counting the requests it is asked about.
type countingChecks struct {
	*store.Store
	asked atomic.Int64
}

func (c *countingChecks) Check(ctx context.Context, refs []store.CheckRef) ([]store.CheckResult, error) {
	c.asked.Add(int64(len(refs)))
	return c.Store.Check(ctx, refs)
}

// TestLookUpOnlyForWhatMayRepeat: the first publish of a slot's first
// attempt, delivered for the first time, goes to the target without the
// look-up; a retry, a request the relay flags as possibly published
// before and one the broker delivered before are looked up.
func TestLookUpOnlyForWhatMayRepeat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers amqp091.Table
		attempt int32
		lookUp  bool
	}{
		{name: "first publish of attempt 1", attempt: 1},
		{name: "a retry", attempt: 2, lookUp: true},
		{name: "flagged by the relay", headers: possibleDuplicate, attempt: 1, lookUp: true},
		{name: "counted by a quorum queue", headers: amqp091.Table{"x-delivery-count": int64(1)}, attempt: 1, lookUp: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			checks := &countingChecks{Store: e.store}
			f := &fake{}
			r := e.start(f, func(o *pipeline.Options) { o.Checks = checks })
			req := request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) { r.Attempt = tt.attempt })
			e.dispatch(tt.headers, req)
			e.waitFor(req.ExecutionId, succeeded, tt.attempt)
			r.stop(t)
			require.Len(t, f.of(req.ExecutionId), 1)
			if tt.lookUp {
				require.EqualValues(t, 1, checks.asked.Load())
				require.Zero(t, metric(t, r.reg, "lookups_skipped_total"))
			} else {
				require.Zero(t, checks.asked.Load())
				require.EqualValues(t, 1, metric(t, r.reg, "lookups_skipped_total"))
			}
		})
	}
}

// databaseAway is the store with an outage switch: while down, look-ups and
// records fail as they do when PostgreSQL is restarting.
type databaseAway struct {
	*store.Store
	down atomic.Bool
}

var errDatabaseAway = errors.New("connection refused (test outage)")

func (d *databaseAway) Check(ctx context.Context, refs []store.CheckRef) ([]store.CheckResult, error) {
	if d.down.Load() {
		return nil, errDatabaseAway
	}
	return d.Store.Check(ctx, refs)
}

func (d *databaseAway) RecordCompleted(ctx context.Context, done []store.CompletedAttempt) error {
	if d.down.Load() {
		return errDatabaseAway
	}
	return d.Store.RecordCompleted(ctx, done)
}

// TestRedeliveryDuringDatabaseOutage: while PostgreSQL is away the
// trigger's relay republishes the requests whose outbox rows it could not
// delete, and the dispatcher can neither look up nor record completions. An
// attempt completed during the outage is held in memory: its republished
// copy is not delivered again, and the record is written once the database
// answers.
func TestRedeliveryDuringDatabaseOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := &databaseAway{Store: e.store}
	db.down.Store(true)
	f := &fake{}
	r := e.start(f, func(o *pipeline.Options) {
		o.Checks = db
		o.RecordRetryInterval = 20 * time.Millisecond
	})
	req := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(nil, req)
	e.waitFor(req.ExecutionId, succeeded, 1)
	require.Eventually(t, func() bool { return metric(t, r.reg, "completions_unrecorded") == 1 }, 30*time.Second, 5*time.Millisecond)

	e.dispatch(possibleDuplicate, req) // the relay's second copy, still during the outage
	require.Eventually(t, func() bool { return metric(t, r.reg, "duplicates_skipped_total") == 1 }, 30*time.Second, 5*time.Millisecond)
	require.Len(t, f.of(req.ExecutionId), 1, "the copy did not reach the target")

	db.down.Store(false)
	require.Eventually(t, func() bool { return metric(t, r.reg, "completions_unrecorded") == 0 }, 30*time.Second, 5*time.Millisecond)
	got, err := e.store.Completed(t.Context(), []store.AttemptRef{attemptOf(req, 1)})
	require.NoError(t, err)
	require.True(t, got[0], "recorded once the database answered")
	require.Zero(t, metric(t, r.reg, "completions_unrecorded_dropped_total"))
	r.stop(t)
	require.Equal(t, map[string]int{"started/1": 1, "succeeded/1": 1}, e.events.kinds(req.ExecutionId))
}

// TestPossibleCopyWaitsForTheLookUp: a request that may be a second copy
// is not delivered while the look-up fails: it is held and asked again
// until the database answers, and then skipped if its first copy
// completed. A retry whose look-up fails is delivered, since retries go on
// through an outage.
func TestPossibleCopyWaitsForTheLookUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := &databaseAway{Store: e.store}
	f := &fake{}
	r := e.start(f, func(o *pipeline.Options) {
		o.Checks = db
		o.Backoff, o.MaxBackoff = 10*time.Millisecond, 20*time.Millisecond
	})
	// Completed by a dispatcher that has gone: only the database knows.
	req := request(registryv1.Priority_PRIORITY_NORMAL)
	require.NoError(t, e.store.RecordCompleted(t.Context(), []store.CompletedAttempt{
		{NominalTime: req.NominalTime.AsTime(), ExecutionID: req.ExecutionId, Attempt: 1, Final: true, Time: time.Now()},
	}))
	db.down.Store(true)

	e.dispatch(possibleDuplicate, req)
	require.Eventually(t, func() bool { return metric(t, r.reg, "cancellation_check_errors_total") >= 3 }, 30*time.Second, 5*time.Millisecond,
		"the copy is asked again")
	require.Empty(t, f.of(req.ExecutionId), "not delivered unasked")

	retry := request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) { r.Attempt = 2 })
	e.dispatch(nil, retry)
	e.waitFor(retry.ExecutionId, succeeded, 2)
	require.Len(t, f.of(retry.ExecutionId), 1, "a retry is delivered though its look-up failed")

	db.down.Store(false)
	require.Eventually(t, func() bool { return metric(t, r.reg, "duplicates_skipped_total") == 1 }, 30*time.Second, 5*time.Millisecond)
	r.stop(t)
	require.Empty(t, f.of(req.ExecutionId), "the copy of a completed attempt never reached the target")
	require.Zero(t, e.queueDepth(e.dispatchQueue("normal")))
}
