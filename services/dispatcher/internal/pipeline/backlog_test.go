package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
)

// quiet is how long a test watches for an event that must not be
// published; the pipeline publishes an event it may publish within
// milliseconds (no linger in these tests).
const quiet = 300 * time.Millisecond

// startOneSlot runs a pipeline with one normal delivery slot, no event
// linger and the given event hold on clk, delivering through a blocking
// deliverer (no STARTED events), and dispatches three normal requests: the first is being
// delivered, the other two wait for the slot.
func startOneSlot(t *testing.T, e *env, clk clock.Clock, hold time.Duration) (*running, *blocking, []*dispatchv1.DispatchRequest) {
	t.Helper()
	b := newBlocking()
	r := e.start(b, func(o *pipeline.Options) {
		o.Clock, o.Workers, o.EventLinger, o.EventHold = clk, pipeline.Workers{Normal: 1}, -1, hold
		o.StartedEventAfter = time.Hour // only outcomes
	})
	var reqs []*dispatchv1.DispatchRequest
	for range 3 {
		reqs = append(reqs, request(registryv1.Priority_PRIORITY_NORMAL))
	}
	e.dispatch(nil, reqs[0])
	require.Equal(t, reqs[0].ExecutionId, b.waitEntered(t).ExecutionId)
	e.dispatch(nil, reqs[1], reqs[2])
	require.Eventually(t, func() bool { return metric(t, r.reg, "delivery_slot_waiters") == 2 }, 30*time.Second, 5*time.Millisecond,
		"two requests wait for the slot")
	return r, b, reqs
}

// takesTheSlot waits for one of waiting, requests that wait for the slot
// together, to start its attempt, and returns it and the others. Which one
// takes the slot is up to the scheduler: they were handled concurrently, so
// neither began waiting first by construction.
func takesTheSlot(t *testing.T, b *blocking, waiting ...*dispatchv1.DispatchRequest) (started *dispatchv1.DispatchRequest, rest []*dispatchv1.DispatchRequest) {
	t.Helper()
	entered := b.waitEntered(t)
	for _, req := range waiting {
		if req.ExecutionId == entered.ExecutionId {
			started = req
		} else {
			rest = append(rest, req)
		}
	}
	require.NotNil(t, started, "an attempt of a request that was not waiting started")
	return started, rest
}

// TestEventsWaitForTheBacklog: while requests wait for a delivery slot,
// the events of the deliveries that ended are held back; they are
// published once no request waits.
func TestEventsWaitForTheBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, b, reqs := startOneSlot(t, e, clock.Real{}, time.Hour)

	b.release <- struct{}{} // the first ends; one of the others takes the slot, the last still waits
	second, rest := takesTheSlot(t, b, reqs[1], reqs[2])
	last := rest[0]
	time.Sleep(quiet)
	require.Empty(t, e.events.of(reqs[0].ExecutionId), "published while a request waits for a slot")

	b.release <- struct{}{} // the second ends; the last takes the slot: no one waits
	require.Equal(t, last.ExecutionId, b.waitEntered(t).ExecutionId)
	e.waitFor(reqs[0].ExecutionId, succeeded, 1)
	e.waitFor(second.ExecutionId, succeeded, 1)
	require.Zero(t, metric(t, r.reg, "delivery_slot_waiters"))

	b.release <- struct{}{}
	e.waitFor(last.ExecutionId, succeeded, 1)
}

// TestEventHoldIsBounded: a backlog that does not clear holds the events
// back for EventHold, then lets them through while it lasts; once it has
// cleared, the next one holds them back again.
func TestEventHoldIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	const hold = 2 * time.Second
	r, b, reqs := startOneSlot(t, e, clk, hold)

	b.release <- struct{}{}
	second, rest := takesTheSlot(t, b, reqs[1], reqs[2])
	third := rest[0]
	time.Sleep(quiet)
	require.Empty(t, e.events.of(reqs[0].ExecutionId), "published before the hold ended")
	clk.Advance(hold)
	e.waitFor(reqs[0].ExecutionId, succeeded, 1)

	// The third still waits, yet the hold is over: the second's outcome
	// goes out at once.
	b.release <- struct{}{}
	require.Equal(t, third.ExecutionId, b.waitEntered(t).ExecutionId)
	e.waitFor(second.ExecutionId, succeeded, 1)

	// A new backlog holds again.
	next := []*dispatchv1.DispatchRequest{request(registryv1.Priority_PRIORITY_NORMAL), request(registryv1.Priority_PRIORITY_NORMAL)}
	e.dispatch(nil, next...)
	require.Eventually(t, func() bool { return metric(t, r.reg, "delivery_slot_waiters") == 2 }, 30*time.Second, 5*time.Millisecond,
		"the third is still being delivered: both wait")
	b.release <- struct{}{} // the third ends; one of next takes the slot, the other waits
	_, rest = takesTheSlot(t, b, next...)
	time.Sleep(quiet)
	require.Empty(t, e.events.of(third.ExecutionId), "published while a new backlog waits")
	clk.Advance(hold)
	e.waitFor(third.ExecutionId, succeeded, 1)
	b.release <- struct{}{}
	require.Equal(t, rest[0].ExecutionId, b.waitEntered(t).ExecutionId)
	b.release <- struct{}{}
}
