package app_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

func httpJob(name string) *registryv1.Job {
	return &registryv1.Job{
		DisplayName: name,
		Labels:      map[string]string{"team": "payments"},
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "*/5 * * * *"}},
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Url:  "https://example.test/hook",
			Body: `{"report":"daily"}`,
		}}},
	}
}

func TestCreateGetJob(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	for _, proto_ := range rpctest.Protocols() {
		t.Run(proto_.Name, func(t *testing.T) {
			ctx := context.Background()
			client := reg.client(keyAlpha, proto_.Opts...)

			created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("nightly")}))
			require.NoError(t, err)
			job := created.Msg.Job
			id, err := uuid.Parse(job.Id)
			require.NoError(t, err)
			require.Equal(t, uuid.Version(7), id.Version())
			require.Equal(t, "alpha", job.Namespace)
			require.EqualValues(t, 1, job.Version)
			require.NotEmpty(t, job.Etag)
			require.True(t, strings.HasPrefix(job.Target.GetHttp().SigningSecret, "whsec_"), "the secret is returned once, on create")
			// Defaults are materialized, so every consumer sees the same job.
			require.Equal(t, "POST", job.Target.GetHttp().Method)
			require.Equal(t, 30*time.Second, job.Target.GetHttp().Timeout.AsDuration())
			require.EqualValues(t, 5, job.RetryPolicy.GetMaxRetries())
			require.Equal(t, time.Second, job.RetryPolicy.InitialBackoff.AsDuration())
			require.Equal(t, 2.0, job.RetryPolicy.Multiplier)
			require.Equal(t, time.Hour, job.CatchUpWindow.AsDuration())
			require.Equal(t, "UTC", job.Schedule.TimeZone)
			require.Equal(t, registryv1.Priority_PRIORITY_NORMAL, job.Priority)

			got, err := client.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: job.Id}))
			require.NoError(t, err)
			require.Empty(t, got.Msg.Job.Target.GetHttp().SigningSecret, "the secret is never returned after create")
			require.Equal(t, job.Id, got.Msg.Job.Id)
			require.Equal(t, job.Etag, got.Msg.Job.Etag)
			require.Len(t, got.Msg.NextRunTimes, 5)
			prev := time.Now().Add(-time.Second)
			for _, ts := range got.Msg.NextRunTimes {
				next := ts.AsTime()
				require.True(t, next.After(prev))
				require.Zero(t, next.Minute()%5)
				require.Zero(t, next.Second())
				prev = next
			}

			events := reg.nextEvents(t, 1)
			ev := events[0]
			require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, ev.Kind)
			require.EqualValues(t, 1, ev.Version)
			require.Equal(t, job.Id, ev.Job.Id)
			require.Equal(t, job.Target.GetHttp().SigningSecret, ev.Job.Target.GetHttp().SigningSecret,
				"the event carries the secret the dispatcher signs with")
		})
	}
}

func TestGetJobOfAnotherNamespaceIsNotFound(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	created, err := reg.client(keyAlpha).CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("a")}))
	require.NoError(t, err)
	beta := reg.client(keyBeta)

	_, err = beta.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: created.Msg.Job.Id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	_, err = beta.DeleteJob(ctx, connect.NewRequest(&registryv1.DeleteJobRequest{Id: created.Msg.Job.Id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	_, err = beta.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: created.Msg.Job.Id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	list, err := beta.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{}))
	require.NoError(t, err)
	require.Empty(t, list.Msg.Jobs)
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	for _, tc := range []struct{ name, key string }{
		{"no key", ""},
		{"wrong key", "not-a-configured-key-at-all"},
	} {
		for _, p := range rpctest.Protocols() {
			t.Run(tc.name+"/"+p.Name, func(t *testing.T) {
				_, err := reg.client(tc.key, p.Opts...).ListJobs(context.Background(), connect.NewRequest(&registryv1.ListJobsRequest{}))
				rpctest.RequireCode(t, err, connect.CodeUnauthenticated)
			})
		}
	}
}

func TestCreateJobIsIdempotentOnRequestID(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)

	const callers = 8
	ids := make([]string, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			resp, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("once"), RequestId: "req-1"}))
			require.NoError(t, err)
			ids[i] = resp.Msg.Job.Id
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id, "every retry of one request_id returns the same job")
	}
	list, err := client.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{}))
	require.NoError(t, err)
	require.Len(t, list.Msg.Jobs, 1)

	// The same request id in another namespace is another request.
	other, err := reg.client(keyBeta).CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("once"), RequestId: "req-1"}))
	require.NoError(t, err)
	require.NotEqual(t, ids[0], other.Msg.Job.Id)
}

func TestCreateJobRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	client := reg.client(keyAlpha)
	retries := func(n int32) *int32 { return &n }
	headers := func(n, size int) map[string]string {
		h := map[string]string{}
		for i := range n {
			h[fmt.Sprintf("X-H%d", i)] = strings.Repeat("v", size)
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		mutate func(j *registryv1.Job)
		field  string
	}{
		{"missing display name", func(j *registryv1.Job) { j.DisplayName = "" }, "job.display_name"},
		{"bad cron", func(j *registryv1.Job) { j.Schedule.Kind = &registryv1.Schedule_Cron{Cron: "61 * * * *"} }, "job.schedule.cron"},
		{"cron that never fires", func(j *registryv1.Job) { j.Schedule.Kind = &registryv1.Schedule_Cron{Cron: "0 0 30 2 *"} }, "job.schedule.cron"},
		{"unknown zone", func(j *registryv1.Job) { j.Schedule.TimeZone = "Mars/Olympus_Mons" }, "job.schedule.time_zone"},
		{"interval under 1s", func(j *registryv1.Job) {
			j.Schedule.Kind = &registryv1.Schedule_Interval{Interval: &registryv1.Interval{Every: durationpb.New(500 * time.Millisecond)}}
		}, "job.schedule.interval.every"},
		{"no schedule kind", func(j *registryv1.Job) { j.Schedule.Kind = nil }, "job.schedule.kind"},
		{"end before start", func(j *registryv1.Job) {
			j.Schedule.StartTime = timestamppb.New(time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC))
			j.Schedule.EndTime = timestamppb.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		}, "job.schedule.end_time"},
		{"url not http", func(j *registryv1.Job) { j.Target.GetHttp().Url = "ftp://example.test/x" }, "job.target.http.url"},
		{"url relative", func(j *registryv1.Job) { j.Target.GetHttp().Url = "/hook" }, "job.target.http.url"},
		{"method", func(j *registryv1.Job) { j.Target.GetHttp().Method = "TRACE" }, "job.target.http.method"},
		{"body over 256 KiB", func(j *registryv1.Job) { j.Target.GetHttp().Body = strings.Repeat("x", 256<<10+1) }, "job.target.http.body"},
		{"too many headers", func(j *registryv1.Job) { j.Target.GetHttp().Headers = headers(33, 1) }, "job.target.http.headers"},
		{"header too large", func(j *registryv1.Job) { j.Target.GetHttp().Headers = headers(1, 4<<10+1) }, `job.target.http.headers["X-H0"]`},
		{"signature header", func(j *registryv1.Job) { j.Target.GetHttp().Headers = map[string]string{"Webhook-Signature": "forged"} }, `job.target.http.headers["Webhook-Signature"]`},
		{"timeout", func(j *registryv1.Job) { j.Target.GetHttp().Timeout = durationpb.New(31 * time.Minute) }, "job.target.http.timeout"},
		{"status code", func(j *registryv1.Job) { j.Target.GetHttp().AcceptedStatusCodes = []int32{200, 700} }, "job.target.http.accepted_status_codes[1]"},
		{"secret", func(j *registryv1.Job) { j.Target.GetHttp().SigningSecret = "hunter2" }, "job.target.http.signing_secret"},
		{"no target", func(j *registryv1.Job) { j.Target = nil }, "job.target"},
		{"retries above 10", func(j *registryv1.Job) { j.RetryPolicy = &registryv1.RetryPolicy{MaxRetries: retries(11)} }, "job.retry_policy.max_retries"},
		{"retries negative", func(j *registryv1.Job) { j.RetryPolicy = &registryv1.RetryPolicy{MaxRetries: retries(-1)} }, "job.retry_policy.max_retries"},
		{"multiplier", func(j *registryv1.Job) { j.RetryPolicy = &registryv1.RetryPolicy{Multiplier: 0.5} }, "job.retry_policy.multiplier"},
		{"unknown priority", func(j *registryv1.Job) { j.Priority = registryv1.Priority(99) }, "job.priority"},
		{"label key", func(j *registryv1.Job) { j.Labels = map[string]string{"Bad Key": "v"} }, `job.labels["Bad Key"]`},
		{"catch-up window", func(j *registryv1.Job) { j.CatchUpWindow = durationpb.New(30 * 24 * time.Hour) }, "job.catch_up_window"},
		{"amqp into cronmesh's exchanges", func(j *registryv1.Job) {
			j.Target = &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{Exchange: "cronmesh.dispatch", RoutingKey: "dispatch.high"}}}
		}, "job.target.amqp.exchange"},
		{"amqp into cronmesh's queues", func(j *registryv1.Job) {
			j.Target = &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{RoutingKey: "cronmesh.dispatch.high"}}}
		}, "job.target.amqp.routing_key"},
		{"amqp into another namespace's exchange", func(j *registryv1.Job) {
			j.Target = &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{Exchange: "beta.events", RoutingKey: "k"}}}
		}, "job.target.amqp.exchange"},
		{"amqp into another namespace's queue", func(j *registryv1.Job) {
			j.Target = &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{RoutingKey: "beta.inbox"}}}
		}, "job.target.amqp.routing_key"},
		{"amqp into RabbitMQ's built-in exchanges", func(j *registryv1.Job) {
			j.Target = &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{Exchange: "amq.topic", RoutingKey: "alpha.x"}}}
		}, "job.target.amqp.exchange"},
		{"amqp without queue", func(j *registryv1.Job) {
			j.Target = &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{}}}
		}, "job.target.amqp.routing_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := httpJob(tc.name)
			tc.mutate(job)
			_, err := client.CreateJob(context.Background(), connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
			require.Contains(t, rpctest.Violations(t, err), tc.field)
		})
	}
	t.Run("every violation at once", func(t *testing.T) {
		t.Parallel()
		job := httpJob("")
		job.Schedule.TimeZone = "Nowhere/Else"
		job.Target.GetHttp().Url = "mailto:x@example.test"
		_, err := client.CreateJob(context.Background(), connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
		require.Subset(t, rpctest.Violations(t, err), []string{"job.display_name", "job.schedule.time_zone", "job.target.http.url"})
	})
	t.Run("nothing was written", func(t *testing.T) {
		// Runs after the parallel subtests above have finished.
		t.Cleanup(func() {
			list, err := client.ListJobs(context.Background(), connect.NewRequest(&registryv1.ListJobsRequest{}))
			require.NoError(t, err)
			require.Empty(t, list.Msg.Jobs)
			reg.requireNoMoreEvents(t)
		})
	})
}

