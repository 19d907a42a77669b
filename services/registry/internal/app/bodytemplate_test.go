package app_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// TestBodyTemplate: a templated body is checked on create and update (an
// InvalidArgument naming job.target.http.body with the template error),
// stored and read back with its format; the slot headers are reserved.
func TestBodyTemplate(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	client := reg.client(keyAlpha)
	ctx := context.Background()

	bad := httpJob("bad template")
	bad.Target.GetHttp().Body = `{"slot":"{{ .NominalTime }}"}`
	bad.Target.GetHttp().BodyFormat = registryv1.BodyFormat_BODY_FORMAT_TEMPLATE
	_, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: bad}))
	require.Equal(t, []string{"job.target.http.body"}, rpctest.Violations(t, err))
	descriptions := violationDescriptions(t, err)
	require.Len(t, descriptions, 1)
	require.Contains(t, descriptions[0], `template error at byte 9: unknown placeholder ".NominalTime"`)

	reserved := httpJob("reserved header")
	reserved.Target.GetHttp().Headers = map[string]string{"Cronmesh-Nominal-Time": "2020-01-01T00:00:00Z"}
	_, err = client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: reserved}))
	require.Equal(t, []string{`job.target.http.headers["Cronmesh-Nominal-Time"]`}, rpctest.Violations(t, err))

	good := httpJob("templated")
	good.Target.GetHttp().Body = `{"slot":"{{nominal_time}}","attempt":{{attempt}}}`
	good.Target.GetHttp().BodyFormat = registryv1.BodyFormat_BODY_FORMAT_TEMPLATE
	created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: good}))
	require.NoError(t, err)
	got, err := client.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: created.Msg.Job.Id}))
	require.NoError(t, err)
	require.Equal(t, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE, got.Msg.Job.GetTarget().GetHttp().GetBodyFormat())
	require.Equal(t, good.Target.GetHttp().Body, got.Msg.Job.GetTarget().GetHttp().GetBody())

	patch := &registryv1.Job{Id: created.Msg.Job.Id, Etag: got.Msg.Job.Etag, Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
		Body: "{{attempt", BodyFormat: registryv1.BodyFormat_BODY_FORMAT_TEMPLATE,
	}}}}
	mask := &fieldmaskpb.FieldMask{Paths: []string{"target.http.body", "target.http.body_format"}}
	_, err = client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{Job: patch, UpdateMask: mask}))
	require.Equal(t, []string{"job.target.http.body"}, rpctest.Violations(t, err))

	// Switching the format back to literal makes the same text valid.
	patch.Target.GetHttp().BodyFormat = registryv1.BodyFormat_BODY_FORMAT_LITERAL
	updated, err := client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{Job: patch, UpdateMask: mask}))
	require.NoError(t, err)
	require.Equal(t, "{{attempt", updated.Msg.Job.GetTarget().GetHttp().GetBody())
	require.Equal(t, registryv1.BodyFormat_BODY_FORMAT_LITERAL, updated.Msg.Job.GetTarget().GetHttp().GetBodyFormat())
}

// violationDescriptions returns the descriptions of err's BadRequest
// field violations.
func violationDescriptions(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	for _, d := range rpctest.RequireCode(t, err, connect.CodeInvalidArgument).Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if br, ok := v.(*errdetails.BadRequest); ok {
			for _, fv := range br.FieldViolations {
				out = append(out, fv.Description)
			}
		}
	}
	return out
}
