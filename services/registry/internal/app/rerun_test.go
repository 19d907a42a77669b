package app_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/registry/internal/app"
)

// fakeHistory is a HistoryService over a real Connect server that answers
// GetExecution as the history does: by the namespace of the caller's key
// (the Authorization header the registry forwards), NOT_FOUND for an
// execution of another namespace, UNAUTHENTICATED without a known key.
type fakeHistory struct {
	historyv1connect.UnimplementedHistoryServiceHandler
	url   string
	calls atomic.Int64

	mu sync.Mutex
	// executions by namespace, then id.
	executions map[string]map[string]*historyv1.Execution
}

// namespaces of the registry harness's keys.
var keyNamespaces = map[string]string{"Bearer " + keyAlpha: "alpha", "Bearer " + keyBeta: "beta"}

func startHistory(t *testing.T) *fakeHistory {
	t.Helper()
	h := &fakeHistory{executions: map[string]map[string]*historyv1.Execution{}}
	path, handler := historyv1connect.NewHistoryServiceHandler(h)
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

func (h *fakeHistory) add(namespace string, e *historyv1.Execution) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.executions[namespace] == nil {
		h.executions[namespace] = map[string]*historyv1.Execution{}
	}
	h.executions[namespace][e.ExecutionId] = e
}

func (h *fakeHistory) GetExecution(_ context.Context, req *connect.Request[historyv1.GetExecutionRequest]) (*connect.Response[historyv1.GetExecutionResponse], error) {
	h.calls.Add(1)
	ns, ok := keyNamespaces[req.Header().Get("Authorization")]
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown key"))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.executions[ns][req.Msg.ExecutionId]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("execution not found"))
	}
	return connect.NewResponse(&historyv1.GetExecutionResponse{Execution: e}), nil
}

// withHistoryURL points the registry at a history service.
func withHistoryURL(url string) option { return func(c *app.Config) { c.HistoryURL = url } }

// finishedExecution is an execution of job in status, at nominal.
func finishedExecution(jobID string, status historyv1.ExecutionStatus, nominal time.Time) *historyv1.Execution {
	return &historyv1.Execution{ExecutionId: execid.For(jobID, nominal), JobId: jobID, Status: status}
}