func TestBatchCreateJobsIsAllOrNothing(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)

	batch := func(n int) *registryv1.BatchCreateJobsRequest {
		req := &registryv1.BatchCreateJobsRequest{}
		for i := range n {
			req.Requests = append(req.Requests, &registryv1.CreateJobRequest{Job: httpJob(fmt.Sprintf("job-%d", i)), RequestId: fmt.Sprintf("r-%d", i)})
		}
		return req
	}

	bad := batch(3)
	bad.Requests[1].Job.Schedule.Kind = &registryv1.Schedule_Cron{Cron: "not cron"}
	_, err := client.BatchCreateJobs(ctx, connect.NewRequest(bad))
	require.Equal(t, []string{"requests[1].job.schedule.cron"}, rpctest.Violations(t, err))

	dup := batch(2)
	dup.Requests[1].RequestId = dup.Requests[0].RequestId
	_, err = client.BatchCreateJobs(ctx, connect.NewRequest(dup))
	require.Equal(t, []string{"requests[1].request_id"}, rpctest.Violations(t, err))

	_, err = client.BatchCreateJobs(ctx, connect.NewRequest(batch(1001)))
	require.Equal(t, []string{"requests"}, rpctest.Violations(t, err))
	_, err = client.BatchCreateJobs(ctx, connect.NewRequest(&registryv1.BatchCreateJobsRequest{}))
	require.Equal(t, []string{"requests"}, rpctest.Violations(t, err))

	list, err := client.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{}))
	require.NoError(t, err)
	require.Empty(t, list.Msg.Jobs, "a failed batch writes nothing")

	ok, err := client.BatchCreateJobs(ctx, connect.NewRequest(batch(1000)))
	require.NoError(t, err)
	require.Len(t, ok.Msg.Jobs, 1000)
	for i, j := range ok.Msg.Jobs {
		require.Equal(t, fmt.Sprintf("job-%d", i), j.DisplayName, "jobs come back in request order")
		require.NotEmpty(t, j.Target.GetHttp().SigningSecret)
	}
	require.Len(t, reg.nextEvents(t, 1000), 1000)

	// A batch reusing a request id of the namespace fails as a whole.
	again := batch(2)
	again.Requests[0].RequestId = "fresh"
	_, err = client.BatchCreateJobs(ctx, connect.NewRequest(again))
	rpctest.RequireCode(t, err, connect.CodeAlreadyExists)
	_, err = client.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: ok.Msg.Jobs[0].Id}))
	require.NoError(t, err)
}

