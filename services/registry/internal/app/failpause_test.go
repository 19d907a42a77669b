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
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// outcome is one execution event as the dispatcher publishes it.
func outcome(job *registryv1.Job, kind eventsv1.ExecutionEventKind, nominal time.Time) *eventsv1.ExecutionEvent {
	return &eventsv1.ExecutionEvent{
		Kind: kind, JobId: job.Id, Namespace: job.Namespace,
		ExecutionId: job.Id + "/" + nominal.Format(time.RFC3339Nano), NominalTime: timestamppb.New(nominal),
	}
}

func dead(job *registryv1.Job, nominal time.Time) *eventsv1.ExecutionEvent {
	return outcome(job, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD, nominal)
}

// publishOutcomes publishes events as one batch message on the registry's
// execution events exchange.
func (r *registry) publishOutcomes(t *testing.T, events ...*eventsv1.ExecutionEvent) {
	t.Helper()
	body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	require.NoError(t, err)
	ch := amqptest.Channel(t)
	require.NoError(t, ch.PublishWithContext(context.Background(), r.executions, "execution.dead", false, false,
		amqp091.Publishing{Body: body, DeliveryMode: amqp091.Persistent}))
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
