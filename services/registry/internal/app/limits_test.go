package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/registry/internal/api"
	"github.com/cronmesh/cronmesh/services/registry/internal/validate"
)

// TestRequestFieldCaps sends, for each capped string, list and map of the
// JobService requests, a request just over its cap: each fails with
// INVALID_ARGUMENT naming the field.
func TestRequestFieldCaps(t *testing.T) {
	t.Parallel()
	r := startRegistry(t)
	c := r.client(keyAlpha)
	tooLong := strings.Repeat("x", 513)
	labels := func(n int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	withSchedule := func(s *registryv1.Schedule) *registryv1.Job {
		j := httpJob("capped")
		j.Schedule = s
		return j
	}
	codes := make([]int32, targetcheck.MaxStatusCodes+1)
	for i := range codes {
		codes[i] = 200
	}
	manyCodes := httpJob("capped")
	manyCodes.GetTarget().GetHttp().AcceptedStatusCodes = codes
	longCron := &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "*/5 * * * *" + strings.Repeat(" ", validate.MaxCron)}}

	tests := []struct {
		name  string
		call  func(ctx context.Context, c registryv1connect.JobServiceClient) error
		field string
	}{
		{"cron", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: withSchedule(longCron)}))
			return err
		}, "job.schedule.cron"},
		{"time zone", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			s := &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * * * *"}, TimeZone: strings.Repeat("Europe/", 10)}
			_, err := c.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: withSchedule(s)}))
			return err
		}, "job.schedule.time_zone"},
		{"accepted status codes", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: manyCodes}))
			return err
		}, "job.target.http.accepted_status_codes"},
		{"batch", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			reqs := make([]*registryv1.CreateJobRequest, api.MaxBatch+1)
			for i := range reqs {
				reqs[i] = &registryv1.CreateJobRequest{Job: httpJob("batched")}
			}
			_, err := c.BatchCreateJobs(ctx, connect.NewRequest(&registryv1.BatchCreateJobsRequest{Requests: reqs}))
			return err
		}, "requests"},
		{"get id", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: tooLong}))
			return err
		}, "id"},
		{"list page token", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{PageToken: tooLong}))
			return err
		}, "page_token"},
		{"list label count", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{Labels: labels(validate.MaxLabels + 1)}))
			return err
		}, "labels"},
		{"list label value", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{Labels: map[string]string{"team": tooLong}}))
			return err
		}, `labels["team"]`},
		{"update id", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			j := httpJob("capped")
			j.Id = tooLong
			_, err := c.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{Job: j}))
			return err
		}, "job.id"},
		{"update etag", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			j := httpJob("capped")
			j.Etag = tooLong
			_, err := c.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{Job: j}))
			return err
		}, "job.etag"},
		{"update mask", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			paths := make([]string, api.MaxUpdatePaths+1)
			for i := range paths {
				paths[i] = "description"
			}
			_, err := c.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
				Job: httpJob("capped"), UpdateMask: &fieldmaskpb.FieldMask{Paths: paths},
			}))
			return err
		}, "update_mask.paths"},
		{"delete etag", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.DeleteJob(ctx, connect.NewRequest(&registryv1.DeleteJobRequest{Id: "x", Etag: tooLong}))
			return err
		}, "etag"},
		{"pause id", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: tooLong}))
			return err
		}, "id"},
		{"resume id", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.ResumeJob(ctx, connect.NewRequest(&registryv1.ResumeJobRequest{Id: tooLong}))
			return err
		}, "id"},
		{"run id", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: tooLong}))
			return err
		}, "id"},
		{"rerun execution id", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.RerunExecution(ctx, connect.NewRequest(&registryv1.RerunExecutionRequest{ExecutionId: tooLong}))
			return err
		}, "execution_id"},
		{"preview cron", func(ctx context.Context, c registryv1connect.JobServiceClient) error {
			_, err := c.PreviewSchedule(ctx, connect.NewRequest(&registryv1.PreviewScheduleRequest{Schedule: longCron}))
			return err
		}, "schedule.cron"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, rpctest.Violations(t, tt.call(t.Context(), c)), tt.field)
		})
	}
}

