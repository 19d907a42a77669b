package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
)

func TestParseTimeArg(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, in string
		want     time.Time
		wantErr  bool
	}{
		{"empty is unset", "", time.Time{}, false},
		{"RFC 3339", "2030-01-01T08:30:00Z", time.Date(2030, 1, 1, 8, 30, 0, 0, time.UTC), false},
		{"RFC 3339 with offset", "2030-01-01T09:30:00+01:00", time.Date(2030, 1, 1, 8, 30, 0, 0, time.UTC), false},
		{"a duration ago", "90m", now.Add(-90 * time.Minute), false},
		{"zero ago is now", "0s", now, false},
		{"negative duration", "-1h", time.Time{}, true},
		{"a date alone", "2030-01-01", time.Time{}, true},
		{"words", "yesterday", time.Time{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseTimeArg("since", tc.in, now)
			if tc.wantErr {
				var uerr usageError
				require.ErrorAs(t, err, &uerr)
				assert.Contains(t, err.Error(), "--since")
				return
			}
			require.NoError(t, err)
			if tc.want.IsZero() {
				assert.Nil(t, got)
				return
			}
			assert.True(t, got.AsTime().Equal(tc.want), "%v != %v", got.AsTime(), tc.want)
		})
	}
}

func TestParseStatusesAndTriggers(t *testing.T) {
	t.Parallel()
	got, err := parseStatuses([]string{"Failed,dead", " missed "})
	require.NoError(t, err)
	assert.Equal(t, []historyv1.ExecutionStatus{
		historyv1.ExecutionStatus_EXECUTION_STATUS_FAILED, historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD, historyv1.ExecutionStatus_EXECUTION_STATUS_MISSED,
	}, got)
	_, err = parseStatuses([]string{"failed,broken"})
	assert.ErrorContains(t, err, `"broken"`)

	kinds, err := parseTriggers([]string{"catch-up", "manual"})
	require.NoError(t, err)
	assert.Equal(t, []dispatchv1.TriggerKind{dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP, dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL}, kinds)
	_, err = parseTriggers([]string{"cron"})
	assert.ErrorContains(t, err, "--trigger")
	// Every status and kind the API has can be named, and named back.
	for name, s := range statusNames {
		assert.Equal(t, name, statusText(s))
	}
	for name, k := range triggerNames {
		assert.Equal(t, name, triggerText(k))
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "HTTP 500: boom", oneLine("HTTP 500:\n\tboom\n", 60))
	assert.Equal(t, "abcd…", oneLine("abcdefgh", 5))
	assert.Equal(t, "ééé…", oneLine("éééééé", 4), "cut on runes, not bytes")
	assert.Equal(t, "-", successRate(0, 0))
	assert.Equal(t, "66.7%", successRate(2, 3))
}

// fakeHistory records the requests and answers with canned executions.
type fakeHistory struct {
	historyv1connect.UnimplementedHistoryServiceHandler
	list  []*historyv1.ListExecutionsRequest
	stats []*historyv1.GetJobStatsRequest
	auth  []string
}

var canned = &historyv1.Execution{
	ExecutionId: "0190f1e2-0000-7000-8000-000000000001", JobId: "0190f1e2-0000-7000-8000-0000000000aa", JobDisplayName: "report",
	Status: historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
	NominalTime: timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)), Attempt: 2, Duration: durationpb.New(120 * time.Millisecond),
	ResponseStatus: 200, TraceId: "4bf92f3577b34da6a3ce929d0e0e4736", TraceUrl: "http://127.0.0.1:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736",
}

func (f *fakeHistory) ListExecutions(_ context.Context, req *connect.Request[historyv1.ListExecutionsRequest]) (*connect.Response[historyv1.ListExecutionsResponse], error) {
	f.list = append(f.list, req.Msg)
	f.auth = append(f.auth, req.Header().Get("Authorization"))
	if req.Msg.GetPageToken() == "" {
		return connect.NewResponse(&historyv1.ListExecutionsResponse{Executions: []*historyv1.Execution{canned}, NextPageToken: "p2"}), nil
	}
	return connect.NewResponse(&historyv1.ListExecutionsResponse{Executions: []*historyv1.Execution{canned}}), nil
}

func (f *fakeHistory) GetExecution(_ context.Context, req *connect.Request[historyv1.GetExecutionRequest]) (*connect.Response[historyv1.GetExecutionResponse], error) {
	if req.Msg.GetExecutionId() != canned.GetExecutionId() {
		return nil, connect.NewError(connect.CodeNotFound, nil)
	}
	return connect.NewResponse(&historyv1.GetExecutionResponse{Execution: canned, Attempts: []*historyv1.Attempt{
		{Attempt: 1, Status: historyv1.ExecutionStatus_EXECUTION_STATUS_RETRYING, Duration: durationpb.New(time.Second), ResponseStatus: 503, Reason: "HTTP 503", RetryDelay: durationpb.New(5 * time.Second)},
		{Attempt: 2, Status: historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, Duration: durationpb.New(120 * time.Millisecond), ResponseStatus: 200},
	}}), nil
}

