package pipeline_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

const (
	started   = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED
	succeeded = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED
	failed    = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED
	dead      = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD
	cancelled = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED
)

// TestSuccess: a delivered request gives STARTED and SUCCEEDED events that
// carry the request's identity and its trace, batched, and is acknowledged;
// poison messages are dropped without holding up the queue.
func TestSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := &fake{}
	// A linger long enough that a message's two events always share a
	// batch, however loaded the machine.
	r := e.start(f, func(o *pipeline.Options) { o.EventLinger = 200 * time.Millisecond })

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	reqs := []*dispatchv1.DispatchRequest{request(registryv1.Priority_PRIORITY_NORMAL), request(registryv1.Priority_PRIORITY_HIGH), request(registryv1.Priority_PRIORITY_UNSPECIFIED)}
	ch := amqptest.Channel(t)
	require.NoError(t, ch.Confirm(false))
	e.publishRaw(ch, "dispatch.normal", "garbage", []byte("\xff\xff not a request"), nil)
	invalid, err := proto.Marshal(&dispatchv1.DispatchRequest{ExecutionId: "not-a-uuid", Attempt: 1})
	require.NoError(t, err)
	e.publishRaw(ch, "dispatch.low", "invalid", invalid, nil)
	e.dispatch(amqp091.Table{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}, reqs...)

	for _, req := range reqs {
		ev := e.waitFor(req.ExecutionId, succeeded, 1)
		require.Equal(t, req.JobId, ev.JobId)
		require.Equal(t, testNamespace, ev.Namespace)
		require.Equal(t, traceID, ev.TraceId)
		require.Equal(t, "nightly report", ev.JobDisplayName)
		require.Equal(t, map[string]string{"team": "data"}, ev.JobLabels)
		require.Equal(t, dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, ev.TriggerKind)
		require.True(t, proto.Equal(req.NominalTime, ev.NominalTime))
		require.Equal(t, time.Millisecond, ev.Duration.AsDuration())
		require.NotEmpty(t, ev.EventId)
		require.True(t, proto.Equal(req.FireTime, ev.FireTime))
		require.EqualValues(t, 200, ev.ResponseStatus)
		require.False(t, ev.RetryScheduled)
		require.Nil(t, ev.RetryDelay)
		st := e.waitFor(req.ExecutionId, started, 1)
		require.NotNil(t, st.StartTime)
		require.True(t, proto.Equal(st.OccurTime, st.StartTime), "an attempt starts when STARTED occurs")
		require.True(t, proto.Equal(st.StartTime, ev.StartTime), "the outcome carries its attempt's start")
		require.Zero(t, st.ResponseStatus)
		require.Nil(t, st.Duration)
		calls := f.of(req.ExecutionId)
		require.Len(t, calls, 1)
		require.Equal(t, traceID, calls[0].traceID, "the delivery runs in the message's trace")
	}
	require.Eventually(t, func() bool { return metric(t, r.reg, "poison_messages_total") == 2 }, 10*time.Second, 5*time.Millisecond)
	require.EqualValues(t, 3, metric(t, r.reg, "deliveries_total"))
	require.EqualValues(t, 3, metric(t, r.reg, "delivery_start_delay_seconds"), "one observation per attempt started")

	r.stop(t)
	for _, p := range []string{"high", "normal", "low"} {
		require.Zero(t, e.queueDepth(e.dispatchQueue(p)), "every message of %s was acknowledged", p)
	}
	e.events.mu.Lock()
	defer e.events.mu.Unlock()
	require.Len(t, e.events.events, 6)
	require.Less(t, e.events.batches, 6, "events travel in batches")
	for _, k := range e.events.keys {
		require.True(t, strings.HasPrefix(k, "execution."), k)
	}
}

