package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
)

const meshKey = "mesh-key-0123456789abcdef"

// TestMeshFiresDeliversAndRecords is the smallest promise of the mesh: a job
// created through the registry fires, its webhook reaches the target, and
// the history shows the execution succeeded with a trace id.
func TestMeshFiresDeliversAndRecords(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		received []string // webhook-id of every request
	)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.Header.Get("webhook-id"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(target.Close)

	mesh := meshtest.Start(t, bins, meshtest.Options{APIKeys: map[string]string{"mesh": meshKey}})
	ctx := t.Context()
	clients := meshtest.NewClients(mesh, meshKey)
	jobs, history := clients.Jobs, clients.History

	created, err := jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "every second",
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * * * * *"}},
		Target:      &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: target.URL + "/hook"}}},
	}}))
	require.NoError(t, err)
	jobID := created.Msg.GetJob().GetId()

	var succeeded *historyv1.Execution
	require.Eventually(t, func() bool {
		resp, err := history.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{
			JobId: jobID, Statuses: []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED},
		}))
		if err != nil || len(resp.Msg.GetExecutions()) == 0 {
			return false
		}
		succeeded = resp.Msg.GetExecutions()[0]
		return true
	}, 30*time.Second, 200*time.Millisecond, "no succeeded execution of the job reached the history")

	require.Equal(t, jobID, succeeded.GetJobId())
	require.Len(t, succeeded.GetTraceId(), 32, "the history keeps the execution's trace id")
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, received, succeeded.GetExecutionId(), "the target saw the execution's webhook-id")
}
