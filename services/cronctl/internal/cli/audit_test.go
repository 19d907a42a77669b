package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	auditv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1/auditv1connect"
)

// fakeAudit is one service's audit log.
type fakeAudit struct {
	auditv1connect.UnimplementedAuditServiceHandler
	events []*auditv1.AuditEvent
	asked  []*auditv1.ListAuditEventsRequest
}

func (f *fakeAudit) ListAuditEvents(_ context.Context, req *connect.Request[auditv1.ListAuditEventsRequest]) (*connect.Response[auditv1.ListAuditEventsResponse], error) {
	f.asked = append(f.asked, req.Msg)
	return connect.NewResponse(&auditv1.ListAuditEventsResponse{Events: f.events}), nil
}

func serveAudit(t *testing.T, f *fakeAudit) string {
	mux := http.NewServeMux()
	mux.Handle(auditv1connect.NewAuditServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func auditEvent(id string, minute int, procedure string, ids ...string) *auditv1.AuditEvent {
	return &auditv1.AuditEvent{
		Id: id, Time: timestamppb.New(time.Date(2030, 1, 2, 3, minute, 0, 0, time.UTC)),
		KeyId: "cfg-0123456789ab", Procedure: procedure, ObjectIds: ids, Code: "ok",
	}
}

// TestAuditListMergesTheServicesLogs: every service's log is read, and the
// records come out newest first whatever log they came from.
func TestAuditListMergesTheServicesLogs(t *testing.T) {
	t.Parallel()
	registry := &fakeAudit{events: []*auditv1.AuditEvent{
		auditEvent("r2", 30, "/cronmesh.registry.v1.JobService/DeleteJob", "J1"),
		auditEvent("r1", 10, "/cronmesh.registry.v1.JobService/CreateJob", "J1"),
	}}
	alerting := &fakeAudit{events: []*auditv1.AuditEvent{auditEvent("a1", 20, "/cronmesh.alerting.v1.AlertService/CreateRule", "R1")}}
	empty := &fakeAudit{}
	vars := map[string]string{
		"CRONMESH_REGISTRY_URL": serveAudit(t, registry), "CRONMESH_ALERTING_URL": serveAudit(t, alerting),
		"CRONMESH_TRIGGER_URL": serveAudit(t, empty), "CRONMESH_DISPATCHER_URL": serveAudit(t, empty), "CRONMESH_HISTORY_URL": serveAudit(t, empty),
	}
	unused := httptest.NewServer(http.NotFoundHandler()) // runAgainst's own URLs, overridden by vars
	t.Cleanup(unused.Close)
	out, errOut, code := runAgainst(t, unused, vars, "audit", "list", "--key", "cfg-0123456789ab", "--limit", "2")
	require.Equal(t, ExitOK, code, errOut)
	assert.Regexp(t, `^TIME\s+KEY\s+PROCEDURE\s+OBJECTS\s+CODE\n`+
		`2030-01-02T03:30:00Z\s+cfg-0123456789ab\s+/cronmesh.registry.v1.JobService/DeleteJob\s+J1\s+ok\n`+
		`2030-01-02T03:20:00Z\s+cfg-0123456789ab\s+/cronmesh.alerting.v1.AlertService/CreateRule\s+R1\s+ok\n$`, out,
		"the two newest of all the logs, newest first")
	require.Len(t, registry.asked, 1)
	assert.Equal(t, "cfg-0123456789ab", registry.asked[0].GetKeyId())
	assert.EqualValues(t, 2, registry.asked[0].GetPageSize())
	assert.Len(t, empty.asked, 3, "every service's log is read")

	out, errOut, code = runAgainst(t, unused, vars, "audit", "list", "--service", "alerting")
	require.Equal(t, ExitOK, code, errOut)
	assert.Contains(t, out, "CreateRule")
	assert.NotContains(t, out, "JobService")

	_, errOut, code = runAgainst(t, unused, vars, "audit", "list", "--service", "ledger")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, errOut, "--service")
}