// TestRetriesThenDead: a target that keeps failing gets exactly 1 +
// max_retries attempts, each after its tier's delay, then the dead-letter
// store has the execution with the last outcome.
func TestRetriesThenDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startDrainer()
	f := &fake{fn: func(context.Context, *dispatchv1.DispatchRequest) deliver.Outcome {
		return deliver.Outcome{Result: deliver.Retryable, StatusCode: 500, Reason: "HTTP 500", Excerpt: "oops \xff\x00", Duration: 2 * time.Millisecond}
	}}
	e.start(f)
	req := request(registryv1.Priority_PRIORITY_LOW)
	e.dispatch(nil, req)

	e.waitFor(req.ExecutionId, dead, 3)
	var letters []store.DeadLetter
	require.Eventually(t, func() bool {
		var err error
		letters, _, err = e.store.ListDeadLetters(t.Context(), testNamespace, "", 10, store.Cursor{})
		require.NoError(t, err)
		return len(letters) == 1
	}, 30*time.Second, 10*time.Millisecond)
	d := letters[0]
	require.Equal(t, req.ExecutionId, d.ExecutionID)
	require.Equal(t, req.JobId, d.JobID)
	require.EqualValues(t, 3, d.Attempt)
	require.EqualValues(t, 500, d.ResponseStatus)
	require.Equal(t, "oops \uFFFD\uFFFD", d.ResponseExcerpt)
	require.Equal(t, "retries exhausted after attempt 3: HTTP 500", d.Reason)
	require.True(t, d.NominalTime.Equal(req.NominalTime.AsTime()))
	require.EqualValues(t, 3, d.Request.Attempt)
	require.Equal(t, req.Target.GetHttp().SigningSecret, d.Request.Target.GetHttp().SigningSecret, "the store keeps the secret for redrives")

	calls := f.of(req.ExecutionId)
	require.Len(t, calls, 3, "exactly 1 + max_retries attempts")
	for i, c := range calls {
		require.EqualValues(t, i+1, c.req.Attempt)
	}
	// Attempt n+1 waits in the tier of 100 ms * 2^(n-1): never earlier.
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), 100*time.Millisecond)
	require.GreaterOrEqual(t, calls[2].at.Sub(calls[1].at), 200*time.Millisecond)

	require.Equal(t, map[string]int{
		"started/1": 1, "failed/1": 1, "started/2": 1, "failed/2": 1, "started/3": 1, "failed/3": 1, "dead/3": 1,
	}, e.events.kinds(req.ExecutionId))
	f1 := e.waitFor(req.ExecutionId, failed, 1)
	require.Equal(t, "HTTP 500; retry scheduled: attempt 2 in 100ms", f1.Reason)
	require.Equal(t, 2*time.Millisecond, f1.Duration.AsDuration())
	f2 := e.waitFor(req.ExecutionId, failed, 2)
	require.Equal(t, "HTTP 500; retry scheduled: attempt 3 in 200ms", f2.Reason)
	f3 := e.waitFor(req.ExecutionId, failed, 3)
	require.Equal(t, "retries exhausted after attempt 3: HTTP 500; not retried", f3.Reason)
	d3 := e.waitFor(req.ExecutionId, dead, 3)
	require.Equal(t, "retries exhausted after attempt 3: HTTP 500", d3.Reason)
	for _, tt := range []struct {
		ev    *eventsv1.ExecutionEvent
		retry time.Duration
	}{{f1, 100 * time.Millisecond}, {f2, 200 * time.Millisecond}, {f3, 0}, {d3, 0}} {
		require.EqualValues(t, 500, tt.ev.ResponseStatus)
		require.Equal(t, "oops \uFFFD\uFFFD", tt.ev.ResponseExcerpt, "valid UTF-8 without NUL")
		require.Equal(t, tt.retry != 0, tt.ev.RetryScheduled)
		require.Equal(t, tt.retry, tt.ev.RetryDelay.AsDuration())
		require.True(t, proto.Equal(req.FireTime, tt.ev.FireTime))
		require.NotNil(t, tt.ev.StartTime)
	}
	require.True(t, proto.Equal(f3.StartTime, d3.StartTime), "DEAD carries the last attempt's start")
	require.True(t, f2.StartTime.AsTime().After(f1.StartTime.AsTime()))
}

