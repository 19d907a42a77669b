package app_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/services/registry/internal/app"
)

// outcome is one execution event as the dispatcher publishes it for a slot
// fired while the job had its current pause_after_dead_letters.
func outcome(job *registryv1.Job, kind eventsv1.ExecutionEventKind, nominal time.Time) *eventsv1.ExecutionEvent {
	return &eventsv1.ExecutionEvent{
		Kind: kind, JobId: job.Id, Namespace: job.Namespace,
		ExecutionId: job.Id + "/" + nominal.Format(time.RFC3339Nano), NominalTime: timestamppb.New(nominal),
		PauseAfterDeadLetters: job.PauseAfterDeadLetters,
	}
}

func dead(job *registryv1.Job, nominal time.Time) *eventsv1.ExecutionEvent {
	return outcome(job, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD, nominal)
}

// publishOutcomes publishes events as one batch message on the registry's
// execution events exchange, routed as the dispatcher routes it.
func (r *registry) publishOutcomes(t *testing.T, events ...*eventsv1.ExecutionEvent) {
	t.Helper()
	require.True(t, r.publishOutcomesAs(t, execevent.RoutingKey(events), events...), "no queue took the batch")
}

// publishOutcomesAs publishes events as one batch message with routing key,
// waits for the broker's confirm (a batch published after it is queued
// after it) and reports whether any queue took it.
func (r *registry) publishOutcomesAs(t *testing.T, key string, events ...*eventsv1.ExecutionEvent) (routed bool) {
	t.Helper()
	body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	require.NoError(t, err)
	ch := amqptest.Channel(t)
	require.NoError(t, ch.Confirm(false))
	// The broker returns a mandatory message no queue takes before it
	// confirms it.
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, r.executions, key, true, false,
		amqp091.Publishing{Body: body, DeliveryMode: amqp091.Persistent})
	require.NoError(t, err)
	acked, err := confirm.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, acked, "the broker refused the batch")
	select {
	case <-returns:
		return false
	default:
		return true
	}
}

