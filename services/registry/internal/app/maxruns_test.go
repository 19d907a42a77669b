package app_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// TestMaxRuns: max_runs is stored, returned, updatable through the mask and
// carried to the trigger in the job event; a negative or too large one is
// InvalidArgument naming the field.
func TestMaxRuns(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)

	for _, n := range []int64{-1, 1_000_000_001} {
		job := httpJob("bad limit")
		job.MaxRuns = n
		_, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
		require.Equal(t, []string{"job.max_runs"}, rpctest.Violations(t, err), "max_runs %d", n)
	}

	job := httpJob("limited")
	job.MaxRuns = 3
	created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
	require.NoError(t, err)
	require.EqualValues(t, 3, created.Msg.Job.MaxRuns)
	id := created.Msg.Job.Id

	got, err := client.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
	require.NoError(t, err)
	require.EqualValues(t, 3, got.Msg.Job.MaxRuns)
	list, err := client.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{}))
	require.NoError(t, err)
	require.Len(t, list.Msg.Jobs, 1)
	require.EqualValues(t, 3, list.Msg.Jobs[0].MaxRuns)

	_, err = client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job:        &registryv1.Job{Id: id, MaxRuns: -5},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_runs"}},
	}))
	require.Equal(t, []string{"job.max_runs"}, rpctest.Violations(t, err))
	upd, err := client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job:        &registryv1.Job{Id: id, MaxRuns: 1_000_000_000},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_runs"}},
	}))
	require.NoError(t, err)
	require.EqualValues(t, 1_000_000_000, upd.Msg.Job.MaxRuns)
	require.Equal(t, "limited", upd.Msg.Job.DisplayName, "a masked update keeps the other fields")

	events := reg.nextEvents(t, 2)
	require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, events[0].Kind)
	require.EqualValues(t, 3, events[0].Job.MaxRuns)
	require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, events[1].Kind)
	require.EqualValues(t, 1_000_000_000, events[1].Job.MaxRuns)
	reg.requireNoMoreEvents(t)
}