// TestRedrivenSeriesRetriesAfresh: a redriven request (attempt 4, the
// first of its series, after a dead letter at attempt 3) gets the policy's
// retries and backoffs again, numbered on from 4, so its events never
// repeat the (execution_id, attempt, kind) of the series that died.
func TestRedrivenSeriesRetriesAfresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startDrainer()
	f := &fake{fn: func(context.Context, *dispatchv1.DispatchRequest) deliver.Outcome {
		return deliver.Outcome{Result: deliver.Retryable, StatusCode: 503, Reason: "HTTP 503", Duration: time.Millisecond}
	}}
	e.start(f)
	req := request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) { r.Attempt, r.FirstAttempt = 4, 4 })
	e.dispatch(nil, req)

	d6 := e.waitFor(req.ExecutionId, dead, 6)
	require.Equal(t, "retries exhausted after attempt 6: HTTP 503", d6.Reason)
	calls := f.of(req.ExecutionId)
	require.Len(t, calls, 3, "1 + max_retries attempts in the redriven series")
	for i, c := range calls {
		require.EqualValues(t, 4+i, c.req.Attempt)
		require.EqualValues(t, 4, c.req.FirstAttempt, "retries keep the series' start")
	}
	// The series' own backoffs: 100 ms, then 200 ms (not the 400 ms and
	// 800 ms of retries 3 and 4).
	f4 := e.waitFor(req.ExecutionId, failed, 4)
	require.Equal(t, "HTTP 503; retry scheduled: attempt 5 in 100ms", f4.Reason)
	f5 := e.waitFor(req.ExecutionId, failed, 5)
	require.Equal(t, "HTTP 503; retry scheduled: attempt 6 in 200ms", f5.Reason)
	require.Equal(t, map[string]int{
		"started/4": 1, "failed/4": 1, "started/5": 1, "failed/5": 1, "started/6": 1, "failed/6": 1, "dead/6": 1,
	}, e.events.kinds(req.ExecutionId))
	require.Eventually(t, func() bool {
		letters, _, err := e.store.ListDeadLetters(t.Context(), testNamespace, "", 10, store.Cursor{})
		require.NoError(t, err)
		return len(letters) == 1 && letters[0].Attempt == 6
	}, 30*time.Second, 10*time.Millisecond)
}

// TestPermanentIsDeadAtOnce: a permanent failure is not retried; nor is a
// Deliverer that panics, making or preparing the attempt (the dispatcher
// survives it).
func TestPermanentIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	succeed := func() deliver.Outcome { return deliver.Outcome{Result: deliver.Succeeded} }
	tests := []struct {
		name           string
		outcome        func() deliver.Outcome
		panicOnPrepare bool
		reason         string
		excerpt        string
		calls          int
	}{
		{"404", func() deliver.Outcome {
			return deliver.Outcome{Result: deliver.Permanent, StatusCode: 404, Reason: "HTTP 404", Excerpt: "no such hook"}
		}, false, "HTTP 404", "no such hook", 1},
		{"panic", func() deliver.Outcome { panic("boom") }, false, "internal error of the dispatcher (see its log)", "", 1},
		{"panic while preparing", succeed, true, "internal error of the dispatcher (see its log)", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.startDrainer()
			f := &fake{fn: func(context.Context, *dispatchv1.DispatchRequest) deliver.Outcome { return tt.outcome() }, panicOnPrepare: tt.panicOnPrepare}
			r := e.start(f)
			req := request(registryv1.Priority_PRIORITY_HIGH)
			e.dispatch(nil, req)

			require.Equal(t, tt.reason, e.waitFor(req.ExecutionId, dead, 1).Reason)
			require.Equal(t, tt.reason+"; not retried", e.waitFor(req.ExecutionId, failed, 1).Reason)
			require.Eventually(t, func() bool {
				letters, _, err := e.store.ListDeadLetters(t.Context(), testNamespace, req.JobId, 10, store.Cursor{})
				require.NoError(t, err)
				return len(letters) == 1 && letters[0].ResponseExcerpt == tt.excerpt && letters[0].Attempt == 1 && letters[0].Reason == tt.reason
			}, 30*time.Second, 10*time.Millisecond)
			r.stop(t)
			require.Len(t, f.of(req.ExecutionId), tt.calls)
			require.EqualValues(t, 1, metric(t, r.reg, "dead_letters_total"))
			require.Zero(t, metric(t, r.reg, "retries_scheduled_total"))
		})
	}
}

// TestRetryAfterPicksTheTier: the target's Retry-After raises the delay
// to the tier that covers it.
func TestRetryAfterPicksTheTier(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := &fake{fn: func(_ context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
		if req.Attempt == 1 {
			return deliver.Outcome{Result: deliver.Retryable, StatusCode: 429, Reason: "HTTP 429", RetryAfter: 300 * time.Millisecond}
		}
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 204}
	}}
	e.start(f)
	req := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(nil, req)
	e.waitFor(req.ExecutionId, succeeded, 2)
	require.Equal(t, "HTTP 429; retry scheduled: attempt 2 in 400ms", e.waitFor(req.ExecutionId, failed, 1).Reason)
	calls := f.of(req.ExecutionId)
	require.Len(t, calls, 2)
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), 300*time.Millisecond, "not before Retry-After")
}