func (f *fakeHistory) GetJobStats(_ context.Context, req *connect.Request[historyv1.GetJobStatsRequest]) (*connect.Response[historyv1.GetJobStatsResponse], error) {
	f.stats = append(f.stats, req.Msg)
	return connect.NewResponse(&historyv1.GetJobStatsResponse{LastRun: canned, Runs: 4, Successes: 3, Failures: 1, DurationP50: durationpb.New(time.Second)}), nil
}

// runAgainst runs cronctl with the history and alerting URLs pointed at
// srv, a fixed clock, and the key in the environment.
func runAgainst(t *testing.T, srv *httptest.Server, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	vars := map[string]string{"CRONMESH_HISTORY_URL": srv.URL, "CRONMESH_ALERTING_URL": srv.URL, "CRONMESH_API_KEY": "unit-key-0123456789"}
	for k, v := range env {
		vars[k] = v
	}
	var stdout, stderr bytes.Buffer
	code := Run(t.Context(), args, Env{
		Stdout: &stdout, Stderr: &stderr,
		LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
		ReadFile:  os.ReadFile,
		Now:       func() time.Time { return time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC) },
	})
	return stdout.String(), stderr.String(), code
}

func TestHistoryCommands(t *testing.T) {
	t.Parallel()
	fake := &fakeHistory{}
	mux := http.NewServeMux()
	mux.Handle(historyv1connect.NewHistoryServiceHandler(fake))
	srv := newH2CServer(t, mux)

	out, errOut, code := runAgainst(t, srv, nil, "history", "list", "--job", "J", "--status", "failed,dead", "--trigger", "manual",
		"--since", "24h", "--until", "2030-01-02T06:00:00Z", "--query", "timeout", "--page-size", "10")
	require.Equal(t, ExitOK, code, errOut)
	require.Len(t, fake.list, 1)
	want := &historyv1.ListExecutionsRequest{
		JobId: "J", Query: "timeout", PageSize: 10,
		Statuses:     []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_FAILED, historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD},
		TriggerKinds: []dispatchv1.TriggerKind{dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL},
		StartTime:    timestamppb.New(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)),
		EndTime:      timestamppb.New(time.Date(2030, 1, 2, 6, 0, 0, 0, time.UTC)),
	}
	assert.True(t, proto.Equal(want, fake.list[0]), "sent %v", fake.list[0])
	assert.Equal(t, "Bearer unit-key-0123456789", fake.auth[0])
	assert.Regexp(t, `^ID\s+JOB\s+NAME\s+NOMINAL TIME\s+STATUS\s+ATTEMPT\s+DURATION\s+HTTP\s+REASON\n`, out)
	assert.Regexp(t, `(?m)^0190f1e2-0000-7000-8000-000000000001\s+\S+\s+report\s+2030-01-02T03:04:05Z\s+succeeded\s+2\s+120ms\s+200\s+-$`, out)
	assert.Contains(t, out, "(more: --page-token p2)")

	out, errOut, code = runAgainst(t, srv, nil, "history", "list", "--all", "-o", "json")
	require.Equal(t, ExitOK, code, errOut)
	assert.Len(t, fake.list, 3, "--all follows the next page")
	assert.Contains(t, out, `"traceUrl": "http://127.0.0.1:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"`)
	assert.NotContains(t, out, "nextPageToken")

	out, errOut, code = runAgainst(t, srv, nil, "history", "get", canned.GetExecutionId())
	require.Equal(t, ExitOK, code, errOut)
	assert.Regexp(t, `(?m)^trace id:\s+4bf92f3577b34da6a3ce929d0e0e4736$`, out)
	assert.Regexp(t, `(?m)^trace:\s+http://127.0.0.1:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736$`, out)
	assert.Regexp(t, `(?m)^ATTEMPT\s+STATUS\s+STARTED\s+DURATION\s+HTTP\s+RETRY IN\s+REASON$`, out)
	assert.Regexp(t, `(?m)^1\s+retrying\s+-\s+1s\s+503\s+5s\s+HTTP 503$`, out)
	assert.Regexp(t, `(?m)^2\s+succeeded\s+-\s+120ms\s+200\s+-\s+-$`, out)

	_, errOut, code = runAgainst(t, srv, nil, "history", "get", "nope")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, errOut, "error: not_found:")

	out, errOut, code = runAgainst(t, srv, nil, "history", "stats", "J", "--since", "2030-01-01T00:00:00Z")
	require.Equal(t, ExitOK, code, errOut)
	require.Len(t, fake.stats, 1)
	assert.Equal(t, "J", fake.stats[0].GetJobId())
	assert.True(t, fake.stats[0].GetStartTime().AsTime().Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
	assert.Nil(t, fake.stats[0].GetEndTime(), "no --until: the server's default (now)")
	assert.Regexp(t, `(?m)^success rate:\s+75.0%$`, out)
	assert.Regexp(t, `(?m)^last run:\s+0190f1e2-0000-7000-8000-000000000001 succeeded \(2030-01-02T03:04:05Z\)$`, out)
	assert.Regexp(t, `(?m)^last trace:\s+http://127.0.0.1:16686/trace/`, out)

	_, errOut, code = runAgainst(t, srv, nil, "history", "list", "--status", "exploded")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, errOut, "--status")
	_, _, code = runAgainst(t, srv, nil, "history", "stats")
	assert.Equal(t, ExitUsage, code, "stats needs the job id")
}
