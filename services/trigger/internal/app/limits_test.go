package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/timestamppb"

	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// TestRequestFieldCaps sends, for each capped string of the TriggerService
// requests, a request just over its cap: each fails with INVALID_ARGUMENT
// naming the field.
func TestRequestFieldCaps(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := n.client(key)
	tooLong := strings.Repeat("x", 513)
	now := time.Now()
	tests := []struct {
		name  string
		call  func(context.Context, triggerv1connect.TriggerServiceClient) error
		field string
	}{
		{"list job id", func(ctx context.Context, c triggerv1connect.TriggerServiceClient) error {
			_, err := c.ListSlots(ctx, connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: tooLong}))
			return err
		}, "job_id"},
		{"list page token", func(ctx context.Context, c triggerv1connect.TriggerServiceClient) error {
			_, err := c.ListSlots(ctx, connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: "j", PageToken: tooLong}))
			return err
		}, "page_token"},
		{"backfill job id", func(ctx context.Context, c triggerv1connect.TriggerServiceClient) error {
			_, err := c.BackfillJob(ctx, connect.NewRequest(&triggerv1.BackfillJobRequest{
				JobId: tooLong, StartTime: timestamppb.New(now.Add(-time.Hour)), EndTime: timestamppb.New(now),
			}))
			return err
		}, "job_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, violatedFields(t, tt.call(t.Context(), c)), tt.field)
		})
	}
}

// violatedFields returns the fields named by the BadRequest detail of err,
// an INVALID_ARGUMENT error.
func violatedFields(t *testing.T, err error) []string {
	t.Helper()
	rpctest.RequireCode(t, err, connect.CodeInvalidArgument)
	var cerr *connect.Error
	require.True(t, errors.As(err, &cerr))
	var fields []string
	for _, d := range cerr.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if br, ok := v.(*errdetails.BadRequest); ok {
			for _, fv := range br.GetFieldViolations() {
				fields = append(fields, fv.GetField())
			}
		}
	}
	return fields
}