// TestCancelledIsNotDelivered: a cancelled execution's retry is dropped
// with a CANCELLED event; other namespaces' executions are untouched.
func TestCancelledIsNotDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := &fake{}
	r := e.start(f)
	req := request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) { r.Attempt = 2 })
	other := request(registryv1.Priority_PRIORITY_NORMAL)
	require.NoError(t, e.store.Cancel(t.Context(), testNamespace, req.ExecutionId, time.Now()))
	require.NoError(t, e.store.Cancel(t.Context(), "beta", other.ExecutionId, time.Now()))
	e.dispatch(nil, req, other)

	ev := e.waitFor(req.ExecutionId, cancelled, 2)
	require.Equal(t, "cancelled through CancelExecution", ev.Reason)
	e.waitFor(other.ExecutionId, succeeded, 1)
	r.stop(t)
	require.Empty(t, f.of(req.ExecutionId), "a cancelled execution is not delivered")
	require.Equal(t, map[string]int{"cancelled/2": 1}, e.events.kinds(req.ExecutionId))
	require.Zero(t, e.queueDepth(e.dispatchQueue("normal")))
	require.EqualValues(t, 1, metric(t, r.reg, "executions_cancelled_total"))
}

// TestHighIsNotStarved: with the low workers stuck on a slow target and a
// backlog of low behind them, a high request is delivered at once.
func TestHighIsNotStarved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	var lowInFlight atomic.Int32
	f := &fake{fn: func(ctx context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
		if req.Priority == registryv1.Priority_PRIORITY_LOW {
			lowInFlight.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200}
	}}
	e.start(f, func(o *pipeline.Options) { o.Workers = pipeline.Workers{High: 1, Normal: 1, Low: 2} })
	low := make([]*dispatchv1.DispatchRequest, 200)
	for i := range low {
		low[i] = request(registryv1.Priority_PRIORITY_LOW)
	}
	e.dispatch(nil, low...)
	require.Eventually(t, func() bool { return lowInFlight.Load() == 2 }, 30*time.Second, 5*time.Millisecond, "both low workers are stuck")

	high := request(registryv1.Priority_PRIORITY_HIGH)
	e.dispatch(nil, high)
	e.waitFor(high.ExecutionId, succeeded, 1)
	require.EqualValues(t, 2, lowInFlight.Load(), "no low request got through meanwhile")
	require.Greater(t, e.queueDepth(e.dispatchQueue("low")), 150, "the low backlog is still there")
	close(release)
}

// blockingRecords is a store whose RecordCompleted waits for release (or
// its context): the message of an attempt whose record waits is delivered
// but not yet acknowledged.
type blockingRecords struct {
	pipeline.Checks
	once    sync.Once
	entered chan struct{} // closed by the first RecordCompleted
	release chan struct{}
}

func (b *blockingRecords) RecordCompleted(ctx context.Context, done []store.CompletedAttempt) error {
	b.once.Do(func() { close(b.entered) })
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.Checks.RecordCompleted(ctx, done)
}

// TestNextMessageDoesNotWaitForTheAck: with one normal worker, a message
// whose delivery is over but whose completion is still being recorded (so
// it is not acknowledged yet) does not hold up the next message, which is
// delivered meanwhile. The time from leaving the queue to the target must
// not include another message's confirms and record.
func TestNextMessageDoesNotWaitForTheAck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	checks := &blockingRecords{Checks: e.store, entered: make(chan struct{}), release: make(chan struct{})}
	var delivered atomic.Int32
	f := &fake{fn: func(context.Context, *dispatchv1.DispatchRequest) deliver.Outcome {
		delivered.Add(1)
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200}
	}}
	e.start(f, func(o *pipeline.Options) {
		o.Workers = pipeline.Workers{High: 1, Normal: 1, Low: 1}
		o.Prefetch = 2
		o.Checks = checks
		o.CancelTimeout = time.Minute // the record waits for release, not for its timeout
	})

	first := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(nil, first)
	select {
	case <-checks.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt was not recorded")
	}
	second := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(nil, second)
	require.Eventually(t, func() bool { return delivered.Load() == 2 }, 30*time.Second, 5*time.Millisecond,
		"the second message is delivered while the first one's completion is being recorded")
	close(checks.release)
	e.waitFor(first.ExecutionId, succeeded, 1)
	e.waitFor(second.ExecutionId, succeeded, 1)
}

