package app_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

func httpTarget(url string) *registryv1.Target {
	return &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: url}}}
}

// TestRunJobOverrides: a run's target, body and headers overrides go into
// its RUN_REQUESTED event (the job the trigger fires), with what was
// overridden, checked as CreateJob checks a target; the stored job is
// unchanged, and a bad override is InvalidArgument naming its field and
// fires nothing.
func TestRunJobOverrides(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)
	job := httpJob("overridable")
	job.GetTarget().GetHttp().SecretHeaders = map[string]string{"Authorization": "Bearer stored"}
	job.GetTarget().GetHttp().Headers = map[string]string{"X-Team": "payments"}
	created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
	require.NoError(t, err)
	id := created.Msg.Job.Id
	secret := created.Msg.Job.GetTarget().GetHttp().GetSigningSecret()
	reg.nextEvents(t, 1)

	body := `{"replay":"2026-11-25"}`
	_, err = client.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{
		Id: id, RequestId: "fixed-url",
		TargetOverride:  httpTarget("https://example.test/v2/hook"),
		BodyOverride:    &body,
		HeadersOverride: map[string]string{"X-Replay": "yes", "x-team": "ops"},
	}))
	require.NoError(t, err)
	_, err = client.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: id, BodyOverride: &body}))
	require.NoError(t, err)

	events := reg.nextEvents(t, 2)
	run := events[0]
	require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED, run.Kind)
	require.Equal(t, []string{"target", "body", "headers"}, run.RunOverrides)
	h := run.Job.GetTarget().GetHttp()
	require.Equal(t, "https://example.test/v2/hook", h.Url)
	require.Equal(t, body, h.Body)
	require.Equal(t, map[string]string{"X-Replay": "yes", "x-team": "ops"}, h.Headers, "an override replaces the header of the same name, in any case")
	require.Equal(t, "POST", h.Method, "defaults filled as on create")
	require.Equal(t, secret, h.SigningSecret, "a run signs with the job's secret")
	require.Equal(t, "Bearer stored", h.SecretHeaders["Authorization"], "a target of the same origin keeps the stored secret headers")

	bodyOnly := events[1]
	require.Equal(t, []string{"body"}, bodyOnly.RunOverrides)
	require.Equal(t, "https://example.test/hook", bodyOnly.Job.GetTarget().GetHttp().Url)
	require.Equal(t, body, bodyOnly.Job.GetTarget().GetHttp().Body)
	require.Equal(t, "Bearer stored", bodyOnly.Job.GetTarget().GetHttp().SecretHeaders["Authorization"], "same origin keeps the stored secrets")

	got, err := client.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
	require.NoError(t, err)
	require.Equal(t, "https://example.test/hook", got.Msg.Job.GetTarget().GetHttp().Url, "the stored job is unchanged")
	require.Equal(t, `{"report":"daily"}`, got.Msg.Job.GetTarget().GetHttp().Body)

	huge := strings.Repeat("x", 256*1024+1)
	// Another origin must be given the secret headers again: stored ones
	// are never sent to another destination.
	otherHost := httpTarget("https://other.example.test/hook")
	for name, tc := range map[string]struct {
		req  *registryv1.RunJobRequest
		want string
	}{
		"a target that is not a URL":    {&registryv1.RunJobRequest{TargetOverride: httpTarget("not a url")}, "target_override.http.url"},
		"an empty target":               {&registryv1.RunJobRequest{TargetOverride: &registryv1.Target{}}, "target_override"},
		"a body over the cap":           {&registryv1.RunJobRequest{BodyOverride: &huge}, "body_override"},
		"a forbidden header":            {&registryv1.RunJobRequest{HeadersOverride: map[string]string{"Host": "evil.test"}}, `headers_override["Host"]`},
		"a stored secret to a new host": {&registryv1.RunJobRequest{TargetOverride: otherHost}, `target_override.http.secret_headers["Authorization"]`},
	} {
		t.Run(name, func(t *testing.T) {
			tc.req.Id = id
			_, err := client.RunJob(ctx, connect.NewRequest(tc.req))
			require.Contains(t, rpctest.Violations(t, err), tc.want)
		})
	}
	reg.requireNoMoreEvents(t)
}
