package app_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
)

// TestRequestFieldCaps sends, for each capped string and list of the
// HistoryService requests, a request just over its cap: each fails with
// INVALID_ARGUMENT naming the field.
func TestRequestFieldCaps(t *testing.T) {
	t.Parallel()
	h := startHistory(t)
	c := h.client(keyAlpha)
	tooLong := strings.Repeat("x", 513)
	statuses := make([]historyv1.ExecutionStatus, 17)
	kinds := make([]dispatchv1.TriggerKind, 17)
	for i := range statuses {
		statuses[i] = historyv1.ExecutionStatus_EXECUTION_STATUS_FAILED
		kinds[i] = dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL
	}
	list := func(req *historyv1.ListExecutionsRequest) func(context.Context, historyv1connect.HistoryServiceClient) error {
		return func(ctx context.Context, c historyv1connect.HistoryServiceClient) error {
			_, err := c.ListExecutions(ctx, connect.NewRequest(req))
			return err
		}
	}
	tests := []struct {
		name  string
		call  func(context.Context, historyv1connect.HistoryServiceClient) error
		field string
	}{
		{"list job id", list(&historyv1.ListExecutionsRequest{JobId: tooLong}), "job_id"},
		{"list page token", list(&historyv1.ListExecutionsRequest{PageToken: tooLong}), "page_token"},
		{"list statuses", list(&historyv1.ListExecutionsRequest{Statuses: statuses}), "statuses"},
		{"list trigger kinds", list(&historyv1.ListExecutionsRequest{TriggerKinds: kinds}), "trigger_kinds"},
		{"list query", list(&historyv1.ListExecutionsRequest{Query: tooLong}), "query"},
		{"get execution id", func(ctx context.Context, c historyv1connect.HistoryServiceClient) error {
			_, err := c.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: tooLong}))
			return err
		}, "execution_id"},
		{"stats job id", func(ctx context.Context, c historyv1connect.HistoryServiceClient) error {
			_, err := c.GetJobStats(ctx, connect.NewRequest(&historyv1.GetJobStatsRequest{JobId: tooLong}))
			return err
		}, "job_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.field, fieldOf(t, tt.call(t.Context(), c)))
		})
	}
}