// TestShutdown: stopping the pipeline mid-delivery either lets the
// delivery finish within the drain timeout (then it is acknowledged with
// its events) or interrupts it; an interrupted message is not lost: the
// next pipeline delivers it, as attempt 1 again.
func TestShutdown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		finish bool // the delivery finishes within the drain timeout
	}{
		{"drained", true},
		{"interrupted", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			inside, release := make(chan struct{}), make(chan struct{})
			blocking := &fake{fn: func(ctx context.Context, _ *dispatchv1.DispatchRequest) deliver.Outcome {
				close(inside)
				select {
				case <-release:
					return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200}
				case <-ctx.Done():
					return deliver.Outcome{Result: deliver.Retryable, Reason: ctx.Err().Error()}
				}
			}}
			drain := time.Hour
			if !tt.finish {
				drain = 50 * time.Millisecond
			}
			first := e.start(blocking, func(o *pipeline.Options) { o.DrainTimeout = drain })
			req := request(registryv1.Priority_PRIORITY_NORMAL)
			e.dispatch(nil, req)
			<-inside
			first.cancel()
			if tt.finish {
				close(release)
			}
			require.NoError(t, first.wait(t))

			if tt.finish {
				e.waitFor(req.ExecutionId, succeeded, 1)
				require.Zero(t, e.queueDepth(e.dispatchQueue("normal")), "acknowledged")
				return
			}
			require.EqualValues(t, 1, metric(t, first.reg, "dispatch_requeued_total"))
			next := &fake{}
			e.start(next)
			e.waitFor(req.ExecutionId, succeeded, 1)
			require.Len(t, next.of(req.ExecutionId), 1)
			require.EqualValues(t, 1, next.of(req.ExecutionId)[0].req.Attempt)
			for _, ev := range e.events.of(req.ExecutionId) {
				require.NotEqual(t, failed, ev.Kind, "an interrupted attempt is not a failure")
			}
		})
	}
}

// TestRetryPublishFailure: while the retry cannot be published, the
// original message is not acknowledged: it comes back, and the attempt
// made is settled again (its retry published again) rather than made
// again; once the broker takes publishes again the retry goes out.
func TestRetryPublishFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy := amqptest.NewProxy(t, false)
	f := &fake{fn: func(_ context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
		if req.Attempt == 1 {
			return deliver.Outcome{Result: deliver.Retryable, StatusCode: 503, Reason: "HTTP 503"}
		}
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200}
	}}
	r := e.start(f, func(o *pipeline.Options) {
		o.Publisher = e.publisher(proxy.URL())
		o.PublishTimeout = 2 * time.Second
	})
	proxy.Down()
	req := request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) {
		r.RetryPolicy.InitialBackoff = durationpb.New(100 * time.Millisecond)
	})
	e.dispatch(nil, req)
	require.Eventually(t, func() bool { return metric(t, r.reg, "attempts_settled_again_total") >= 2 }, 30*time.Second, 5*time.Millisecond,
		"the message keeps coming back while its retry cannot be published")
	require.Len(t, f.of(req.ExecutionId), 1, "a redelivery of an attempt made here is not attempted again")
	require.Positive(t, metric(t, r.reg, "publish_failures_total"))
	require.Equal(t, 1.0, metric(t, r.reg, "attempts_unsettled"))

	proxy.Up()
	e.waitFor(req.ExecutionId, succeeded, 2)
	calls := f.of(req.ExecutionId)
	require.Len(t, calls, 2)
	require.EqualValues(t, 2, calls[1].req.Attempt)
	require.Eventually(t, func() bool { return metric(t, r.reg, "attempts_unsettled") == 0 }, 10*time.Second, 5*time.Millisecond)
	r.stop(t)
	require.Zero(t, e.queueDepth(e.dispatchQueue("normal")))
}

