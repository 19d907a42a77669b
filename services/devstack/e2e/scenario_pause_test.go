package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
)

// pauseOnFailure: a job firing every second at a target that answers 500,
// with no retries and pause_after_dead_letters 2, is paused by the registry
// once two executions are dead-lettered, with a reason saying so; a paused
// job fires nothing more.
func (s *scenario) pauseOnFailure(t *testing.T) {
	ctx := t.Context()
	target := newRecorder(t, http.StatusInternalServerError)
	created, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName:           "scenario pause on failure",
		Schedule:              &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * * * * *"}},
		Target:                &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: target.URL + "/fail"}}},
		RetryPolicy:           &registryv1.RetryPolicy{MaxRetries: proto32(0)},
		PauseAfterDeadLetters: 2,
	}}))
	require.NoError(t, err)
	id := created.Msg.GetJob().GetId()

	var job *registryv1.Job
	waitFor(t, 60*time.Second, "the registry pauses the failing job", func() bool {
		got, err := s.jobs.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
		if err != nil {
			return false
		}
		job = got.Msg.GetJob()
		return job.GetPaused()
	})
	require.Equal(t, "paused after 2 consecutive dead-lettered executions (pause_after_dead_letters)", job.GetPauseReason())
	require.Equal(t, "pause-on-failure", job.GetPausedByKeyId())
	require.GreaterOrEqual(t, len(target.All()), 2, "two dead-lettered executions, one attempt each")

	// Slots already fired when the pause committed may still arrive; after
	// that, nothing.
	time.Sleep(3 * time.Second)
	settled := len(target.All())
	time.Sleep(3 * time.Second)
	require.Len(t, target.All(), settled, "a paused job fires nothing")
}

// runWithOverrides: RunJob with a target, body and header override
// delivers this run to the other target, with that body and header, signed
// with the job's secret; the job's own target receives nothing, and the
// history names what was overridden.
func (s *scenario) runWithOverrides(t *testing.T) {
	ctx := t.Context()
	own := newRecorder(t, http.StatusNoContent)
	other := newRecorder(t, http.StatusNoContent)
	created, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "scenario run with overrides",
		Paused:      true,
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 0 1 1 *"}},
		Target:      &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: own.URL + "/own", Body: "scheduled"}}},
	}}))
	require.NoError(t, err)
	body := `{"replay":true}`
	run, err := s.jobs.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{
		Id:              created.Msg.GetJob().GetId(),
		TargetOverride:  &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: other.URL + "/fixed"}}},
		BodyOverride:    &body,
		HeadersOverride: map[string]string{"X-Replay": "1"},
	}))
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the overridden target receives the run", func() bool { return len(other.All()) > 0 })
	got := other.All()[0]
	require.Equal(t, body, string(got.Body))
	require.Equal(t, "1", got.Header.Get("X-Replay"))
	require.NotEmpty(t, got.Header.Get("webhook-signature"), "signed with the job's secret")
	require.Empty(t, own.All(), "the job's own target is not called")

	// The history shows what the run overrode (names, not values).
	id := execid.For(created.Msg.GetJob().GetId(), run.Msg.GetNominalTime().AsTime())
	waitFor(t, 60*time.Second, "the history records the run's overrides", func() bool {
		resp, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: id}))
		return err == nil && len(resp.Msg.GetExecution().GetOverriddenFields()) > 0
	})
	resp, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: id}))
	require.NoError(t, err)
	require.Equal(t, []string{"target", "body", "headers"}, resp.Msg.GetExecution().GetOverriddenFields())
	require.Empty(t, resp.Msg.GetExecution().GetRerunOfExecutionId(), "a run, not a re-run")
}