func createWithThreshold(t *testing.T, client registryv1connect.JobServiceClient, name string, n int32) *registryv1.Job {
	t.Helper()
	job := httpJob(name)
	job.PauseAfterDeadLetters = n
	resp, err := client.CreateJob(context.Background(), connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
	require.NoError(t, err)
	return resp.Msg.Job
}

func getJob(t *testing.T, client registryv1connect.JobServiceClient, id string) *registryv1.Job {
	t.Helper()
	resp, err := client.GetJob(context.Background(), connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
	require.NoError(t, err)
	return resp.Msg.Job
}

// TestPauseOnFailure: a job is paused after its pause_after_dead_letters-th
// dead-lettered execution in a row, saying so, and only then: a redelivered
// dead letter counts once, a success ends the streak, a resume starts a new
// one (an old dead letter arriving late does not count), and a job without
// the option is never paused. Each batch ends with a sentinel job whose
// pause proves the events before it were applied.
func TestPauseOnFailure(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	select {
	case <-reg.app.FailuresReady():
	case <-time.After(30 * time.Second):
		t.Fatal("the registry did not subscribe to execution events")
	}
	ctx := context.Background()
	client := reg.client(keyAlpha)
	redelivered := createWithThreshold(t, client, "redelivered", 3)
	recovered := createWithThreshold(t, client, "recovered", 2)
	unwatched := createWithThreshold(t, client, "unwatched", 0)
	base := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }

	sentinel := func(name string) {
		t.Helper()
		s := createWithThreshold(t, client, name, 1)
		reg.publishOutcomes(t, dead(s, at(0)))
		require.Eventually(t, func() bool { return getJob(t, client, s.Id).Paused }, 15*time.Second, 20*time.Millisecond)
	}

	reg.publishOutcomes(t,
		dead(redelivered, at(1)), dead(redelivered, at(2)), dead(redelivered, at(2)),
		dead(recovered, at(1)), outcome(recovered, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, at(2)), dead(recovered, at(3)),
		dead(unwatched, at(1)), dead(unwatched, at(2)),
	)
	sentinel("sentinel 1")
	require.False(t, getJob(t, client, redelivered.Id).Paused, "a redelivered dead letter counts once")
	require.False(t, getJob(t, client, recovered.Id).Paused, "a success ends the streak")
	require.False(t, getJob(t, client, unwatched.Id).Paused, "without pause_after_dead_letters a job is never paused")

	reg.publishOutcomes(t, dead(redelivered, at(3)))
	require.Eventually(t, func() bool { return getJob(t, client, redelivered.Id).Paused }, 15*time.Second, 20*time.Millisecond)
	paused := getJob(t, client, redelivered.Id)
	require.Equal(t, "paused after 3 consecutive dead-lettered executions (pause_after_dead_letters)", paused.PauseReason)
	require.Equal(t, "pause-on-failure", paused.PausedByKeyId)
	require.NotNil(t, paused.PauseTime)

	// Resumed, the job starts over: late dead letters from before the
	// resume do not count, new ones do.
	_, err := client.ResumeJob(ctx, connect.NewRequest(&registryv1.ResumeJobRequest{Id: redelivered.Id}))
	require.NoError(t, err)
	later := time.Now().Add(time.Minute)
	reg.publishOutcomes(t, dead(redelivered, at(4)), dead(redelivered, at(5)), dead(redelivered, later))
	sentinel("sentinel 2")
	require.False(t, getJob(t, client, redelivered.Id).Paused, "dead letters from before the resume do not count")
	reg.publishOutcomes(t, dead(redelivered, later.Add(time.Minute)), dead(redelivered, later.Add(2*time.Minute)))
	require.Eventually(t, func() bool { return getJob(t, client, redelivered.Id).Paused }, 15*time.Second, 20*time.Millisecond)

	// The pause reached the other services as a PAUSED event in the
	// registry's name.
	var pauses []*eventsv1.JobEvent
	require.Eventually(t, func() bool {
		for _, d := range amqptest.Drain(t, reg.events) {
			ev := &eventsv1.JobEvent{}
			require.NoError(t, proto.Unmarshal(d.Body, ev))
			if ev.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED && ev.Job.Id == redelivered.Id {
				pauses = append(pauses, ev)
			}
		}
		return len(pauses) == 2
	}, 15*time.Second, 50*time.Millisecond)
	require.Equal(t, "pause-on-failure", pauses[0].KeyId)
	require.Equal(t, "pause-on-failure", pauses[0].Job.PausedByKeyId)
	require.Contains(t, pauses[0].Job.PauseReason, "3 consecutive dead-lettered executions")
}

// preboundExecutions is an option naming the registry's execution events
// exchange and queue, declared first as a registry that took every event
// left them: the queue bound with "execution.#".
func preboundExecutions(t *testing.T) option {
	t.Helper()
	exchange := amqptest.UniqueName(t, "cronmesh.executions")
	queue := amqptest.UniqueName(t, "cronmesh.registry.executions")
	require.NoError(t, broker.DeclareQueues(t.Context(), amqptest.URL(), broker.QueueBinding{
		Exchange: exchange, Queue: queue, BindingKey: "execution.#",
		Arguments: map[string]any{"x-delivery-limit": broker.NoDeliveryLimit},
	}))
	return func(c *app.Config) { c.ExecutionsExchange, c.ExecutionsQueue = exchange, queue }
}

// TestPauseOnFailureTakesOnlyMarkedBatches: the registry reads only the
// batches routed for the pause on failure. Its queue, bound to every event
// by an earlier registry, no longer takes an unmarked batch; and in a
// marked batch, the event of a slot fired before its job had the option
// does not count.
func TestPauseOnFailureTakesOnlyMarkedBatches(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t, preboundExecutions(t))
	select {
	case <-reg.app.FailuresReady():
	case <-time.After(30 * time.Second):
		t.Fatal("the registry did not subscribe to execution events")
	}
	client := reg.client(keyAlpha)
	watched := createWithThreshold(t, client, "watched", 1)
	now := time.Now().UTC().Truncate(time.Second)

	require.False(t, reg.publishOutcomesAs(t, "execution.dead", dead(watched, now)),
		"an unmarked batch reached the registry's queue through the former binding")

	before := dead(watched, now.Add(time.Minute))
	before.PauseAfterDeadLetters = 0 // fired before the job had the option
	sentinel := createWithThreshold(t, client, "sentinel", 1)
	reg.publishOutcomes(t, before, dead(sentinel, now))
	require.Eventually(t, func() bool { return getJob(t, client, sentinel.Id).Paused }, 15*time.Second, 20*time.Millisecond)
	require.False(t, getJob(t, client, watched.Id).Paused, "an unmarked event of a marked batch counted")
}