// TestEventPublishFailure: a delivery that succeeded while the broker
// takes no publishes (it died under the dispatcher, which held the request
// until its slot) reaches the target once: the redeliveries publish its
// SUCCEEDED, which goes out once the broker takes publishes again.
func TestEventPublishFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy := amqptest.NewProxy(t, false)
	f := &fake{}
	r := e.start(f, func(o *pipeline.Options) {
		o.Publisher = e.publisher(proxy.URL())
		o.PublishTimeout = time.Second
	})
	proxy.Down()
	req := request(registryv1.Priority_PRIORITY_HIGH)
	e.dispatch(nil, req)
	require.Eventually(t, func() bool { return metric(t, r.reg, "attempts_settled_again_total") >= 2 }, 30*time.Second, 5*time.Millisecond,
		"the message keeps coming back while its event cannot be published")
	require.Len(t, f.of(req.ExecutionId), 1)

	proxy.Up()
	ev := e.waitFor(req.ExecutionId, succeeded, 1)
	require.EqualValues(t, 200, ev.ResponseStatus)
	require.Eventually(t, func() bool {
		return e.queueDepth(e.dispatchQueue("high")) == 0 && metric(t, r.reg, "attempts_unsettled") == 0
	},
		10*time.Second, 5*time.Millisecond)
	require.Len(t, f.of(req.ExecutionId), 1, "the target saw the execution once")
	r.stop(t)
}

// TestNewValidates: bad options are refused.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	base := func() pipeline.Options {
		return pipeline.Options{AMQPURL: "amqp://x", Publisher: (*nopPublisher)(nil), Deliverer: &fake{}}
	}
	tests := []struct {
		name string
		mod  func(*pipeline.Options)
		ok   bool
	}{
		{"defaults", func(*pipeline.Options) {}, true},
		{"no url", func(o *pipeline.Options) { o.AMQPURL = "" }, false},
		{"no publisher", func(o *pipeline.Options) { o.Publisher = nil }, false},
		{"no deliverer", func(o *pipeline.Options) { o.Deliverer = nil }, false},
		{"negative workers", func(o *pipeline.Options) { o.Workers.High = -1 }, false},
		{"sub-millisecond tier", func(o *pipeline.Options) { o.RetryTiers = []time.Duration{time.Microsecond} }, false},
		{"fractional tier", func(o *pipeline.Options) { o.RetryTiers = []time.Duration{1500 * time.Microsecond} }, false},
		{"duplicate tier", func(o *pipeline.Options) { o.RetryTiers = []time.Duration{time.Second, time.Second} }, false},
		{"negative linger means none", func(o *pipeline.Options) { o.EventLinger = -1 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := base()
			tt.mod(&o)
			p, err := pipeline.New(o)
			if !tt.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Len(t, p.Bindings(), 3+len(broker.DefaultRetryTiers())+1)
		})
	}
}

// TestDrainer: dead letters are stored once however often they arrive;
// what is not a valid dead letter is dropped without blocking the queue.
func TestDrainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := e.startDrainer()
	req := request(registryv1.Priority_PRIORITY_NORMAL)
	dl := &dispatcherv1.DeadLetter{
		Id: uuid.Must(uuid.NewV7()).String(), ExecutionId: req.ExecutionId, JobId: req.JobId, Attempt: 3,
		NominalTime: req.NominalTime, DeadTime: timestamppb.Now(), Reason: "HTTP 500", ResponseStatus: 500, Request: req,
	}
	body, err := proto.Marshal(dl)
	require.NoError(t, err)
	noRequest, err := proto.Marshal(&dispatcherv1.DeadLetter{Id: uuid.NewString(), ExecutionId: req.ExecutionId, JobId: req.JobId})
	require.NoError(t, err)
	ch := amqptest.Channel(t)
	require.NoError(t, ch.Confirm(false))
	for _, b := range [][]byte{[]byte("\xff garbage"), noRequest, body, body} {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), e.opts.DeadExchange, "dead.alpha", false, false, amqp091.Publishing{Body: b})
		require.NoError(t, err)
		require.True(t, dc.Wait())
	}
	require.Eventually(t, func() bool {
		return metric(t, reg, "dead_letter_poison_total") == 2 && metric(t, reg, "dead_letters_stored_total") == 1 && e.queueDepth(e.opts.DeadQueue) == 0
	}, 30*time.Second, 10*time.Millisecond)
	letters, _, err := e.store.ListDeadLetters(t.Context(), testNamespace, "", 10, store.Cursor{})
	require.NoError(t, err)
	require.Len(t, letters, 1)
	require.Equal(t, dl.Id, letters[0].ID)
}
