package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
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
