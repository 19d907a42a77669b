package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// TestPauseRecordsReasonTimeAndKey: a pause names why, when and which
// managed key; GetJob, ListJobs and the job events show it; a repeated
// pause keeps the first pause's time and key; ResumeJob clears all three.
func TestPauseRecordsReasonTimeAndKey(t *testing.T) {
	t.Parallel()
	reg := startKeyRegistry(t)
	ctx := context.Background()
	editor, editorSecret := createKey(t, reg.keys(keyAlpha), "on-call", registryv1.KeyRole_KEY_ROLE_EDITOR)
	require.Eventually(t, func() bool { return canListJobs(t, reg, editorSecret) }, 10*time.Second, 20*time.Millisecond)
	jobs := reg.jobs(editorSecret)
	created, err := jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("nightly export")}))
	require.NoError(t, err)
	id := created.Msg.Job.Id
	require.Empty(t, created.Msg.Job.PauseReason)
	require.Nil(t, created.Msg.Job.PauseTime)

	before := time.Now().Add(-time.Second)
	paused, err := jobs.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: id, Reason: "upstream outage INC-42"}))
	require.NoError(t, err)
	require.True(t, paused.Msg.Job.Paused)
	require.Equal(t, "upstream outage INC-42", paused.Msg.Job.PauseReason)
	require.Equal(t, editor.Id, paused.Msg.Job.PausedByKeyId, "the managed key that paused, by id")
	require.WithinRange(t, paused.Msg.Job.PauseTime.AsTime(), before, time.Now().Add(time.Second))

	got, err := jobs.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
	require.NoError(t, err)
	require.Equal(t, paused.Msg.Job.PauseReason, got.Msg.Job.PauseReason)
	require.Equal(t, paused.Msg.Job.PausedByKeyId, got.Msg.Job.PausedByKeyId)
	require.Equal(t, paused.Msg.Job.PauseTime.AsTime(), got.Msg.Job.PauseTime.AsTime())
	onlyPaused := true
	listed, err := jobs.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{Paused: &onlyPaused}))
	require.NoError(t, err)
	require.Len(t, listed.Msg.Jobs, 1)
	require.Equal(t, "upstream outage INC-42", listed.Msg.Jobs[0].PauseReason)
	require.Equal(t, editor.Id, listed.Msg.Jobs[0].PausedByKeyId)

	// Another key pausing again with a new reason: the reason changes, the
	// pause stays the first key's, at the first time.
	again, err := reg.jobs(keyAlpha).PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: id, Reason: "still down"}))
	require.NoError(t, err)
	require.Equal(t, "still down", again.Msg.Job.PauseReason)
	require.Equal(t, editor.Id, again.Msg.Job.PausedByKeyId)
	require.Equal(t, paused.Msg.Job.PauseTime.AsTime(), again.Msg.Job.PauseTime.AsTime())
	same, err := jobs.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: id}))
	require.NoError(t, err)
	require.Equal(t, again.Msg.Job.Version, same.Msg.Job.Version, "a pause without a new reason changes nothing")
	require.Equal(t, "still down", same.Msg.Job.PauseReason)

	resumed, err := jobs.ResumeJob(ctx, connect.NewRequest(&registryv1.ResumeJobRequest{Id: id}))
	require.NoError(t, err)
	require.False(t, resumed.Msg.Job.Paused)
	require.Empty(t, resumed.Msg.Job.PauseReason)
	require.Empty(t, resumed.Msg.Job.PausedByKeyId)
	require.Nil(t, resumed.Msg.Job.PauseTime)
	got, err = jobs.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
	require.NoError(t, err)
	require.Empty(t, got.Msg.Job.PauseReason)
	require.Nil(t, got.Msg.Job.PauseTime)

	// UpdateJob's paused field records the time and key, without a reason.
	upd, err := jobs.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job:        &registryv1.Job{Id: id, Paused: true},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"paused"}},
	}))
	require.NoError(t, err)
	require.True(t, upd.Msg.Job.Paused)
	require.Equal(t, editor.Id, upd.Msg.Job.PausedByKeyId)
	require.NotNil(t, upd.Msg.Job.PauseTime)
	require.Empty(t, upd.Msg.Job.PauseReason)
}

// TestPauseReasonRidesOnTheEvents: consumers (the trigger, alerting, the
// audit trail) read the pause from the PAUSED event's job, and its absence
// from the RESUMED one.
func TestPauseReasonRidesOnTheEvents(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)
	created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("events")}))
	require.NoError(t, err)
	id := created.Msg.Job.Id
	_, err = client.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: id, Reason: "maintenance"}))
	require.NoError(t, err)
	_, err = client.ResumeJob(ctx, connect.NewRequest(&registryv1.ResumeJobRequest{Id: id}))
	require.NoError(t, err)

	events := reg.nextEvents(t, 3)
	require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED, events[1].Kind)
	require.Equal(t, "maintenance", events[1].Job.PauseReason)
	require.Equal(t, apikey.ConfiguredKeyID(keyAlpha), events[1].Job.PausedByKeyId)
	require.NotNil(t, events[1].Job.PauseTime)
	require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED, events[2].Kind)
	require.Empty(t, events[2].Job.PauseReason)
	require.Nil(t, events[2].Job.PauseTime)
	reg.requireNoMoreEvents(t)
}

// TestPauseValidation: an oversized reason and an out-of-range
// pause_after_dead_letters are InvalidArgument naming the field.
func TestPauseValidation(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)
	created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("limits")}))
	require.NoError(t, err)
	id := created.Msg.Job.Id

	_, err = client.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: id, Reason: strings.Repeat("x", 513)}))
	require.Equal(t, []string{"reason"}, rpctest.Violations(t, err))
	_, err = client.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: id, Reason: strings.Repeat("é", 512)}))
	require.NoError(t, err, "the cap counts characters")

	for _, n := range []int32{-1, 1001} {
		job := httpJob("bad threshold")
		job.PauseAfterDeadLetters = n
		_, err = client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
		require.Equal(t, []string{"job.pause_after_dead_letters"}, rpctest.Violations(t, err))
	}
	job := httpJob("threshold")
	job.PauseAfterDeadLetters = 3
	job.PauseReason = "output only"
	ok, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
	require.NoError(t, err)
	require.EqualValues(t, 3, ok.Msg.Job.PauseAfterDeadLetters)
	require.Empty(t, ok.Msg.Job.PauseReason, "output-only fields sent on create are ignored")
	upd, err := client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job:        &registryv1.Job{Id: ok.Msg.Job.Id, PauseAfterDeadLetters: 5},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"pause_after_dead_letters"}},
	}))
	require.NoError(t, err)
	require.EqualValues(t, 5, upd.Msg.Job.PauseAfterDeadLetters)
}
