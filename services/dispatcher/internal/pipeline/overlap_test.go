package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

var skipped = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SKIPPED

// gates is a Deliverer whose attempts of the executions it holds wait
// until released (or aborted); the others succeed at once.
type gates struct {
	*fake
	mu      sync.Mutex
	held    map[string]chan deliver.Outcome
	fail    map[string]bool // executions whose first attempt fails with a retry
	running map[string]int  // attempts in flight per job
	maxJob  int             // most attempts of one job in flight at once
}

func newGates() *gates {
	g := &gates{held: map[string]chan deliver.Outcome{}, fail: map[string]bool{}, running: map[string]int{}}
	g.fake = &fake{fn: func(ctx context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
		g.mu.Lock()
		g.running[req.JobId]++
		g.maxJob = max(g.maxJob, g.running[req.JobId])
		gate, fail := g.held[req.ExecutionId], g.fail[req.ExecutionId] && req.Attempt == 1
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.running[req.JobId]--
			g.mu.Unlock()
		}()
		switch {
		case fail:
			return deliver.Outcome{Result: deliver.Retryable, StatusCode: 503, Reason: "HTTP 503"}
		case gate == nil:
			return ok200
		}
		select {
		case out := <-gate:
			return out
		case <-ctx.Done():
			return deliver.Outcome{Result: deliver.Retryable, Reason: "request aborted"}
		}
	}}
	return g
}

// hold makes the attempts of executionID wait for release.
func (g *gates) hold(executionID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held[executionID] = make(chan deliver.Outcome, 1)
}

// failFirst makes the first attempt of executionID fail with a retry.
func (g *gates) failFirst(executionID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fail[executionID] = true
}

func (g *gates) release(executionID string, out deliver.Outcome) {
	g.mu.Lock()
	gate := g.held[executionID]
	g.mu.Unlock()
	gate <- out
}

func (g *gates) most() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxJob
}

var ok200 = deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200, Reason: "HTTP 200"}

// slots are consecutive executions of one job with policy, one a second.
func slots(n int, policy registryv1.OverlapPolicy) []*dispatchv1.DispatchRequest {
	first := request(registryv1.Priority_PRIORITY_NORMAL)
	out := make([]*dispatchv1.DispatchRequest, n)
	for i := range out {
		nominal := first.NominalTime.AsTime().Add(time.Duration(i) * time.Second)
		out[i] = proto.Clone(first).(*dispatchv1.DispatchRequest)
		out[i].ExecutionId = execid.For(first.JobId, nominal)
		out[i].NominalTime, out[i].FireTime = timestamppb.New(nominal), timestamppb.New(nominal)
		out[i].OverlapPolicy = policy
	}
	return out
}

// overlapOpts gives the pipeline the env's store as its overlap state and
// w as its cancellations.
func overlapOpts(e *env, cancels bool) func(*pipeline.Options) {
	return func(o *pipeline.Options) {
		o.Overlap = e.store
		o.OverlapSweepInterval = 50 * time.Millisecond
		if cancels {
			o.Cancels = e.watch()
		}
	}
}

// startHeld starts a pipeline whose target holds the first of n slots of
// a job with policy (cancels: the pipeline aborts attempts in flight), and
// returns once that first slot's attempt has started. tune, if given,
// changes the pipeline's options after the overlap ones.
func startHeld(t *testing.T, n int, policy registryv1.OverlapPolicy, cancels bool, tune ...func(*pipeline.Options)) (*env, *gates, *running, []*dispatchv1.DispatchRequest) {
	t.Helper()
	e := newEnv(t)
	g := newGates()
	r := e.start(g, func(o *pipeline.Options) {
		overlapOpts(e, cancels)(o)
		for _, f := range tune {
			f(o)
		}
	})
	s := slots(n, policy)
	g.hold(s[0].ExecutionId)
	e.dispatch(nil, s[0])
	e.waitFor(s[0].ExecutionId, started, 1)
	return e, g, r, s
}

