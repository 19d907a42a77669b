package app_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// TestExecutionDeadlineValidation refuses a deadline out of its range or
// shorter than the attempt timeout, naming the field, and accepts the
// longest attempt timeout.
func TestExecutionDeadlineValidation(t *testing.T) {
	t.Parallel()
	c := startRegistry(t).client(keyAlpha)
	tests := []struct {
		name     string
		deadline time.Duration
		timeout  time.Duration
		field    string
	}{
		{"zero", 0, 0, "job.execution_deadline"},
		{"negative", -time.Second, 0, "job.execution_deadline"},
		{"over a week", 7*24*time.Hour + time.Second, 0, "job.execution_deadline"},
		{"shorter than the default timeout", 10 * time.Second, 0, "job.execution_deadline"},
		{"shorter than the timeout", 5 * time.Minute, 10 * time.Minute, "job.execution_deadline"},
		{"timeout over 30 min", time.Hour, targetcheck.MaxTimeout + time.Second, "job.target.http.timeout"},
		{"valid", time.Hour, targetcheck.MaxTimeout, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := httpJob("deadline " + tt.name)
			job.ExecutionDeadline = durationpb.New(tt.deadline)
			job.StopRetriesAtNextSlot = true
			if tt.timeout != 0 {
				job.GetTarget().GetHttp().Timeout = durationpb.New(tt.timeout)
			}
			res, err := c.CreateJob(context.Background(), connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
			if tt.field != "" {
				require.Equal(t, []string{tt.field}, rpctest.Violations(t, err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.deadline, res.Msg.Job.ExecutionDeadline.AsDuration())
			require.True(t, res.Msg.Job.StopRetriesAtNextSlot)
		})
	}
}

// TestExecutionDeadlineUpdateAndEvents: the deadline is set and cleared
// through UpdateJob's mask, and the job events carry it to the trigger.
func TestExecutionDeadlineUpdateAndEvents(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	c := reg.client(keyAlpha)
	ctx := context.Background()
	created, err := c.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("deadline update")}))
	require.NoError(t, err)
	require.Nil(t, created.Msg.Job.ExecutionDeadline, "no deadline unless asked")

	patch := &registryv1.Job{Id: created.Msg.Job.Id, ExecutionDeadline: durationpb.New(time.Hour), StopRetriesAtNextSlot: true}
	updated, err := c.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job:        patch,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"execution_deadline", "stop_retries_at_next_slot"}},
	}))
	require.NoError(t, err)
	require.Equal(t, time.Hour, updated.Msg.Job.ExecutionDeadline.AsDuration())
	require.True(t, updated.Msg.Job.StopRetriesAtNextSlot)

	cleared, err := c.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job:        &registryv1.Job{Id: created.Msg.Job.Id},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"execution_deadline"}},
	}))
	require.NoError(t, err)
	require.Nil(t, cleared.Msg.Job.ExecutionDeadline)
	require.True(t, cleared.Msg.Job.StopRetriesAtNextSlot)

	events := reg.nextEvents(t, 3)
	require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, events[1].Kind)
	require.Equal(t, time.Hour, events[1].Job.ExecutionDeadline.AsDuration())
	require.True(t, events[1].Job.StopRetriesAtNextSlot)
	require.Nil(t, events[2].Job.ExecutionDeadline)
}
