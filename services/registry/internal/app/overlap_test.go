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

// TestOverlapPolicyValidation: an unset policy is stored as ALLOW, every
// named one is kept, and an unknown value is refused naming the field.
func TestOverlapPolicyValidation(t *testing.T) {
	t.Parallel()
	c := startRegistry(t).client(keyAlpha)
	tests := []struct {
		name   string
		policy registryv1.OverlapPolicy
		want   registryv1.OverlapPolicy
		field  string
	}{
		{"unset is allow", registryv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED, registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW, ""},
		{"allow", registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW, registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW, ""},
		{"skip", registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP, ""},
		{"buffer one", registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE, registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE, ""},
		{"cancel other", registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER, registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER, ""},
		{"unknown", registryv1.OverlapPolicy(99), 0, "job.overlap_policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := httpJob("overlap " + tt.name)
			job.OverlapPolicy = tt.policy
			res, err := c.CreateJob(context.Background(), connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
			if tt.field != "" {
				require.Equal(t, []string{tt.field}, rpctest.Violations(t, err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Msg.Job.OverlapPolicy)
			got, err := c.GetJob(context.Background(), connect.NewRequest(&registryv1.GetJobRequest{Id: res.Msg.Job.Id}))
			require.NoError(t, err)
			require.Equal(t, tt.want, got.Msg.Job.OverlapPolicy)
		})
	}
}

// TestOverlapPolicyUpdateRunAndEvents: UpdateJob's mask sets the policy,
// ListJobs shows it, the job events carry it to the trigger, and a run's
// own policy travels in its event without changing the stored job.
func TestOverlapPolicyUpdateRunAndEvents(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	c := reg.client(keyAlpha)
	ctx := context.Background()
	created, err := c.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("overlap update")}))
	require.NoError(t, err)
	id := created.Msg.Job.Id

	updated, err := c.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job:        &registryv1.Job{Id: id, OverlapPolicy: registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"overlap_policy"}},
	}))
	require.NoError(t, err)
	require.Equal(t, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP, updated.Msg.Job.OverlapPolicy)
	list, err := c.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{}))
	require.NoError(t, err)
	require.Len(t, list.Msg.Jobs, 1)
	require.Equal(t, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP, list.Msg.Jobs[0].OverlapPolicy)

	_, err = c.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: id, OverlapPolicy: registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW}))
	require.NoError(t, err)
	_, err = c.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: id}))
	require.NoError(t, err)
	_, err = c.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: id, OverlapPolicy: registryv1.OverlapPolicy(42)}))
	require.Equal(t, []string{"overlap_policy"}, rpctest.Violations(t, err))

	events := reg.nextEvents(t, 4)
	require.Equal(t, registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW, events[0].Job.OverlapPolicy)
	require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, events[1].Kind)
	require.Equal(t, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP, events[1].Job.OverlapPolicy)
	require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED, events[2].Kind)
	require.Equal(t, registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW, events[2].Job.OverlapPolicy, "the run's own policy")
	require.Empty(t, events[2].RunOverrides, "the policy is not a target override")
	require.Equal(t, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP, events[3].Job.OverlapPolicy, "unset: the job's")

	got, err := c.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
	require.NoError(t, err)
	require.Equal(t, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP, got.Msg.Job.OverlapPolicy, "a run changes no stored job")
}