// TestOverlapSkip: while an execution of a SKIP job is in flight, the next
// is not delivered and is recorded SKIPPED naming it (once, though
// redelivered); once it ends, the next slot runs.
func TestOverlapSkip(t *testing.T) {
	t.Parallel()
	e, g, r, s := startHeld(t, 3, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP, false)
	e.dispatch(nil, s[1])
	ev := e.waitFor(s[1].ExecutionId, skipped, 0)
	require.Equal(t, "skipped: execution "+s[0].ExecutionId+" of this job is still in progress", ev.Reason)
	require.Equal(t, s[1].NominalTime.AsTime(), ev.NominalTime.AsTime())
	// A republished copy is a duplicate of a completed execution, once its
	// completion is recorded (after its SKIPPED event is confirmed: a
	// copy arriving before that is judged again, and skipped again).
	require.Eventually(t, func() bool {
		done, err := e.store.Completed(t.Context(), []store.AttemptRef{attemptOf(s[1], s[1].Attempt)})
		require.NoError(t, err)
		return done[0]
	}, 30*time.Second, 5*time.Millisecond, "the skip is recorded")
	e.dispatch(amqp091.Table{outbox.PossibleDuplicateHeader: "1"}, s[1])
	require.Eventually(t, func() bool { return metric(t, r.reg, "duplicates_skipped_total") == 1 }, 30*time.Second, 5*time.Millisecond)

	g.release(s[0].ExecutionId, ok200)
	e.waitFor(s[0].ExecutionId, succeeded, 1)
	require.Eventually(t, func() bool {
		_, held, err := e.store.Active(t.Context(), testNamespace, s[0].JobId)
		require.NoError(t, err)
		return !held
	}, 30*time.Second, 5*time.Millisecond, "the end releases the job")
	e.dispatch(nil, s[2])
	e.waitFor(s[2].ExecutionId, succeeded, 1)

	r.stop(t)
	require.Empty(t, g.of(s[1].ExecutionId), "skipped: not delivered")
	require.Equal(t, map[string]int{"skipped/0": 1}, e.events.kinds(s[1].ExecutionId))
	require.Equal(t, 1, g.most(), "never two of the job at once")
	require.EqualValues(t, 3, metric(t, r.reg, "overlap_decisions_total"), "two admitted, one skipped")
}

// TestOverlapSkipWhileRetryPending: a retry waiting in a delay tier keeps
// its execution in progress: a SKIP slot arriving meanwhile is skipped.
func TestOverlapSkipWhileRetryPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := slots(2, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP)
	s[0].RetryPolicy = &registryv1.RetryPolicy{MaxRetries: proto.Int32(1), InitialBackoff: durationpb.New(800 * time.Millisecond)}
	g := newGates()
	g.failFirst(s[0].ExecutionId)
	g.hold(s[0].ExecutionId) // the retry waits at the target until released
	e.start(g, overlapOpts(e, false))
	e.dispatch(nil, s[0])
	failed := e.waitFor(s[0].ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, 1)
	require.True(t, failed.RetryScheduled)
	e.dispatch(nil, s[1])
	// Skipped naming s[0], whose attempt 1 failed before s[1] was sent and
	// whose retry has not ended: it was in progress between its attempts.
	ev := e.waitFor(s[1].ExecutionId, skipped, 0)
	require.Contains(t, ev.Reason, s[0].ExecutionId)
	g.release(s[0].ExecutionId, ok200)
	e.waitFor(s[0].ExecutionId, succeeded, 2)
	require.Empty(t, g.of(s[1].ExecutionId))
}

