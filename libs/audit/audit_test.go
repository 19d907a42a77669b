package audit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/authn"
	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	auditv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1/auditv1connect"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/audit"
	"github.com/cronmesh/cronmesh/libs/authz"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

// jobs is a JobService whose creates succeed with a fixed id, whose
// deletes find nothing, and whose reads answer empty: what is recorded
// then comes from the interceptor alone.
type jobs struct {
	registryv1connect.UnimplementedJobServiceHandler
}

func (jobs) CreateJob(context.Context, *connect.Request[registryv1.CreateJobRequest]) (*connect.Response[registryv1.CreateJobResponse], error) {
	return connect.NewResponse(&registryv1.CreateJobResponse{Job: &registryv1.Job{Id: "job-created"}}), nil
}

func (jobs) BatchCreateJobs(context.Context, *connect.Request[registryv1.BatchCreateJobsRequest]) (*connect.Response[registryv1.BatchCreateJobsResponse], error) {
	return connect.NewResponse(&registryv1.BatchCreateJobsResponse{Jobs: []*registryv1.Job{{Id: "batch-1"}, {Id: "batch-2"}}}), nil
}

func (jobs) DeleteJob(context.Context, *connect.Request[registryv1.DeleteJobRequest]) (*connect.Response[registryv1.DeleteJobResponse], error) {
	return nil, connect.NewError(connect.CodeNotFound, nil)
}

func (jobs) GetJob(context.Context, *connect.Request[registryv1.GetJobRequest]) (*connect.Response[registryv1.GetJobResponse], error) {
	return connect.NewResponse(&registryv1.GetJobResponse{}), nil
}

// The keys of the test: the "Bearer" value is the key id, "<ns>/<role>/<id>".
var principals = map[string]apikey.Principal{
	"alpha-admin":  {Namespace: "alpha", KeyID: "k-alpha-admin", Role: apikey.RoleAdmin},
	"alpha-editor": {Namespace: "alpha", KeyID: "k-alpha-editor", Role: apikey.RoleEditor},
	"alpha-viewer": {Namespace: "alpha", KeyID: "k-alpha-viewer", Role: apikey.RoleViewer},
	"beta-admin":   {Namespace: "beta", KeyID: "k-beta-admin", Role: apikey.RoleAdmin},
}

type clients struct {
	jobs  func(key string) registryv1connect.JobServiceClient
	audit func(key string) auditv1connect.AuditServiceClient
}

// serve mounts a JobService and the AuditService behind a stand-in for the
// API key middleware, with the interceptors in the order the services use.
func serve(t *testing.T, opts audit.Options) clients {
	t.Helper()
	pool, schema := pgtest.New(t)
	_, err := migrate.ApplyAll(t.Context(), pool, schema, []migrate.Migration{audit.Migration()})
	require.NoError(t, err)
	opts.Pool = pool
	log := audit.New(opts)
	mux := http.NewServeMux()
	mux.Handle(registryv1connect.NewJobServiceHandler(jobs{}, connect.WithInterceptors(log.Interceptor(), authz.NewInterceptor())))
	mux.Handle(auditv1connect.NewAuditServiceHandler(log, connect.WithInterceptors(log.Interceptor(), authz.NewInterceptor())))
	authenticate := authn.NewMiddleware(func(_ context.Context, r *http.Request) (any, error) {
		key, _ := authn.BearerToken(r)
		p, ok := principals[key]
		if !ok {
			return nil, authn.Errorf("invalid API key")
		}
		return p, nil
	})
	srv := httptest.NewServer(authenticate.Wrap(mux))
	t.Cleanup(srv.Close)
	bearer := func(key string) connect.ClientOption {
		return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+key)
				return next(ctx, req)
			}
		}))
	}
	return clients{
		jobs: func(key string) registryv1connect.JobServiceClient {
			return registryv1connect.NewJobServiceClient(srv.Client(), srv.URL, bearer(key))
		},
		audit: func(key string) auditv1connect.AuditServiceClient {
			return auditv1connect.NewAuditServiceClient(srv.Client(), srv.URL, bearer(key))
		},
	}
}

func list(t *testing.T, c auditv1connect.AuditServiceClient, req *auditv1.ListAuditEventsRequest) []*auditv1.AuditEvent {
	t.Helper()
	resp, err := c.ListAuditEvents(t.Context(), connect.NewRequest(req))
	require.NoError(t, err)
	return resp.Msg.GetEvents()
}