func TestListJobsPagesStablyAndFilters(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)
	req := &registryv1.BatchCreateJobsRequest{}
	for i := range 25 {
		j := httpJob(fmt.Sprintf("job-%02d", i))
		j.Labels = map[string]string{"parity": []string{"even", "odd"}[i%2], "team": "core"}
		j.Paused = i%5 == 0
		req.Requests = append(req.Requests, &registryv1.CreateJobRequest{Job: j})
	}
	_, err := client.BatchCreateJobs(ctx, connect.NewRequest(req))
	require.NoError(t, err)

	collect := func(r *registryv1.ListJobsRequest) (names []string, pages int) {
		for {
			resp, err := client.ListJobs(ctx, connect.NewRequest(proto.Clone(r).(*registryv1.ListJobsRequest)))
			require.NoError(t, err)
			pages++
			for _, j := range resp.Msg.Jobs {
				require.Empty(t, j.Target.GetHttp().SigningSecret)
				names = append(names, j.DisplayName)
			}
			if resp.Msg.NextPageToken == "" {
				return names, pages
			}
			r.PageToken = resp.Msg.NextPageToken
		}
	}
	names, pages := collect(&registryv1.ListJobsRequest{PageSize: 10})
	require.Equal(t, 3, pages)
	require.Len(t, names, 25)
	for i, n := range names {
		require.Equal(t, fmt.Sprintf("job-%02d", i), n, "creation order, no duplicates, none skipped")
	}

	odd, _ := collect(&registryv1.ListJobsRequest{Labels: map[string]string{"parity": "odd", "team": "core"}})
	require.Len(t, odd, 12)
	paused := true
	pausedNames, _ := collect(&registryv1.ListJobsRequest{Paused: &paused})
	require.Equal(t, []string{"job-00", "job-05", "job-10", "job-15", "job-20"}, pausedNames)
	none, _ := collect(&registryv1.ListJobsRequest{Labels: map[string]string{"team": "other"}})
	require.Empty(t, none)

	// A name search, ignoring case, with the other filters.
	byName, _ := collect(&registryv1.ListJobsRequest{NameContains: "JOB-1", PageSize: 4})
	require.Equal(t, []string{"job-10", "job-11", "job-12", "job-13", "job-14", "job-15", "job-16", "job-17", "job-18", "job-19"}, byName)
	pausedByName, _ := collect(&registryv1.ListJobsRequest{NameContains: "job-1", Paused: &paused})
	require.Equal(t, []string{"job-10", "job-15"}, pausedByName)
	_, err = client.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{NameContains: strings.Repeat("é", 201)}))
	require.Equal(t, []string{"name_contains"}, rpctest.Violations(t, err))

	_, err = client.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{PageToken: "garbage!"}))
	require.Equal(t, []string{"page_token"}, rpctest.Violations(t, err))
	_, err = client.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{PageSize: -1}))
	require.Equal(t, []string{"page_size"}, rpctest.Violations(t, err))
}