// largestJob is a valid job at every per-job limit of the registry's
// validation, its text in 4-byte UTF-8 characters where characters are
// counted.
func largestJob() *registryv1.Job {
	const wide = "\U0001D11E" // 𝄞, 4 bytes in UTF-8
	labels := make(map[string]string, validate.MaxLabels)
	for i := range validate.MaxLabels {
		key := fmt.Sprintf("k%02d", i)
		labels[key+strings.Repeat("x", validate.MaxLabelKey-len(key))] = strings.Repeat("v", validate.MaxLabelValue)
	}
	headers := make(map[string]string, targetcheck.MaxHeaders)
	for i := range targetcheck.MaxHeaders {
		name := fmt.Sprintf("X-H%02d", i)
		headers[name+strings.Repeat("x", targetcheck.MaxHeaderName-len(name))] = strings.Repeat("v", targetcheck.MaxHeaderValue)
	}
	codes := make([]int32, targetcheck.MaxStatusCodes)
	for i := range codes {
		codes[i] = int32(200 + i)
	}
	minutes := make([]string, 60)
	for i := range minutes {
		minutes[i] = fmt.Sprint(i)
	}
	cron := strings.Join(minutes, ",") + " * * * *"
	retries := int32(validate.MaxRetries)
	url := "https://example.test/"
	return &registryv1.Job{
		DisplayName: strings.Repeat(wide, validate.MaxDisplayName),
		Description: strings.Repeat(wide, validate.MaxDescription),
		Labels:      labels,
		Schedule: &registryv1.Schedule{
			Kind:      &registryv1.Schedule_Cron{Cron: cron + strings.Repeat(" ", validate.MaxCron-len(cron))},
			TimeZone:  "America/Argentina/ComodRivadavia",
			StartTime: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 999, time.UTC)),
			EndTime:   timestamppb.New(time.Date(2036, 1, 1, 0, 0, 0, 999, time.UTC)),
		},
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method:              "DELETE",
			Url:                 url + strings.Repeat("p", targetcheck.MaxURL-len(url)),
			Headers:             headers,
			Body:                strings.Repeat("b", targetcheck.MaxBody),
			Timeout:             durationpb.New(targetcheck.MaxTimeout),
			AcceptedStatusCodes: codes,
			SigningSecret:       "whsec_" + strings.Repeat("A", 84) + "AA==", // base64 of 64 bytes, the most
		}}},
		RetryPolicy: &registryv1.RetryPolicy{
			MaxRetries:     &retries,
			InitialBackoff: durationpb.New(validate.MaxInitialBackoff),
			MaxBackoff:     durationpb.New(validate.MaxBackoff),
			Multiplier:     validate.MaxMultiplier - 0.001,
		},
		CatchUpWindow: durationpb.New(validate.MaxCatchUpWindow - time.Nanosecond),
		Priority:      registryv1.Priority_PRIORITY_LOW,
		SpreadWindow:  durationpb.New(validate.MaxSpreadWindow - time.Nanosecond),
	}
}

// TestLargestBatchFitsTheDefaultLimit keeps server.DefaultMaxRequestBytes
// honest: the largest BatchCreateJobs the registry accepts (MaxBatch jobs at
// every per-job limit, in binary protobuf) must fit under it, and the
// default must not be far above it.
func TestLargestBatchFitsTheDefaultLimit(t *testing.T) {
	t.Parallel()
	job := largestJob()
	policy, err := targetcheck.NewAMQPPolicy(targetcheck.AMQPPolicyOptions{})
	require.NoError(t, err)
	var v rpcerr.Violations
	validate.Job(&v, targetcheck.New(policy), "job", proto.Clone(job).(*registryv1.Job), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	require.True(t, v.Empty(), "the largest job must be valid: %v", v.List())

	req := &registryv1.BatchCreateJobsRequest{Requests: make([]*registryv1.CreateJobRequest, api.MaxBatch)}
	for i := range req.Requests {
		req.Requests[i] = &registryv1.CreateJobRequest{Job: job, RequestId: strings.Repeat("r", validate.MaxRequestID)}
	}
	size := proto.Size(req)
	t.Logf("largest BatchCreateJobs: %d bytes (%.1f MiB); default limit %d bytes", size, float64(size)/(1<<20), server.DefaultMaxRequestBytes)
	require.LessOrEqual(t, size, server.DefaultMaxRequestBytes)
	require.Greater(t, size, server.DefaultMaxRequestBytes*8/10, "the default is sized to this batch, not far above it")
}
