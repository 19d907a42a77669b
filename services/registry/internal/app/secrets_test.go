package app_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// requireNoSecret fails when any of secrets appears anywhere in m.
func requireNoSecret(t *testing.T, m proto.Message, secrets ...string) {
	t.Helper()
	text := protojson.Format(m)
	for _, s := range secrets {
		require.NotContains(t, text, s)
	}
}

func TestCreateJobReplayReturnsNoSecret(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)
	job := httpJob("replayed")
	job.Target.GetHttp().SecretHeaders = map[string]string{"X-Token": "tok-s3cret"}

	first, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job, RequestId: "replay-1"}))
	require.NoError(t, err)
	secret := first.Msg.Job.GetTarget().GetHttp().GetSigningSecret()
	require.NotEmpty(t, secret, "the creating call shows the generated secret, once")
	require.Equal(t, map[string]string{"X-Token": ""}, first.Msg.Job.GetTarget().GetHttp().GetSecretHeaders())

	replay, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job, RequestId: "replay-1"}))
	require.NoError(t, err)
	require.Equal(t, first.Msg.Job.Id, replay.Msg.Job.Id)
	require.Empty(t, replay.Msg.Job.GetTarget().GetHttp().GetSigningSecret(), "a replay must not show the secret again")
	requireNoSecret(t, replay.Msg, secret, "tok-s3cret")
	require.Equal(t, map[string]string{"X-Token": ""}, replay.Msg.Job.GetTarget().GetHttp().GetSecretHeaders())
}

func TestSecretHeadersAreWriteOnly(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	ctx := context.Background()
	client := reg.client(keyAlpha)
	job := httpJob("secret headers")
	job.Target.GetHttp().Headers = map[string]string{"X-Plain": "visible", "authorization": "Bearer bearer-s3cret"}
	job.Target.GetHttp().SecretHeaders = map[string]string{"X-Token": "tok-s3cret"}

	created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
	require.NoError(t, err)
	id := created.Msg.Job.Id
	wantRead := func(t *testing.T, j *registryv1.Job) {
		t.Helper()
		h := j.GetTarget().GetHttp()
		require.Equal(t, map[string]string{"X-Plain": "visible"}, h.GetHeaders(), "a credential header is moved out of the plain ones")
		require.Equal(t, map[string]string{"X-Token": "", "authorization": ""}, h.GetSecretHeaders(), "names are shown, values never")
		requireNoSecret(t, j, "bearer-s3cret", "tok-s3cret")
	}
	wantRead(t, created.Msg.Job)
	got, err := client.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
	require.NoError(t, err)
	wantRead(t, got.Msg.Job)
	list, err := client.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{}))
	require.NoError(t, err)
	require.Len(t, list.Msg.Jobs, 1)
	wantRead(t, list.Msg.Jobs[0])
	// The job event, internal to the mesh, carries the values: the
	// dispatcher sends them.
	storedHeaders := func(t *testing.T) map[string]string {
		t.Helper()
		return reg.nextEvents(t, 1)[0].GetJob().GetTarget().GetHttp().GetSecretHeaders()
	}
	want := map[string]string{"X-Token": "tok-s3cret", "authorization": "Bearer bearer-s3cret"}
	require.Equal(t, want, storedHeaders(t))

	update := func(j *registryv1.Job, paths ...string) (*connect.Response[registryv1.UpdateJobResponse], error) {
		j = proto.CloneOf(j)
		j.Etag = ""
		return client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{Job: j, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}}))
	}
	// A job read back and sent again (names with empty values) keeps the
	// stored values; so does a target that omits them.
	read := proto.CloneOf(got.Msg.Job)
	read.Target.GetHttp().Body = `{"report":"weekly"}`
	resp, err := update(read, "target")
	require.NoError(t, err)
	wantRead(t, resp.Msg.Job)
	require.Equal(t, want, storedHeaders(t))
	omitted := httpJob("secret headers")
	omitted.Id = id
	omitted.Target.GetHttp().Headers = map[string]string{"X-Plain": "visible"}
	_, err = update(omitted, "target")
	require.NoError(t, err)
	require.Equal(t, want, storedHeaders(t))

	// Another origin never receives a stored secret header.
	moved := proto.CloneOf(read)
	moved.Target.GetHttp().Url = "https://attacker.example.test/collect"
	_, err = update(moved, "target.http.url")
	require.ElementsMatch(t, []string{`job.target.http.secret_headers["X-Token"]`, `job.target.http.secret_headers["authorization"]`}, rpctest.Violations(t, err))
	_, err = update(moved, "target")
	require.Contains(t, rpctest.Violations(t, err), `job.target.http.secret_headers["X-Token"]`)
	// The same origin (another path, the default port spelled out) keeps them.
	samePlace := proto.CloneOf(read)
	samePlace.Target.GetHttp().Url = "https://example.test:443/other-hook"
	_, err = update(samePlace, "target.http.url")
	require.NoError(t, err)
	require.Equal(t, want, storedHeaders(t))
	// Given again, they may go to the new origin.
	moved.Target.GetHttp().SecretHeaders = map[string]string{"X-Token": "new-tok"}
	_, err = update(moved, "target.http.url", "target.http.secret_headers")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"X-Token": "new-tok"}, storedHeaders(t))
	// Naming the map in the mask with nothing in it removes them all.
	moved.Target.GetHttp().SecretHeaders = nil
	resp, err = update(moved, "target.http.secret_headers")
	require.NoError(t, err)
	require.Empty(t, resp.Msg.Job.GetTarget().GetHttp().GetSecretHeaders())
	require.Empty(t, storedHeaders(t))

	// A new secret header needs a value; a name in both maps is refused.
	bad := httpJob("bad")
	bad.Target.GetHttp().SecretHeaders = map[string]string{"X-Token": ""}
	_, err = client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: bad}))
	require.Equal(t, []string{`job.target.http.secret_headers["X-Token"]`}, rpctest.Violations(t, err))
	bad.Target.GetHttp().SecretHeaders = map[string]string{"X-Token": "a"}
	bad.Target.GetHttp().Headers = map[string]string{"x-token": "b"}
	_, err = client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: bad}))
	require.Equal(t, []string{`job.target.http.secret_headers["X-Token"]`}, rpctest.Violations(t, err))
}
