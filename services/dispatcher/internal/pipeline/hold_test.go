package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
)

// TestHeldUntilNotBefore: a request the trigger fired ahead of its slot is
// prepared when taken and delivered at its not_before on the pipeline's
// clock, and the requests behind it in the queue are not held up.
func TestHeldUntilNotBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	f := &fake{}
	r := e.start(f, func(o *pipeline.Options) { o.Clock, o.MaxHold = clk, time.Minute })

	slot := clk.Now().Add(2 * time.Second)
	held := e.dispatchHeld(t, clk, registryv1.Priority_PRIORITY_NORMAL, slot)

	behind := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(nil, behind)
	e.waitFor(behind.ExecutionId, succeeded, 1)

	require.Equal(t, 1, f.preparedOf(held.ExecutionId), "prepared while held")
	clk.Advance(2*time.Second - time.Millisecond)
	require.Empty(t, f.of(held.ExecutionId), "delivered before its slot")
	clk.Advance(time.Millisecond)
	ev := e.waitFor(held.ExecutionId, succeeded, 1)
	require.True(t, ev.StartTime.AsTime().Equal(slot), "the attempt started at %v, the slot is at %v", ev.StartTime.AsTime(), slot)
	require.Len(t, f.of(held.ExecutionId), 1)
	require.Equal(t, 1.0, metric(t, r.reg, "dispatch_hold_seconds"), "only the request with a not_before is observed")
	require.Zero(t, metric(t, r.reg, "dispatch_holds_capped_total"))
}

// TestHoldIsBoundedByMaxHold: a not_before further ahead than MaxHold (the
// trigger's clock and this host's disagree) is held MaxHold, then
// delivered, and counted.
func TestHoldIsBoundedByMaxHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	r := e.start(&fake{}, func(o *pipeline.Options) { o.Clock, o.MaxHold = clk, 3*time.Second })

	taken := clk.Now()
	req := e.dispatchHeld(t, clk, registryv1.Priority_PRIORITY_HIGH, taken.Add(time.Hour))
	clk.Advance(3 * time.Second)
	ev := e.waitFor(req.ExecutionId, succeeded, 1)
	require.True(t, ev.StartTime.AsTime().Equal(taken.Add(3*time.Second)))
	require.Equal(t, 1.0, metric(t, r.reg, "dispatch_holds_capped_total"))
}

// TestShutdownRequeuesHeldRequests: a request held for its slot when
// shutdown begins is requeued at once, not delivered and not waited for.
func TestShutdownRequeuesHeldRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	f := &fake{}
	r := e.start(f, func(o *pipeline.Options) { o.Clock, o.MaxHold = clk, time.Minute })

	req := e.dispatchHeld(t, clk, registryv1.Priority_PRIORITY_LOW, clk.Now().Add(30*time.Second))

	r.stop(t) // the fake clock never reaches the slot, nor the drain timeout
	require.Empty(t, f.of(req.ExecutionId))
	require.Eventually(t, func() bool { return e.queueDepth(e.dispatchQueue("low")) == 1 }, 30*time.Second, 10*time.Millisecond,
		"the held request is back in its queue")
	require.Equal(t, 1.0, metric(t, r.reg, "dispatch_requeued_total"))
}

// idleWaiters is how many waits an idle pipeline has pending on its clock:
// the periodic retry of unrecorded completions.
const idleWaiters = 1

// waitIdle waits until the pipeline's own waits are pending, so that one
// more is a held request's.
func waitIdle(t *testing.T, clk *clock.Fake) {
	t.Helper()
	require.Eventually(t, func() bool { return clk.Waiters() == idleWaiters }, 30*time.Second, 5*time.Millisecond)
}

// dispatchHeld dispatches a request of priority whose not_before is
// notBefore, once the pipeline on clk is idle, and returns it once the
// pipeline holds it.
func (e *env) dispatchHeld(t *testing.T, clk *clock.Fake, priority registryv1.Priority, notBefore time.Time) *dispatchv1.DispatchRequest {
	t.Helper()
	req := request(priority, func(r *dispatchv1.DispatchRequest) { r.NotBefore = timestamppb.New(notBefore) })
	waitIdle(t, clk)
	e.dispatch(nil, req)
	require.Eventually(t, func() bool { return clk.Waiters() == idleWaiters+1 }, 30*time.Second, 5*time.Millisecond, "the request is held")
	return req
}