func TestUpdateJob(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)
	created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("before")}))
	require.NoError(t, err)
	job := created.Msg.Job
	secret := job.Target.GetHttp().SigningSecret

	patch := &registryv1.Job{Id: job.Id, Etag: job.Etag, DisplayName: "after", Description: "ignored: not in the mask",
		Schedule: &registryv1.Schedule{TimeZone: "Europe/Berlin"}}
	updated, err := client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job: patch, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"display_name", "schedule.time_zone"}},
	}))
	require.NoError(t, err)
	got := updated.Msg.Job
	require.Equal(t, "after", got.DisplayName)
	require.Empty(t, got.Description)
	require.Equal(t, "Europe/Berlin", got.Schedule.TimeZone)
	require.Equal(t, "*/5 * * * *", got.Schedule.GetCron(), "a sub-field path leaves its siblings alone")
	require.EqualValues(t, 2, got.Version)
	require.NotEqual(t, job.Etag, got.Etag)
	require.Empty(t, got.Target.GetHttp().SigningSecret)

	// The stale etag now fails, and changes nothing.
	_, err = client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job: &registryv1.Job{Id: job.Id, Etag: job.Etag, DisplayName: "lost update"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"display_name"}},
	}))
	rpctest.RequireCode(t, err, connect.CodeAborted)

	for _, tc := range []struct {
		name  string
		req   *registryv1.UpdateJobRequest
		field string
	}{
		{"output-only path", &registryv1.UpdateJobRequest{Job: &registryv1.Job{Id: job.Id}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"version"}}}, "update_mask"},
		{"unknown path", &registryv1.UpdateJobRequest{Job: &registryv1.Job{Id: job.Id}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"colour"}}}, "update_mask"},
		{"invalid value", &registryv1.UpdateJobRequest{
			Job:        &registryv1.Job{Id: job.Id, Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * *"}}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schedule.cron"}},
		}, "job.schedule.cron"},
		{"required field cleared", &registryv1.UpdateJobRequest{Job: &registryv1.Job{Id: job.Id}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"target"}}}, "job.target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.UpdateJob(ctx, connect.NewRequest(tc.req))
			require.Contains(t, rpctest.Violations(t, err), tc.field)
		})
	}

	// A new target without a secret keeps the old secret.
	retarget, err := client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job:        &registryv1.Job{Id: job.Id, Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "https://example.test/v2"}}}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"target"}},
	}))
	require.NoError(t, err)
	require.EqualValues(t, 3, retarget.Msg.Job.Version)

	// An update that changes nothing writes nothing.
	same, err := client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job: &registryv1.Job{Id: job.Id, DisplayName: "after"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"display_name"}},
	}))
	require.NoError(t, err)
	require.EqualValues(t, 3, same.Msg.Job.Version)

	_, err = client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{Job: &registryv1.Job{Id: uuid.NewString(), DisplayName: "x"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"display_name"}}}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)

	events := reg.nextEvents(t, 3)
	require.Equal(t, []int64{1, 2, 3}, []int64{events[0].Version, events[1].Version, events[2].Version})
	require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, events[2].Kind)
	require.Equal(t, "https://example.test/v2", events[2].Job.Target.GetHttp().Url)
	require.Equal(t, secret, events[2].Job.Target.GetHttp().SigningSecret)
	reg.requireNoMoreEvents(t) // rejected and no-op updates publish nothing
}

func TestPauseResumeRunDelete(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)
	created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("lifecycle")}))
	require.NoError(t, err)
	id := created.Msg.Job.Id

	paused, err := client.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: id}))
	require.NoError(t, err)
	require.True(t, paused.Msg.Job.Paused)
	again, err := client.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: id}))
	require.NoError(t, err)
	require.Equal(t, paused.Msg.Job.Version, again.Msg.Job.Version, "pausing a paused job changes nothing")
	got, err := client.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
	require.NoError(t, err)
	require.Empty(t, got.Msg.NextRunTimes, "a paused job has no next runs")

	resumed, err := client.ResumeJob(ctx, connect.NewRequest(&registryv1.ResumeJobRequest{Id: id}))
	require.NoError(t, err)
	require.False(t, resumed.Msg.Job.Paused)

	run1, err := client.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: id, RequestId: "run-a"}))
	require.NoError(t, err)
	run1again, err := client.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: id, RequestId: "run-a"}))
	require.NoError(t, err)
	require.Equal(t, run1.Msg.NominalTime.AsTime(), run1again.Msg.NominalTime.AsTime(), "the same request id is the same run")
	run2, err := client.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: id}))
	require.NoError(t, err)
	require.True(t, run2.Msg.NominalTime.AsTime().After(run1.Msg.NominalTime.AsTime()), "each run gets its own nominal time")

	_, err = client.DeleteJob(ctx, connect.NewRequest(&registryv1.DeleteJobRequest{Id: id, Etag: "stale"}))
	rpctest.RequireCode(t, err, connect.CodeAborted)
	_, err = client.DeleteJob(ctx, connect.NewRequest(&registryv1.DeleteJobRequest{Id: id}))
	require.NoError(t, err)
	_, err = client.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	_, err = client.DeleteJob(ctx, connect.NewRequest(&registryv1.DeleteJobRequest{Id: id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	_, err = client.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: "not-a-uuid"}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)

	events := reg.nextEvents(t, 6)
	kinds := make([]eventsv1.JobEventKind, len(events))
	for i, e := range events {
		kinds[i] = e.Kind
	}
	require.Equal(t, []eventsv1.JobEventKind{
		eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED,
		eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED,
		eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED,
		eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED,
		eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED,
		eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED,
	}, kinds)
	require.Equal(t, run1.Msg.NominalTime.AsTime(), events[3].RunRequest.NominalTime.AsTime())
	require.Equal(t, "run-a", events[3].RunRequest.RequestId)
	for _, e := range events {
		require.Equal(t, apikey.ConfiguredKeyID(keyAlpha), e.KeyId, "every event names the key that made the change")
	}
	require.EqualValues(t, 4, events[5].Version, "the delete is ordered after every earlier change")
}
