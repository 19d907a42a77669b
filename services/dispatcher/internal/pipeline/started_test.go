package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
)

// blocking is a Deliverer whose attempts wait for release; entered
// receives each request as its attempt starts.
type blocking struct {
	entered chan *dispatchv1.DispatchRequest
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{entered: make(chan *dispatchv1.DispatchRequest, 16), release: make(chan struct{})}
}

// Prepare prepares nothing: deliver makes the attempt.
func (b *blocking) Prepare(_ context.Context, req *dispatchv1.DispatchRequest) deliver.Attempt {
	return deliver.AttemptFunc(func(ctx context.Context) deliver.Outcome { return b.deliver(ctx, req) })
}

func (b *blocking) deliver(ctx context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
	b.entered <- req
	select {
	case <-b.release:
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200, Duration: 3 * time.Second}
	case <-ctx.Done():
		return deliver.Outcome{Result: deliver.Retryable, Reason: "interrupted"}
	}
}

// waitEntered returns the next request whose attempt started.
func (b *blocking) waitEntered(t *testing.T) *dispatchv1.DispatchRequest {
	t.Helper()
	select {
	case req := <-b.entered:
		return req
	case <-time.After(30 * time.Second):
		t.Fatal("no attempt started")
		return nil
	}
}

// TestQuickAttemptEmitsOnlyItsOutcome: an attempt that ends before
// StartedEventAfter emits its outcome alone, and the outcome carries what
// a STARTED would have told (start, fire and nominal times, trace, job).
func TestQuickAttemptEmitsOnlyItsOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	r := e.start(&fake{}, func(o *pipeline.Options) {
		o.Clock, o.StartedEventAfter = clk, time.Second
	})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(amqp091.Table{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}, req)

	ev := e.waitFor(req.ExecutionId, succeeded, 1)
	// The STARTED, had there been one, was counted before the outcome
	// was emitted.
	require.Zero(t, metric(t, r.reg, "started_events_total"))
	require.Zero(t, clk.Timers(), "the announcement's timer was stopped")
	require.NotNil(t, ev.StartTime)
	require.True(t, ev.StartTime.AsTime().Equal(clk.Now()), "the attempt started at %v (the fake clock's time)", ev.StartTime.AsTime())
	require.True(t, proto.Equal(req.FireTime, ev.FireTime))
	require.True(t, proto.Equal(req.NominalTime, ev.NominalTime))
	require.Equal(t, time.Millisecond, ev.Duration.AsDuration())
	require.Equal(t, traceID, ev.TraceId)
	require.NotEmpty(t, ev.TraceContext["traceparent"], "consumers continue the attempt's trace from the outcome")
	require.Equal(t, "nightly report", ev.JobDisplayName)
	require.Equal(t, map[string]string{"team": "data"}, ev.JobLabels)
	require.Equal(t, dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, ev.TriggerKind)

	r.stop(t)
	require.Zero(t, e.queueDepth(e.dispatchQueue("normal")), "the message was acknowledged")
	require.Equal(t, map[string]int{"succeeded/1": 1}, e.events.kinds(req.ExecutionId))
}