// TestOverlapBufferOne: one slot waits for the running execution and runs
// after it (in its own trace); a third finds it waiting and is skipped.
func TestOverlapBufferOne(t *testing.T) {
	t.Parallel()
	e, g, r, s := startHeld(t, 4, registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE, false)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e.dispatch(amqp091.Table{"traceparent": tp}, s[1])
	// s[2] goes out once s[1] is decided: sent together, the pipeline may
	// take either first, and the one it takes first is the one buffered.
	e.waitFor(s[1].ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_BUFFERED, 0)
	e.dispatch(nil, s[2])
	ev := e.waitFor(s[2].ExecutionId, skipped, 0)
	require.Contains(t, ev.Reason, s[0].ExecutionId)
	require.Eventually(t, func() bool {
		a, held, err := e.store.Active(t.Context(), testNamespace, s[0].JobId)
		require.NoError(t, err)
		return held && a.Buffered == s[1].ExecutionId
	}, 30*time.Second, 5*time.Millisecond)
	buffered := e.waitFor(s[1].ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_BUFFERED, 0)
	require.Equal(t, "buffered: waiting for execution "+s[0].ExecutionId+" of this job to end", buffered.Reason)
	require.Empty(t, g.of(s[1].ExecutionId))

	g.release(s[0].ExecutionId, ok200)
	done := e.waitFor(s[0].ExecutionId, succeeded, 1)
	start := e.waitFor(s[1].ExecutionId, started, 1)
	require.False(t, start.OccurTime.AsTime().Before(done.OccurTime.AsTime()), "the buffered one starts after the other ended")
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", start.TraceId, "in its own trace")
	e.waitFor(s[1].ExecutionId, succeeded, 1)
	require.Eventually(t, func() bool {
		_, held, err := e.store.Active(t.Context(), testNamespace, s[0].JobId)
		require.NoError(t, err)
		return !held
	}, 30*time.Second, 5*time.Millisecond)
	e.dispatch(nil, s[3])
	e.waitFor(s[3].ExecutionId, succeeded, 1)
	r.stop(t)
	require.Len(t, g.of(s[1].ExecutionId), 1)
	require.Empty(t, g.of(s[2].ExecutionId))
	require.Equal(t, 1, g.most())
	require.EqualValues(t, 1, metric(t, r.reg, "overlap_promoted_published_total"))
}

// TestOverlapBufferOnePublishedAfterCrash: a promoted execution whose
// publish the promoting replica never made (it died) is published by the
// sweep once store.RepublishAfter has passed.
func TestOverlapBufferOnePublishedAfterCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := slots(2, registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE)
	// As a replica that died right after its release committed: s[1] is
	// promoted in the store, never published.
	now := time.Now()
	for _, req := range s {
		_, err := e.store.Admit(t.Context(), storeAdmission(req, now))
		require.NoError(t, err)
	}
	p, err := e.store.Release(t.Context(), activeRef(s[0]), now.Add(-2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, s[1].ExecutionId, p.ExecutionID)

	f := &fake{}
	e.start(f, overlapOpts(e, false))
	e.waitFor(s[1].ExecutionId, succeeded, 1)
	require.Len(t, f.of(s[1].ExecutionId), 1)
}

// TestOverlapCancelOther: a CANCEL_OTHER slot aborts the running
// execution's attempt in flight (CANCELLED, with the policy's reason, no
// retry) and runs; so does one whose predecessor waits for a retry.
func TestOverlapCancelOther(t *testing.T) {
	t.Parallel()
	// The retry of the second part is looked up only once its successor
	// was admitted, whatever the machine's speed: its delay tier (800 ms)
	// alone does not order the two.
	retryingID := uuid.NewString()
	lookUps := &lookUpGate{id: retryingID, release: make(chan struct{})}
	e, g, r, s := startHeld(t, 3, registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER, true, func(o *pipeline.Options) {
		lookUps.Checks = o.Checks
		o.Checks = lookUps
		o.CancelTimeout = time.Minute // the held look-up must not time out and fail open
	})
	e.dispatch(nil, s[1])
	ev := e.waitFor(s[0].ExecutionId, cancelled, 1)
	require.Equal(t, "cancelled by overlap policy: execution "+s[1].ExecutionId+"; the attempt in flight was aborted", ev.Reason)
	e.waitFor(s[1].ExecutionId, succeeded, 1)
	require.Len(t, g.of(s[0].ExecutionId), 1, "the cancelled one is not retried")

	// A predecessor waiting for its retry: the retry is dropped.
	s[2].RetryPolicy = &registryv1.RetryPolicy{MaxRetries: proto.Int32(1), InitialBackoff: durationpb.New(800 * time.Millisecond)}
	retrying := slots(1, registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER)[0]
	retrying.JobId = s[2].JobId
	retrying.ExecutionId = retryingID
	retrying.RetryPolicy = s[2].RetryPolicy
	g.failFirst(retrying.ExecutionId)
	e.dispatch(nil, retrying)
	e.waitFor(retrying.ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, 1)
	e.dispatch(nil, s[2])
	e.waitFor(s[2].ExecutionId, succeeded, 1)
	close(lookUps.release)
	ev = e.waitFor(retrying.ExecutionId, cancelled, 2)
	require.Equal(t, "cancelled by overlap policy: execution "+s[2].ExecutionId, ev.Reason)
	r.stop(t)
	require.Len(t, g.of(retrying.ExecutionId), 1, "the retry is not delivered")
}