// TestRerunExecution: a finished execution of the caller's namespace is
// re-run as a manual run of its job whose RUN_REQUESTED event names the
// execution and what the request overrode, with the overrides checked as
// RunJob checks them; whatever the registry cannot re-run is refused with
// the code a client acts on, and fires nothing.
func TestRerunExecution(t *testing.T) {
	t.Parallel()
	hist := startHistory(t)
	reg := startRegistry(t, withHistoryURL(hist.url))
	ctx := context.Background()
	alpha, beta := reg.client(keyAlpha), reg.client(keyBeta)
	created, err := alpha.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("rerunnable")}))
	require.NoError(t, err)
	jobID := created.Msg.Job.Id
	secret := created.Msg.Job.GetTarget().GetHttp().GetSigningSecret()
	reg.nextEvents(t, 1)

	base := time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)
	dead := finishedExecution(jobID, historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD, base)
	hist.add("alpha", dead)
	running := finishedExecution(jobID, historyv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, base.Add(time.Hour))
	hist.add("alpha", running)
	retrying := finishedExecution(jobID, historyv1.ExecutionStatus_EXECUTION_STATUS_RETRYING, base.Add(2*time.Hour))
	hist.add("alpha", retrying)
	// An execution of a job that no longer exists.
	orphan := finishedExecution(uuid.Must(uuid.NewV7()).String(), historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, base)
	hist.add("alpha", orphan)

	for _, proto_ := range rpctest.Protocols() {
		t.Run(proto_.Name, func(t *testing.T) {
			client := reg.client(keyAlpha, proto_.Opts...)
			requestID := "fix-the-url-" + proto_.Name
			resp, err := client.RerunExecution(ctx, connect.NewRequest(&registryv1.RerunExecutionRequest{
				ExecutionId: dead.ExecutionId, RequestId: requestID,
				TargetOverride: httpTarget("https://example.test/v2/hook"),
			}))
			require.NoError(t, err)
			require.Equal(t, jobID, resp.Msg.JobId)
			nominal := resp.Msg.NominalTime.AsTime()
			require.WithinDuration(t, time.Now(), nominal, time.Minute, "a re-run is a manual run now, not at the old slot")
			require.Equal(t, execid.For(jobID, nominal), resp.Msg.ExecutionId)

			ev := reg.nextEvents(t, 1)[0]
			require.Equal(t, eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED, ev.Kind)
			require.Equal(t, dead.ExecutionId, ev.RerunOfExecutionId)
			require.Equal(t, []string{"target"}, ev.RunOverrides)
			require.Equal(t, nominal, ev.RunRequest.NominalTime.AsTime())
			require.Equal(t, requestID, ev.RunRequest.RequestId)
			require.Equal(t, "https://example.test/v2/hook", ev.Job.GetTarget().GetHttp().GetUrl())
			require.Equal(t, secret, ev.Job.GetTarget().GetHttp().GetSigningSecret(), "a re-run signs with the job's secret")

			// The same request id answers the first call's run, without
			// asking the history or firing again.
			calls := hist.calls.Load()
			again, err := client.RerunExecution(ctx, connect.NewRequest(&registryv1.RerunExecutionRequest{
				ExecutionId: dead.ExecutionId, RequestId: requestID,
			}))
			require.NoError(t, err)
			require.Equal(t, resp.Msg.ExecutionId, again.Msg.ExecutionId)
			require.True(t, resp.Msg.NominalTime.AsTime().Equal(again.Msg.NominalTime.AsTime()))
			require.Equal(t, calls, hist.calls.Load(), "a replay is answered by the registry alone")
		})
	}

	// Without overrides: the job's stored target, nothing overridden.
	_, err = alpha.RerunExecution(ctx, connect.NewRequest(&registryv1.RerunExecutionRequest{ExecutionId: dead.ExecutionId}))
	require.NoError(t, err)
	ev := reg.nextEvents(t, 1)[0]
	require.Equal(t, dead.ExecutionId, ev.RerunOfExecutionId)
	require.Empty(t, ev.RunOverrides)
	require.Equal(t, "https://example.test/hook", ev.Job.GetTarget().GetHttp().GetUrl())

	huge := strings.Repeat("x", 256*1024+1)
	manyHeaders := map[string]string{}
	for i := range 40 {
		manyHeaders["X-H"+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	for name, tc := range map[string]struct {
		client registryv1connect.JobServiceClient
		req    *registryv1.RerunExecutionRequest
		code   connect.Code
		field  string
	}{
		"no execution id":       {alpha, &registryv1.RerunExecutionRequest{}, connect.CodeInvalidArgument, "execution_id"},
		"not an execution id":   {alpha, &registryv1.RerunExecutionRequest{ExecutionId: "yesterday"}, connect.CodeInvalidArgument, "execution_id"},
		"unknown execution":     {alpha, &registryv1.RerunExecutionRequest{ExecutionId: uuid.NewString()}, connect.CodeNotFound, ""},
		"another tenant's":      {beta, &registryv1.RerunExecutionRequest{ExecutionId: dead.ExecutionId}, connect.CodeNotFound, ""},
		"still running":         {alpha, &registryv1.RerunExecutionRequest{ExecutionId: running.ExecutionId}, connect.CodeFailedPrecondition, ""},
		"waiting for a retry":   {alpha, &registryv1.RerunExecutionRequest{ExecutionId: retrying.ExecutionId}, connect.CodeFailedPrecondition, ""},
		"its job was deleted":   {alpha, &registryv1.RerunExecutionRequest{ExecutionId: orphan.ExecutionId}, connect.CodeNotFound, ""},
		"a target not a URL":    {alpha, &registryv1.RerunExecutionRequest{ExecutionId: dead.ExecutionId, TargetOverride: httpTarget("not a url")}, connect.CodeInvalidArgument, "target_override.http.url"},
		"a body over the cap":   {alpha, &registryv1.RerunExecutionRequest{ExecutionId: dead.ExecutionId, BodyOverride: &huge}, connect.CodeInvalidArgument, "body_override"},
		"a forbidden header":    {alpha, &registryv1.RerunExecutionRequest{ExecutionId: dead.ExecutionId, HeadersOverride: map[string]string{"Host": "evil.test"}}, connect.CodeInvalidArgument, `headers_override["Host"]`},
		"too many headers":      {alpha, &registryv1.RerunExecutionRequest{ExecutionId: dead.ExecutionId, HeadersOverride: manyHeaders}, connect.CodeInvalidArgument, "headers_override"},
		"a request id too long": {alpha, &registryv1.RerunExecutionRequest{ExecutionId: dead.ExecutionId, RequestId: strings.Repeat("r", 129)}, connect.CodeInvalidArgument, "request_id"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tc.client.RerunExecution(ctx, connect.NewRequest(tc.req))
			if tc.field != "" {
				require.Contains(t, rpctest.Violations(t, err), tc.field)
				return
			}
			rpctest.RequireCode(t, err, tc.code)
		})
	}
	reg.requireNoMoreEvents(t)
}

// TestRerunExecutionWithoutHistory: a registry without --history-url
// serves everything else and answers RerunExecution UNIMPLEMENTED, saying
// why; one whose history does not answer answers UNAVAILABLE. Neither
// fires anything.
func TestRerunExecutionWithoutHistory(t *testing.T) {
	t.Parallel()
	// A port that nothing listens on: the history is down.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	downURL := "http://" + l.Addr().String()
	require.NoError(t, l.Close())

	for name, tc := range map[string]struct {
		opts []option
		code connect.Code
		says string
	}{
		"not configured": {nil, connect.CodeUnimplemented, "--history-url"},
		"history down":   {[]option{withHistoryURL(downURL)}, connect.CodeUnavailable, "history service is unavailable"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reg := startRegistry(t, tc.opts...)
			ctx := context.Background()
			client := reg.client(keyAlpha)
			created, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("no-history")}))
			require.NoError(t, err, "the registry serves without a history")
			reg.nextEvents(t, 1)
			_, err = client.RerunExecution(ctx, connect.NewRequest(&registryv1.RerunExecutionRequest{
				ExecutionId: execid.For(created.Msg.Job.Id, time.Now()),
			}))
			cerr := rpctest.RequireCode(t, err, tc.code)
			require.Contains(t, cerr.Message(), tc.says)
			require.NotContains(t, cerr.Message(), "127.0.0.1", "the history's address stays inside")
			reg.requireNoMoreEvents(t)
		})
	}
}
