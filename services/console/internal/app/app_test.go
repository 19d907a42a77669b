package app_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	auditv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1/auditv1connect"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/testkit/apptest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
	"github.com/cronmesh/cronmesh/services/console/internal/app"
	"github.com/cronmesh/cronmesh/services/console/internal/assets"
)

// jobs is a registry JobService that answers with what it was sent.
type jobs struct {
	registryv1connect.UnimplementedJobServiceHandler
}

func (jobs) GetJob(_ context.Context, req *connect.Request[registryv1.GetJobRequest]) (*connect.Response[registryv1.GetJobResponse], error) {
	if req.Header().Get("Cookie") != "" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("a cookie reached the service"))
	}
	return connect.NewResponse(&registryv1.GetJobResponse{Job: &registryv1.Job{
		Id: req.Msg.GetId(), DisplayName: req.Header().Get("Authorization"),
	}}), nil
}

func (jobs) CreateJob(context.Context, *connect.Request[registryv1.CreateJobRequest]) (*connect.Response[registryv1.CreateJobResponse], error) {
	err := connect.NewError(connect.CodeInvalidArgument, errors.New("job.schedule.cron: not a cron expression"))
	detail, derr := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: "job.schedule.cron", Description: "not a cron expression"},
	}})
	if derr != nil {
		return nil, derr
	}
	err.AddDetail(detail)
	return nil, err
}

// executions is a HistoryService that answers with what it was sent.
type executions struct {
	historyv1connect.UnimplementedHistoryServiceHandler
}

func (executions) GetExecution(_ context.Context, req *connect.Request[historyv1.GetExecutionRequest]) (*connect.Response[historyv1.GetExecutionResponse], error) {
	return connect.NewResponse(&historyv1.GetExecutionResponse{Execution: &historyv1.Execution{
		ExecutionId: req.Msg.GetExecutionId(), JobDisplayName: req.Header().Get("Authorization"),
	}}), nil
}

// auditOf is the AuditService every service mounts; it names its service.
type auditOf struct {
	auditv1connect.UnimplementedAuditServiceHandler
	service string
}

func (a auditOf) ListAuditEvents(context.Context, *connect.Request[auditv1.ListAuditEventsRequest]) (*connect.Response[auditv1.ListAuditEventsResponse], error) {
	return connect.NewResponse(&auditv1.ListAuditEventsResponse{Events: []*auditv1.AuditEvent{{Procedure: a.service}}}), nil
}