func TestEveryChangeIsRecordedReadsAreNot(t *testing.T) {
	t.Parallel()
	c := serve(t, audit.Options{})
	ctx := t.Context()
	editor := c.jobs("alpha-editor")
	_, err := editor.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{RequestId: "req-1", Job: &registryv1.Job{DisplayName: "x"}}))
	require.NoError(t, err)
	_, err = editor.BatchCreateJobs(ctx, connect.NewRequest(&registryv1.BatchCreateJobsRequest{}))
	require.NoError(t, err)
	_, err = editor.DeleteJob(ctx, connect.NewRequest(&registryv1.DeleteJobRequest{Id: "job-missing"}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	_, err = editor.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: "job-read"}))
	require.NoError(t, err)
	_, err = c.jobs("alpha-viewer").DeleteJob(ctx, connect.NewRequest(&registryv1.DeleteJobRequest{Id: "job-guarded"}))
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	_, err = c.jobs("beta-admin").CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{DisplayName: "y"}}))
	require.NoError(t, err)

	got := list(t, c.audit("alpha-admin"), &auditv1.ListAuditEventsRequest{})
	type row struct {
		key, procedure, code string
		ids                  []string
	}
	var rows []row
	for _, ev := range got {
		require.NotEmpty(t, ev.GetId())
		require.False(t, ev.GetTime().AsTime().IsZero())
		rows = append(rows, row{ev.GetKeyId(), ev.GetProcedure(), ev.GetCode(), ev.GetObjectIds()})
	}
	require.Equal(t, []row{
		{"k-alpha-viewer", registryv1connect.JobServiceDeleteJobProcedure, "permission_denied", []string{"job-guarded"}},
		{"k-alpha-editor", registryv1connect.JobServiceDeleteJobProcedure, "not_found", []string{"job-missing"}},
		{"k-alpha-editor", registryv1connect.JobServiceBatchCreateJobsProcedure, "ok", []string{"batch-1", "batch-2"}},
		{"k-alpha-editor", registryv1connect.JobServiceCreateJobProcedure, "ok", []string{"job-created"}},
	}, rows, "alpha's changes, newest first, refusals included; no reads, nothing of beta's, no request id")

	beta := list(t, c.audit("beta-admin"), &auditv1.ListAuditEventsRequest{})
	require.Len(t, beta, 1)
	require.Equal(t, "k-beta-admin", beta[0].GetKeyId())

	byKey := list(t, c.audit("alpha-admin"), &auditv1.ListAuditEventsRequest{KeyId: "k-alpha-viewer"})
	require.Len(t, byKey, 1)
	require.Equal(t, "permission_denied", byKey[0].GetCode())
}

func TestListingNeedsAdminAndPages(t *testing.T) {
	t.Parallel()
	c := serve(t, audit.Options{})
	ctx := t.Context()
	for range 5 {
		_, err := c.jobs("alpha-editor").CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{DisplayName: "x"}}))
		require.NoError(t, err)
	}
	for _, key := range []string{"alpha-editor", "alpha-viewer"} {
		_, err := c.audit(key).ListAuditEvents(ctx, connect.NewRequest(&auditv1.ListAuditEventsRequest{}))
		require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), key)
	}
	var seen []string
	token := ""
	for {
		resp, err := c.audit("alpha-admin").ListAuditEvents(ctx, connect.NewRequest(&auditv1.ListAuditEventsRequest{PageSize: 2, PageToken: token}))
		require.NoError(t, err)
		require.LessOrEqual(t, len(resp.Msg.GetEvents()), 2)
		for _, ev := range resp.Msg.GetEvents() {
			seen = append(seen, ev.GetId())
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Len(t, seen, 5, "every record once across pages")
	for i := 1; i < len(seen); i++ {
		require.Greater(t, seen[i-1], seen[i], "newest first")
	}
	_, err := c.audit("alpha-admin").ListAuditEvents(ctx, connect.NewRequest(&auditv1.ListAuditEventsRequest{PageToken: "nonsense!"}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	_, err = c.audit("alpha-admin").ListAuditEvents(ctx, connect.NewRequest(&auditv1.ListAuditEventsRequest{PageSize: 1001}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
}

// TestRecordsPastTheRetentionGo: the first record an hour or more after
// the last pruning deletes the records older than the retention.
func TestRecordsPastTheRetentionGo(t *testing.T) {
	t.Parallel()
	var now atomic.Pointer[time.Time]
	set := func(at time.Time) { now.Store(&at) }
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	set(start)
	c := serve(t, audit.Options{Retention: 24 * time.Hour, Now: func() time.Time { return *now.Load() }})
	create := func() {
		_, err := c.jobs("alpha-editor").CreateJob(t.Context(), connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{DisplayName: "x"}}))
		require.NoError(t, err)
	}
	times := func() []time.Time {
		var got []time.Time
		for _, ev := range list(t, c.audit("alpha-admin"), &auditv1.ListAuditEventsRequest{}) {
			got = append(got, ev.GetTime().AsTime())
		}
		return got
	}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	create() // prunes nothing; the next pruning is due an hour later
	set(at(30 * time.Minute))
	create()
	set(at(24*time.Hour + 15*time.Minute))
	create() // due: the first record is past the retention
	require.Equal(t, []time.Time{at(24*time.Hour + 15*time.Minute), at(30 * time.Minute)}, times())
	set(at(24*time.Hour + 45*time.Minute))
	create() // the second is past the retention too, but no pruning is due
	require.Len(t, times(), 3)
	set(at(25*time.Hour + 15*time.Minute))
	create()
	require.Equal(t, []time.Time{at(25*time.Hour + 15*time.Minute), at(24*time.Hour + 45*time.Minute), at(24*time.Hour + 15*time.Minute)}, times())
}
