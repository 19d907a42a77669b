package pipeline_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// failing answers every attempt with HTTP 500; before answering attempt
// jumpAt (0: never) it moves clk an hour ahead, past the request's
// deadlines, as if the attempt had taken that long.
func failing(clk *clock.Offset, jumpAt int32) *fake {
	return &fake{fn: func(_ context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
		if req.Attempt == jumpAt {
			clk.Set(time.Hour)
		}
		return deliver.Outcome{Result: deliver.Retryable, StatusCode: 500, Reason: "HTTP 500", Duration: time.Millisecond}
	}}
}

// deadLetterOf waits for the dead letter of executionID in the store.
func (e *env) deadLetterOf(executionID string) store.DeadLetter {
	e.t.Helper()
	var found store.DeadLetter
	require.Eventually(e.t, func() bool {
		letters, _, err := e.store.ListDeadLetters(e.t.Context(), testNamespace, "", 100, store.Cursor{})
		require.NoError(e.t, err)
		for _, d := range letters {
			if d.ExecutionID == executionID {
				found = d
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	return found
}

// TestDeadlineStopsRetries: a failing target is retried while a retry
// would start before the execution deadline; once the next retry would
// land past it, the execution is dead-lettered at once, "deadline
// exceeded", and no further attempt is made.
func TestDeadlineStopsRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startDrainer()
	clk := clock.NewOffset(clock.Real{}, 0)
	f := failing(clk, 2)
	r := e.start(f, func(o *pipeline.Options) { o.Clock = clk })
	req := request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) {
		r.RetryPolicy.MaxRetries = proto.Int32(10)
		r.DeadlineTime = timestamppb.New(time.Now().Add(10 * time.Minute))
	})
	e.dispatch(nil, req)

	ev := e.waitFor(req.ExecutionId, dead, 2)
	require.True(t, strings.HasPrefix(ev.Reason, "deadline exceeded: the retry would start at "), ev.Reason)
	require.Contains(t, ev.Reason, "not before the execution deadline")
	require.Contains(t, ev.Reason, "last attempt 2: HTTP 500")
	d := e.deadLetterOf(req.ExecutionId)
	require.EqualValues(t, 2, d.Attempt)
	require.Equal(t, ev.Reason, d.Reason)
	require.EqualValues(t, 500, d.ResponseStatus)

	r.stop(t)
	require.Len(t, f.of(req.ExecutionId), 2, "no attempt after the deadline stopped the retries")
	require.Equal(t, map[string]int{"started/1": 1, "failed/1": 1, "started/2": 1, "failed/2": 1, "dead/2": 1}, e.events.kinds(req.ExecutionId))
	require.Zero(t, e.queueDepth(e.dispatchQueue("normal")))
}

// TestDeadlineBeforeTheFirstAttempt: a request taken after its deadline (a
// backlog in the dispatch queue) is dead-lettered without an attempt, and
// a retry taken after the job's next slot is too; a first attempt is
// delivered after the next slot (a catch-up slot is delivered once), but
// its retry is not scheduled past it.
func TestDeadlineBeforeTheFirstAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startDrainer()
	f := failing(nil, 0)
	r := e.start(f)
	past := timestamppb.New(time.Now().Add(-time.Second))
	stale := request(registryv1.Priority_PRIORITY_HIGH, func(r *dispatchv1.DispatchRequest) { r.DeadlineTime = past })
	staleRetry := request(registryv1.Priority_PRIORITY_HIGH, func(r *dispatchv1.DispatchRequest) {
		r.Attempt, r.NextSlotTime = 2, past
	})
	catchUp := request(registryv1.Priority_PRIORITY_HIGH, func(r *dispatchv1.DispatchRequest) {
		r.TriggerKind, r.NextSlotTime = dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP, past
	})
	e.dispatch(nil, stale, staleRetry, catchUp)

	ev := e.waitFor(stale.ExecutionId, dead, 1)
	require.True(t, strings.HasPrefix(ev.Reason, "deadline exceeded: attempt 1 would start at "), ev.Reason)
	require.Contains(t, ev.Reason, "not before the execution deadline")
	require.Nil(t, ev.StartTime, "no attempt started")
	require.Equal(t, ev.Reason, e.deadLetterOf(stale.ExecutionId).Reason)

	ev = e.waitFor(staleRetry.ExecutionId, dead, 2)
	require.True(t, strings.HasPrefix(ev.Reason, "deadline exceeded: retry 2 would start at "), ev.Reason)
	require.Contains(t, ev.Reason, "not before the job's next slot")

	ev = e.waitFor(catchUp.ExecutionId, dead, 1)
	require.True(t, strings.HasPrefix(ev.Reason, "deadline exceeded: the retry would start at "), ev.Reason)
	require.Contains(t, ev.Reason, "not before the job's next slot")
	require.Contains(t, ev.Reason, "last attempt 1: HTTP 500")

	r.stop(t)
	require.Empty(t, f.of(stale.ExecutionId))
	require.Empty(t, f.of(staleRetry.ExecutionId))
	require.Len(t, f.of(catchUp.ExecutionId), 1)
	require.Equal(t, map[string]int{"dead/1": 1}, e.events.kinds(stale.ExecutionId))
	require.EqualValues(t, 2, metric(t, r.reg, "deadline_exceeded_total"))
	require.Zero(t, e.queueDepth(e.dispatchQueue("high")))
}

// TestLongAttemptAtShutdown: an attempt may run for the longest timeout a
// job can have (30 minutes), but shutdown does not wait for it: once the
// drain timeout passes the request to the target is aborted and the
// message requeued, and the next dispatcher attempts it again (same
// execution, attempt 1, same webhook-id). A shutdown stays bounded by the
// drain timeout whatever the jobs' timeouts.
func TestLongAttemptAtShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	arrived, aborted := make(chan string, 2), make(chan struct{}, 2)
	var requests atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Header.Get("webhook-id")
		if requests.Add(1) == 1 {
			<-r.Context().Done() // the first attempt hangs until aborted
			aborted <- struct{}{}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(target.Close)
	first := e.start(httpClient(t), func(o *pipeline.Options) { o.DrainTimeout = 100 * time.Millisecond })
	req := request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) {
		r.Target.GetHttp().Url = target.URL
		r.Target.GetHttp().Timeout = durationpb.New(targetcheck.MaxTimeout)
	})
	e.dispatch(nil, req)
	require.Equal(t, req.ExecutionId, <-arrived)

	first.stop(t)
	select {
	case <-aborted:
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt in flight was not aborted by the shutdown")
	}
	require.EqualValues(t, 1, metric(t, first.reg, "dispatch_requeued_total"))

	e.start(httpClient(t))
	e.waitFor(req.ExecutionId, succeeded, 1)
	require.Equal(t, req.ExecutionId, <-arrived, "attempted again with the same webhook-id")
}