// serve runs a real cronmesh server (libs/server: h2c and HTTP/1.1) with
// mount's services until the test ends and returns its URL.
func serve(t *testing.T, name string, mount func(*server.Server)) string {
	t.Helper()
	s, err := server.New(server.Options{Name: name, Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	mount(s)
	path, h := auditv1connect.NewAuditServiceHandler(auditOf{service: name}, s.HandlerOptions()...)
	s.Handle(auditv1connect.AuditServiceName, path, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("%s: %v", name, err)
	}
	return "http://" + s.Addr()
}

// console is a running console and the URLs of its upstreams.
type console struct {
	url string
}

// startConsole runs the console in front of a registry and a history (and
// a trigger URL where nothing listens), serving files as its assets.
func startConsole(t *testing.T, files fstest.MapFS) *console {
	t.Helper()
	registryURL := serve(t, "registry", func(s *server.Server) {
		path, h := registryv1connect.NewJobServiceHandler(jobs{}, s.HandlerOptions()...)
		s.Handle(registryv1connect.JobServiceName, path, h)
	})
	historyURL := serve(t, "history", func(s *server.Server) {
		path, h := historyv1connect.NewHistoryServiceHandler(executions{}, s.HandlerOptions()...)
		s.Handle(historyv1connect.HistoryServiceName, path, h)
	})
	cfg := app.Config{
		Common: config.Common{Listen: "127.0.0.1:0", LogLevel: "warn", ShutdownTimeout: 5 * time.Second,
			Limits: server.Limits{MaxRequestBytes: 64 << 10}},
		RegistryURL: registryURL, HistoryURL: historyURL,
		// A closed port: the trigger is down.
		TriggerURL:    "http://127.0.0.1:1",
		DispatcherURL: app.DefaultDispatcherURL, AlertingURL: app.DefaultAlertingURL,
	}
	_, url := apptest.Start(t, "console", func(ctx context.Context) (*app.App, error) {
		return app.New(ctx, cfg, slog.New(slog.DiscardHandler), app.WithAssets(files))
	})
	return &console{url: url}
}

func h2cClient(t *testing.T) *http.Client {
	t.Helper()
	c, err := rpcclient.NewHTTPClient(tlsconfig.Client{})
	require.NoError(t, err)
	return c
}

// protocols are the three ways a client reaches the services through the
// console: the browser's Connect and gRPC-Web over HTTP/1.1, and gRPC over
// HTTP/2.
func protocols(t *testing.T) map[string]struct {
	client *http.Client
	opts   []connect.ClientOption
} {
	return map[string]struct {
		client *http.Client
		opts   []connect.ClientOption
	}{
		"connect":  {http.DefaultClient, nil},
		"grpc-web": {http.DefaultClient, []connect.ClientOption{connect.WithGRPCWeb()}},
		"grpc":     {h2cClient(t), []connect.ClientOption{connect.WithGRPC()}},
	}
}

func TestForwardsEachServiceWithTheCallersAuthorization(t *testing.T) {
	t.Parallel()
	c := startConsole(t, nil)
	for name, p := range protocols(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			jobsClient := registryv1connect.NewJobServiceClient(p.client, c.url, p.opts...)
			req := connect.NewRequest(&registryv1.GetJobRequest{Id: "job-1"})
			req.Header().Set("Authorization", "Bearer alpha-key")
			req.Header().Set("Cookie", "session=other-app")
			res, err := jobsClient.GetJob(ctx, req)
			require.NoError(t, err)
			assert.Equal(t, "job-1", res.Msg.GetJob().GetId())
			assert.Equal(t, "Bearer alpha-key", res.Msg.GetJob().GetDisplayName(), "the key reaches the registry untouched")

			historyClient := historyv1connect.NewHistoryServiceClient(p.client, c.url, p.opts...)
			hreq := connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: "exec-1"})
			hreq.Header().Set("Authorization", "Bearer beta-key")
			hres, err := historyClient.GetExecution(ctx, hreq)
			require.NoError(t, err)
			assert.Equal(t, "exec-1", hres.Msg.GetExecution().GetExecutionId())
			assert.Equal(t, "Bearer beta-key", hres.Msg.GetExecution().GetJobDisplayName())

			// The AuditService every service mounts is reached through the
			// service's own prefix.
			for _, svc := range []string{"registry", "history"} {
				audit := auditv1connect.NewAuditServiceClient(p.client, c.url+"/api/"+svc, p.opts...)
				ares, err := audit.ListAuditEvents(ctx, connect.NewRequest(&auditv1.ListAuditEventsRequest{}))
				require.NoError(t, err)
				require.Len(t, ares.Msg.GetEvents(), 1)
				assert.Equal(t, svc, ares.Msg.GetEvents()[0].GetProcedure())
			}
		})
	}
}

func TestFieldViolationsReachTheBrowser(t *testing.T) {
	t.Parallel()
	c := startConsole(t, nil)
	for name, p := range protocols(t) {
		t.Run(name, func(t *testing.T) {
			client := registryv1connect.NewJobServiceClient(p.client, c.url, p.opts...)
			_, err := client.CreateJob(context.Background(), connect.NewRequest(&registryv1.CreateJobRequest{}))
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
			var cerr *connect.Error
			require.ErrorAs(t, err, &cerr)
			require.Len(t, cerr.Details(), 1)
			v, err := cerr.Details()[0].Value()
			require.NoError(t, err)
			br, ok := v.(*errdetails.BadRequest)
			require.True(t, ok, "a google.rpc.BadRequest, got %T", v)
			assert.Equal(t, "job.schedule.cron", br.GetFieldViolations()[0].GetField())
		})
	}
}

