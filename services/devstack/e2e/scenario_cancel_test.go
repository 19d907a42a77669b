package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// cancelInFlight: a manual run whose target holds the request open is
// cancelled through the API; the target sees its request aborted, the
// history shows the execution CANCELLED after one attempt, although the
// job's policy had retries left.
func (s *scenario) cancelInFlight(t *testing.T) {
	ctx := t.Context()
	arrived := make(chan string, 4)
	aborted := make(chan struct{}, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Header.Get("webhook-id")
		<-r.Context().Done()
		aborted <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	created, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "scenario cancel in flight",
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 0 1 1 *"}},
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Url: srv.URL + "/slow", Timeout: durationpb.New(5 * time.Minute),
		}}},
		RetryPolicy: &registryv1.RetryPolicy{MaxRetries: proto32(3), InitialBackoff: durationpb.New(time.Second)},
	}}))
	require.NoError(t, err)
	_, err = s.jobs.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: created.Msg.GetJob().GetId(), RequestId: "scenario-cancel"}))
	require.NoError(t, err)

	var execID string
	select {
	case execID = <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the manual run never reached the target")
	}
	res, err := s.dispatch.CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: execID}))
	require.NoError(t, err)
	require.Equal(t, dispatcherv1.CancelStage_CANCEL_STAGE_IN_FLIGHT, res.Msg.GetStage(), "the mesh has one dispatcher: it runs the attempt")
	select {
	case <-aborted:
	case <-time.After(30 * time.Second):
		t.Fatal("the target's request was not aborted")
	}
	waitFor(t, 30*time.Second, "the execution to show CANCELLED in the history", func() bool {
		got, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: execID}))
		return err == nil && got.Msg.GetExecution().GetStatus() == historyv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED
	})
	time.Sleep(2 * time.Second) // past the first retry's backoff: no retry comes
	require.Empty(t, arrived, "a cancelled execution is not retried")
	again, err := s.dispatch.CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: execID}))
	require.NoError(t, err)
	require.True(t, again.Msg.GetAlreadyCancelled())
}
