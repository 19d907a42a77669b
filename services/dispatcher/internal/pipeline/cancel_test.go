package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/inflight"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// watch runs a cancellation watcher on the env's store until the test
// ends and returns it.
func (e *env) watch(mods ...func(*inflight.WatcherOptions)) *inflight.Watcher {
	e.t.Helper()
	opts := inflight.WatcherOptions{Feed: e.store, Registry: inflight.NewRegistry(), PollInterval: 20 * time.Millisecond}
	for _, m := range mods {
		m(&opts)
	}
	w, err := inflight.NewWatcher(opts)
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		require.NoError(e.t, <-done)
	})
	return w
}

// TestCancelledWhileQueued: a slot's first attempt, published once and
// never redelivered (no look-up in the database is made for it), waits in
// the queue while the dispatcher is down; its execution is cancelled; the
// dispatcher that starts then drops it with a CANCELLED event and delivers
// the rest, another namespace's execution of the same id included.
func TestCancelledWhileQueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p, err := pipeline.New(func() pipeline.Options {
		o := e.opts
		o.Deliverer, o.Publisher = &fake{}, &nopPublisher{}
		return o
	}())
	require.NoError(t, err)
	require.NoError(t, broker.DeclareQueues(t.Context(), amqptest.URL(), p.Bindings()...))

	queued := request(registryv1.Priority_PRIORITY_NORMAL)
	sameIDOtherTenant := request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) {
		r.ExecutionId, r.JobId, r.Namespace = queued.ExecutionId, queued.JobId, "beta"
	})
	other := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(nil, queued, sameIDOtherTenant, other)
	require.NoError(t, e.store.Cancel(t.Context(), testNamespace, queued.ExecutionId, time.Now()))

	f := &fake{}
	w := e.watch()
	r := e.start(f, func(o *pipeline.Options) { o.Cancels = w })
	e.waitFor(queued.ExecutionId, cancelled, 1)
	e.waitFor(other.ExecutionId, succeeded, 1)
	require.Eventually(t, func() bool { return len(f.of(queued.ExecutionId)) == 1 }, 30*time.Second, 5*time.Millisecond,
		"the other namespace's execution of the same id is delivered")
	r.stop(t)
	require.Equal(t, "beta", f.of(queued.ExecutionId)[0].req.Namespace, "the cancelled one is not delivered")
	require.Equal(t, map[string]int{"cancelled/1": 1}, kindsOf(e, queued.ExecutionId, testNamespace))
	require.EqualValues(t, 1, metric(t, r.reg, "executions_cancelled_total"))
}

// TestCancelledInFlight: an attempt whose target does not answer is
// aborted by a cancel (its context is cancelled with inflight.ErrAborted),
// ends CANCELLED and is not retried although retries are left.
func TestCancelledInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reached := make(chan struct{})
	causes := make(chan error, 1)
	f := &fake{fn: func(ctx context.Context, _ *dispatchv1.DispatchRequest) deliver.Outcome {
		close(reached)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return deliver.Outcome{Result: deliver.Retryable, Reason: "request aborted"}
	}}
	w := e.watch()
	r := e.start(f, func(o *pipeline.Options) { o.Cancels = w })
	req := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(nil, req)
	<-reached
	require.NoError(t, e.store.Cancel(t.Context(), testNamespace, req.ExecutionId, time.Now()))
	// No Watcher.Cancel: the feed alone carries it, as from another replica.
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, inflight.ErrAborted)
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt in flight was not aborted")
	}
	ev := e.waitFor(req.ExecutionId, cancelled, 1)
	require.Contains(t, ev.Reason, "aborted")
	r.stop(t)
	require.Len(t, f.of(req.ExecutionId), 1, "no retry")
	require.Equal(t, map[string]int{"started/1": 1, "cancelled/1": 1}, e.events.kinds(req.ExecutionId))
	done, err := e.store.Check(t.Context(), []store.CheckRef{{Namespace: testNamespace, NominalTime: req.NominalTime.AsTime(), ExecutionID: req.ExecutionId, Attempt: 1}})
	require.NoError(t, err)
	require.True(t, done[0].Completed, "the aborted attempt completes the execution")
}

// kindsOf is eventLog.kinds for one namespace's execution of the id.
func kindsOf(e *env, executionID, namespace string) map[string]int {
	out := map[string]int{}
	for _, ev := range e.events.of(executionID) {
		if ev.Namespace == namespace {
			out[execevent.KindName(ev.Kind)+"/"+itoa(ev.Attempt)]++
		}
	}
	return out
}

// TestLiftedCancellationIsDelivered: a cancellation the database no
// longer holds (a redrive lifts it) but the memory still knows does not
// drop the request: the memory's yes is confirmed, and forgotten.
func TestLiftedCancellationIsDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := &fake{}
	w := e.watch()
	e.start(f, func(o *pipeline.Options) { o.Cancels = w })
	req := request(registryv1.Priority_PRIORITY_NORMAL)
	ref := inflight.Ref{Namespace: testNamespace, ExecutionID: req.ExecutionId}
	require.NoError(t, e.store.Cancel(t.Context(), testNamespace, req.ExecutionId, time.Now()))
	require.Eventually(t, func() bool { return w.Known(ref) }, 30*time.Second, 5*time.Millisecond)
	_, err := e.store.DeleteCancellationsBefore(t.Context(), time.Now().Add(time.Hour))
	require.NoError(t, err)

	e.dispatch(nil, req)
	e.waitFor(req.ExecutionId, succeeded, 1)
	require.Len(t, f.of(req.ExecutionId), 1)
	require.False(t, w.Known(ref), "forgotten")
}

// TestCancelledWhileQueuedBeyondMemory: with more cancellations than the
// watcher keeps in memory, a queued first attempt whose cancellation did
// not fit is still dropped (asked of the database), and the others are
// still delivered.
func TestCancelledWhileQueuedBeyondMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p, err := pipeline.New(func() pipeline.Options {
		o := e.opts
		o.Deliverer, o.Publisher = &fake{}, &nopPublisher{}
		return o
	}())
	require.NoError(t, err)
	require.NoError(t, broker.DeclareQueues(t.Context(), amqptest.URL(), p.Bindings()...))
	first, second, other := request(registryv1.Priority_PRIORITY_NORMAL), request(registryv1.Priority_PRIORITY_NORMAL), request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(nil, first, second, other)
	require.NoError(t, e.store.Cancel(t.Context(), testNamespace, first.ExecutionId, time.Now()))
	require.NoError(t, e.store.Cancel(t.Context(), testNamespace, second.ExecutionId, time.Now()))

	f := &fake{}
	w := e.watch(func(o *inflight.WatcherOptions) { o.MaxKnown = 1 })
	r := e.start(f, func(o *pipeline.Options) { o.Cancels = w })
	e.waitFor(first.ExecutionId, cancelled, 1)
	e.waitFor(second.ExecutionId, cancelled, 1)
	e.waitFor(other.ExecutionId, succeeded, 1)
	r.stop(t)
	require.True(t, w.Full())
	require.Empty(t, f.of(first.ExecutionId))
	require.Empty(t, f.of(second.ExecutionId))
}