func TestAServiceThatIsDownIsUnavailable(t *testing.T) {
	t.Parallel()
	c := startConsole(t, nil)
	for name, p := range protocols(t) {
		t.Run(name, func(t *testing.T) {
			audit := auditv1connect.NewAuditServiceClient(p.client, c.url+"/api/trigger", p.opts...)
			_, err := audit.ListAuditEvents(context.Background(), connect.NewRequest(&auditv1.ListAuditEventsRequest{}))
			assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
		})
	}
}

func TestABodyOverTheLimitIsRefused(t *testing.T) {
	t.Parallel()
	c := startConsole(t, nil)
	for name, p := range protocols(t) {
		t.Run(name, func(t *testing.T) {
			client := registryv1connect.NewJobServiceClient(p.client, c.url, p.opts...)
			// 64 KiB is the console's limit in these tests; the registry's
			// own is far larger, so a refusal comes from the console.
			_, err := client.GetJob(context.Background(), connect.NewRequest(&registryv1.GetJobRequest{Id: strings.Repeat("x", 128<<10)}))
			require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
			// A call within the limit still goes through.
			_, err = client.GetJob(context.Background(), connect.NewRequest(&registryv1.GetJobRequest{Id: strings.Repeat("x", 1<<10)}))
			require.NoError(t, err)
		})
	}
}

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, string(body)
}

func TestWithoutBuiltAssetsEveryPageSaysSo(t *testing.T) {
	t.Parallel()
	c := startConsole(t, fstest.MapFS{".gitignore": {Data: []byte("*\n")}})
	for _, path := range []string{"/", "/jobs", "/assets/index.js"} {
		status, _, body := get(t, c.url+path)
		assert.Equal(t, http.StatusServiceUnavailable, status, path)
		assert.Equal(t, assets.NotBuiltMessage+"\n", body, path)
	}
	// Health does not depend on the assets. Readiness is reported a moment
	// after the server listens (once the service's parts are ready), so
	// it is awaited rather than read once.
	apptest.WaitReady(t, c.url, "the console without its assets never became ready")
}

func TestServesTheSPA(t *testing.T) {
	t.Parallel()
	index := "<!doctype html><title>cronmesh</title>"
	c := startConsole(t, fstest.MapFS{
		"index.html":         {Data: []byte(index)},
		"assets/index-1.js":  {Data: []byte("console.log(1)")},
		"assets/index-1.css": {Data: []byte("body{}")},
	})
	status, h, body := get(t, c.url+"/")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, index, body)
	assert.Contains(t, h.Get("Content-Security-Policy"), "default-src 'self'")
	assert.Equal(t, "DENY", h.Get("X-Frame-Options"))

	// The SPA's own routes load the page, so a reload keeps the view.
	status, _, body = get(t, c.url+"/jobs/0190-abc")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, index, body)

	status, h, body = get(t, c.url+"/assets/index-1.js")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "console.log(1)", body)
	assert.Contains(t, h.Get("Content-Type"), "javascript")
	assert.Contains(t, h.Get("Cache-Control"), "immutable")

	// An old build's bundle is not there: never index.html run as script.
	status, _, _ = get(t, c.url+"/assets/index-0.js")
	assert.Equal(t, http.StatusNotFound, status)

	res, err := http.Post(c.url+"/", "text/plain", bytes.NewReader(nil))
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
}

func TestCountsForwardedCalls(t *testing.T) {
	t.Parallel()
	c := startConsole(t, nil)
	client := registryv1connect.NewJobServiceClient(http.DefaultClient, c.url)
	_, err := client.GetJob(context.Background(), connect.NewRequest(&registryv1.GetJobRequest{Id: "j"}))
	require.NoError(t, err)
	_, _, body := get(t, c.url+"/metrics")
	assert.Contains(t, body, `console_forwarded_calls_total{service="console",status="200",upstream="registry"} 1`)
}