// TestStartedEventTiming: with a threshold, STARTED is emitted once the
// attempt has run that long on the pipeline's clock, before its outcome,
// and stamped with the attempt's start; with none (zero), at the start,
// before the target is called.
func TestStartedEventTiming(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{
		{"after a threshold", time.Second},
		{"zero: at the start", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			clk := clock.NewFake(time.Now())
			b := newBlocking()
			r := e.start(b, func(o *pipeline.Options) { o.Clock, o.StartedEventAfter = clk, tc.after })
			req := request(registryv1.Priority_PRIORITY_HIGH)
			const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
			e.dispatch(amqp091.Table{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}, req)
			b.waitEntered(t)
			startTime := clk.Now()

			if tc.after > 0 {
				require.Zero(t, metric(t, r.reg, "started_events_total"), "not before the threshold")
				require.Equal(t, 1, clk.Timers())
				clk.Advance(tc.after - time.Millisecond)
				require.Zero(t, metric(t, r.reg, "started_events_total"), "not before the threshold")
				clk.Advance(time.Millisecond)
			}
			// Counted as it is emitted: before Advance returns, or before
			// the target was called.
			require.EqualValues(t, 1, metric(t, r.reg, "started_events_total"))
			st := e.waitFor(req.ExecutionId, started, 1)
			require.True(t, st.StartTime.AsTime().Equal(startTime), "STARTED says when the attempt started")
			require.True(t, proto.Equal(st.OccurTime, st.StartTime))
			require.Equal(t, traceID, st.TraceId)
			require.Contains(t, st.TraceContext["traceparent"], traceID, "the timer emits in the attempt's trace")
			require.Empty(t, e.events.of(req.ExecutionId)[1:], "no outcome while the attempt runs")

			close(b.release)
			ev := e.waitFor(req.ExecutionId, succeeded, 1)
			require.True(t, proto.Equal(st.StartTime, ev.StartTime))
			r.stop(t)
			require.Zero(t, e.queueDepth(e.dispatchQueue("high")))
			require.Equal(t, map[string]int{"started/1": 1, "succeeded/1": 1}, e.events.kinds(req.ExecutionId))
			require.EqualValues(t, 1, metric(t, r.reg, "started_events_total"))
		})
	}
}

// TestStartedEventRacesTheOutcome: attempts that end about when the
// threshold passes (on the real clock) each emit their STARTED before
// their outcome (event ids are UUIDv7, in order of creation) or not at
// all, and every STARTED counted is published.
func TestStartedEventRacesTheOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := &fake{fn: func(context.Context, *dispatchv1.DispatchRequest) deliver.Outcome {
		d := time.Duration(rand.IntN(2000)) * time.Microsecond
		time.Sleep(d)
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200, Duration: d}
	}}
	r := e.start(f, func(o *pipeline.Options) { o.StartedEventAfter = time.Millisecond })
	reqs := make([]*dispatchv1.DispatchRequest, 60)
	for i := range reqs {
		reqs[i] = request(registryv1.Priority_PRIORITY_NORMAL)
	}
	e.dispatchBulk(reqs...)
	for _, req := range reqs {
		e.waitFor(req.ExecutionId, succeeded, 1)
	}
	r.stop(t)
	require.Zero(t, e.queueDepth(e.dispatchQueue("normal")))

	startedEvents := 0
	for _, req := range reqs {
		evs := e.events.of(req.ExecutionId)
		kinds := e.events.kinds(req.ExecutionId)
		switch len(evs) {
		case 1:
			require.Equal(t, map[string]int{"succeeded/1": 1}, kinds)
		case 2:
			require.Equal(t, map[string]int{"started/1": 1, "succeeded/1": 1}, kinds)
			st, out := evs[0], evs[1]
			if st.Kind != started {
				st, out = out, st
			}
			require.Less(t, st.EventId, out.EventId, "STARTED was created before the outcome")
			startedEvents++
		default:
			require.Fail(t, fmt.Sprintf("%s: events %v", req.ExecutionId, kinds))
		}
	}
	t.Logf("%d of %d attempts emitted STARTED", startedEvents, len(reqs))
	require.EqualValues(t, startedEvents, metric(t, r.reg, "started_events_total"),
		"every STARTED counted was published before its message was acknowledged")
}

func TestNewRefusesANegativeStartedEventAfter(t *testing.T) {
	t.Parallel()
	_, err := pipeline.New(pipeline.Options{
		AMQPURL: amqptest.URL(), Publisher: &nopPublisher{}, Deliverer: &fake{}, StartedEventAfter: -time.Second,
	})
	require.ErrorContains(t, err, "must not be negative")
}
