package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
)

// rerunWithOverride: a run of a job whose target fails is dead-lettered;
// RerunExecution with a target override delivers the job once to the
// working target, and the history shows the new execution as a re-run of
// the dead one, with "target" overridden. The failing target is not called
// again.
func (s *scenario) rerunWithOverride(t *testing.T) {
	ctx := t.Context()
	failing := newRecorder(t, http.StatusInternalServerError)
	working := newRecorder(t, http.StatusNoContent)
	created, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "scenario rerun",
		Paused:      true,
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 0 1 1 *"}},
		Target:      &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: failing.URL + "/broken", Body: "nightly"}}},
		RetryPolicy: &registryv1.RetryPolicy{MaxRetries: proto32(1), InitialBackoff: durationpb.New(time.Second), MaxBackoff: durationpb.New(time.Second), Multiplier: 1},
	}}))
	require.NoError(t, err)
	jobID := created.Msg.GetJob().GetId()
	run, err := s.jobs.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: jobID}))
	require.NoError(t, err)
	deadID := execid.For(jobID, run.Msg.GetNominalTime().AsTime())

	getExecution := func(id string) *historyv1.Execution {
		resp, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: id}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil
		}
		require.NoError(t, err)
		return resp.Msg.GetExecution()
	}
	waitFor(t, 60*time.Second, "the run is dead-lettered in the history", func() bool {
		e := getExecution(deadID)
		return e != nil && e.GetStatus() == historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD
	})
	require.Len(t, failing.All(), 2, "the first attempt and its one retry")

	rerun, err := s.jobs.RerunExecution(ctx, connect.NewRequest(&registryv1.RerunExecutionRequest{
		ExecutionId:    deadID,
		RequestId:      "scenario-rerun",
		TargetOverride: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: working.URL + "/fixed", Body: "nightly"}}},
	}))
	require.NoError(t, err)
	require.Equal(t, jobID, rerun.Msg.GetJobId())
	newID := rerun.Msg.GetExecutionId()
	require.NotEqual(t, deadID, newID)

	var again *historyv1.Execution
	waitFor(t, 60*time.Second, "the re-run succeeds in the history", func() bool {
		again = getExecution(newID)
		return again != nil && again.GetStatus() == historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	})
	require.Equal(t, deadID, again.GetRerunOfExecutionId())
	require.Equal(t, []string{"target"}, again.GetOverriddenFields())
	require.Equal(t, dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL, again.GetTriggerKind())
	require.Len(t, working.All(), 1, "the re-run is delivered once")
	require.Equal(t, newID, working.All()[0].ID(), "under the new execution's idempotency key")
	require.Equal(t, "nightly", string(working.All()[0].Body))
	require.Len(t, failing.All(), 2, "the failing target is not called again")

	dead := getExecution(deadID)
	require.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD, dead.GetStatus(), "the re-run execution is left as it was")
	require.Empty(t, dead.GetRerunOfExecutionId())
	require.Empty(t, dead.GetOverriddenFields())
}