// TestOverlapAllowCostsNothing: ALLOW (and an unset policy) takes no row
// and no look-up: concurrent executions of one job are delivered at once.
func TestOverlapAllowCostsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGates()
	r := e.start(g, overlapOpts(e, false))
	s := slots(2, registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW)
	s[1].OverlapPolicy = registryv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED
	g.hold(s[0].ExecutionId)
	g.hold(s[1].ExecutionId)
	e.dispatch(nil, s...)
	e.waitFor(s[0].ExecutionId, started, 1)
	e.waitFor(s[1].ExecutionId, started, 1)
	_, held, err := e.store.Active(t.Context(), testNamespace, s[0].JobId)
	require.NoError(t, err)
	require.False(t, held)
	g.release(s[0].ExecutionId, ok200)
	g.release(s[1].ExecutionId, ok200)
	e.waitFor(s[0].ExecutionId, succeeded, 1)
	e.waitFor(s[1].ExecutionId, succeeded, 1)
	r.stop(t)
	require.Equal(t, 2, g.most())
	require.Zero(t, metric(t, r.reg, "overlap_decisions_total"))
	require.EqualValues(t, 2, metric(t, r.reg, "lookups_skipped_total"))
}

// TestOverlapStateAwayRequeues: while the overlap state cannot be reached,
// a SKIP job's first attempt is requeued, not delivered around its policy.
func TestOverlapStateAwayRequeues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	away := &overlapAway{Overlap: e.store, failing: make(chan struct{})}
	f := &fake{}
	r := e.start(f, func(o *pipeline.Options) { o.Overlap = away })
	req := slots(1, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP)[0]
	e.dispatch(nil, req)
	require.Eventually(t, func() bool { return metric(t, r.reg, "overlap_errors_total") >= 2 }, 30*time.Second, 5*time.Millisecond)
	require.Empty(t, f.of(req.ExecutionId))
	close(away.failing)
	e.waitFor(req.ExecutionId, succeeded, 1)
}

func storeAdmission(req *dispatchv1.DispatchRequest, now time.Time) store.Admission {
	return store.Admission{Request: req, Now: now, Span: time.Hour}
}

func activeRef(req *dispatchv1.DispatchRequest) store.ActiveRef {
	return store.ActiveRef{Namespace: req.Namespace, JobID: req.JobId, ExecutionID: req.ExecutionId}
}

// overlapAway is an overlap state that fails every admission until
// failing is closed.
type overlapAway struct {
	pipeline.Overlap
	failing chan struct{}
}

func (o *overlapAway) Admit(ctx context.Context, a store.Admission) (store.AdmitResult, error) {
	select {
	case <-o.failing:
		return o.Overlap.Admit(ctx, a)
	default:
		return store.AdmitResult{}, errors.New("database away")
	}
}

// lookUpGate holds the pipeline's look-ups of one execution until release
// is closed, so that a test can order a request's look-up after another
// event; every other look-up and record goes straight to Checks.
type lookUpGate struct {
	pipeline.Checks
	id      string
	release chan struct{}
}

func (g *lookUpGate) Check(ctx context.Context, refs []store.CheckRef) ([]store.CheckResult, error) {
	if slices.ContainsFunc(refs, func(ref store.CheckRef) bool { return ref.ExecutionID == g.id }) {
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Checks.Check(ctx, refs)
}
