package e2e_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	auditv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1/auditv1connect"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// The matrix's keys: two tenants, each its namespace's admin, and one key of
// each role in a third namespace that holds nothing.
const (
	tenantAKey   = "matrix-tenant-a-key-0123456789"
	tenantBKey   = "matrix-tenant-b-key-0123456789"
	roleAdminKey = "matrix-role-admin-key-0123456789"
	roleEditKey  = "matrix-role-editor-key-0123456789"
	roleViewKey  = "matrix-role-viewer-key-0123456789"
)

// tenantA is what tenant A owns when the matrix runs: one of every kind of
// object an RPC can name.
type tenantA struct {
	jobID, requestID, label  string
	ruleID, channelID        string
	incidentID, executionID  string
	deadLetterID             string
	jobDisplayName, ruleName string
	keyID                    string // A's key's id, as audit records name it
	managedKeyID             string // a key A manages through KeyService
	// bManagedAdmin is the secret of a managed admin key of tenant B: a
	// tenant's admin, not the operator's configured key.
	bManagedAdmin string
	// signingSecret is a well-formed secret for the channels B tries to
	// write over A's.
	signingSecret string
}

// ids are the strings that must never appear in an answer to tenant B:
// A's objects, their names and A's key id.
func (a *tenantA) ids() []string {
	return []string{a.jobID, a.ruleID, a.channelID, a.incidentID, a.executionID, a.deadLetterID, a.jobDisplayName, a.ruleName, a.keyID, a.managedKeyID}
}

// unknown returns A's objects with every id replaced by one that exists
// nowhere.
func (a *tenantA) unknown() *tenantA {
	u := *a
	for _, id := range []*string{&u.jobID, &u.ruleID, &u.channelID, &u.incidentID, &u.executionID, &u.deadLetterID, &u.managedKeyID} {
		*id = uuid.NewString()
	}
	return &u
}

// matrixCase is the matrix's row for one RPC.
type matrixCase struct {
	// role is the least role that may call the RPC.
	role apikey.Role
	// foreign is the request tenant B sends naming tenant A's objects; nil
	// when the RPC names none, and then B sends the empty request and the
	// answer must still hold nothing of A.
	foreign func(a *tenantA) proto.Message
	// answers is true when B may get a successful answer (a list filtered
	// by A's id is empty, a create reusing A's request id makes B's own
	// object); otherwise B must get NOT_FOUND or PERMISSION_DENIED.
	answers bool
	// reference is true when the request names A's object as a reference
	// inside the object it writes: B may then also get INVALID_ARGUMENT,
	// provided it is the very error an id that exists nowhere gets.
	reference bool
	// operatorOnly is true for an RPC across every namespace that only a
	// configured (operator's) key may call: tenant B's managed admin key
	// must get PERMISSION_DENIED.
	operatorOnly bool
}

// isolationCases has one row per RPC of the five public APIs, by full
// method name. TestIsolationMatrix walks the services' descriptors and fails
// on an RPC without a row, so a new RPC cannot ship unchecked.
func isolationCases() map[protoreflect.FullName]matrixCase {
	job := func(a *tenantA) *registryv1.Job {
		return &registryv1.Job{
			Id: a.jobID, DisplayName: "taken over",
			Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 0 1 1 *"}},
			Target:   &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "http://127.0.0.1:9/x"}}},
		}
	}
	const (
		registry   = "cronmesh.registry.v1.JobService."
		trigger    = "cronmesh.trigger.v1.TriggerService."
		dispatcher = "cronmesh.dispatcher.v1.DispatchService."
		history    = "cronmesh.history.v1.HistoryService."
		alerting   = "cronmesh.alerting.v1.AlertService."
		audit      = "cronmesh.audit.v1.AuditService."
		keys       = "cronmesh.registry.v1.KeyService."
	)
	viewer, editor, admin := apikey.RoleViewer, apikey.RoleEditor, apikey.RoleAdmin
	return map[protoreflect.FullName]matrixCase{
		registry + "CreateJob": {role: editor, answers: true, foreign: func(a *tenantA) proto.Message {
			j := job(a)
			j.Id = ""
			return &registryv1.CreateJobRequest{Job: j, RequestId: a.requestID}
		}},
		registry + "BatchCreateJobs": {role: editor, answers: true, foreign: func(a *tenantA) proto.Message {
			j := job(a)
			j.Id = ""
			return &registryv1.BatchCreateJobsRequest{Requests: []*registryv1.CreateJobRequest{{Job: j, RequestId: a.requestID}}}
		}},
		registry + "GetJob": {role: viewer, foreign: func(a *tenantA) proto.Message { return &registryv1.GetJobRequest{Id: a.jobID} }},
		registry + "ListJobs": {role: viewer, answers: true, foreign: func(a *tenantA) proto.Message {
			return &registryv1.ListJobsRequest{Labels: map[string]string{"matrix": a.label}}
		}},
		registry + "UpdateJob": {role: editor, foreign: func(a *tenantA) proto.Message {
			return &registryv1.UpdateJobRequest{Job: job(a)}
		}},
		registry + "DeleteJob": {role: editor, foreign: func(a *tenantA) proto.Message { return &registryv1.DeleteJobRequest{Id: a.jobID} }},
		registry + "PauseJob":  {role: editor, foreign: func(a *tenantA) proto.Message { return &registryv1.PauseJobRequest{Id: a.jobID} }},
		registry + "ResumeJob": {role: editor, foreign: func(a *tenantA) proto.Message { return &registryv1.ResumeJobRequest{Id: a.jobID} }},
		registry + "RunJob":    {role: editor, foreign: func(a *tenantA) proto.Message { return &registryv1.RunJobRequest{Id: a.jobID} }},
		// The registry asks the history for the execution with B's own
		// key, so the history's namespace check answers NOT_FOUND.
		registry + "RerunExecution": {role: editor, foreign: func(a *tenantA) proto.Message {
			return &registryv1.RerunExecutionRequest{ExecutionId: a.executionID}
		}},
		registry + "PreviewSchedule": {role: viewer},

		trigger + "GetRing":   {role: admin},
		trigger + "ListSlots": {role: viewer, answers: true, foreign: func(a *tenantA) proto.Message { return &triggerv1.ListSlotsRequest{JobId: a.jobID} }},
		trigger + "BackfillJob": {role: editor, foreign: func(a *tenantA) proto.Message {
			now := time.Now()
			return &triggerv1.BackfillJobRequest{JobId: a.jobID, StartTime: timestamppb.New(now.Add(-time.Hour)), EndTime: timestamppb.New(now)}
		}},

		dispatcher + "ListDeadLetters": {role: viewer, answers: true, foreign: func(a *tenantA) proto.Message {
			return &dispatcherv1.ListDeadLettersRequest{JobId: a.jobID}
		}},
		dispatcher + "RedriveDeadLetter": {role: editor, foreign: func(a *tenantA) proto.Message {
			return &dispatcherv1.RedriveDeadLetterRequest{Id: a.deadLetterID}
		}},
		dispatcher + "RedriveDeadLetters": {role: editor, answers: true, foreign: func(a *tenantA) proto.Message {
			return &dispatcherv1.RedriveDeadLettersRequest{JobId: a.jobID}
		}},
		dispatcher + "PurgeDeadLetter": {role: editor, foreign: func(a *tenantA) proto.Message {
			return &dispatcherv1.PurgeDeadLetterRequest{Id: a.deadLetterID}
		}},
		// A cancellation is recorded under the caller's namespace whether or
		// not the execution exists (it may be on its way), so B's succeeds,
		// with the stage RECORDED, and touches nothing of A's: the
		// dispatchers match queued requests, pending retries and attempts
		// in flight by (namespace, execution id), so A's execution is
		// neither dropped nor aborted (services/dispatcher/internal/app:
		// TestCancelInFlightOnAnotherReplica).
		dispatcher + "CancelExecution": {role: editor, answers: true, foreign: func(a *tenantA) proto.Message {
			return &dispatcherv1.CancelExecutionRequest{ExecutionId: a.executionID}
		}},

		history + "ListExecutions": {role: viewer, answers: true, foreign: func(a *tenantA) proto.Message {
			return &historyv1.ListExecutionsRequest{JobId: a.jobID}
		}},
		history + "GetExecution": {role: viewer, foreign: func(a *tenantA) proto.Message {
			return &historyv1.GetExecutionRequest{ExecutionId: a.executionID}
		}},
		history + "GetJobStats": {role: viewer, answers: true, foreign: func(a *tenantA) proto.Message {
			return &historyv1.GetJobStatsRequest{JobId: a.jobID}
		}},

		alerting + "CreateRule": {role: editor, reference: true, foreign: func(a *tenantA) proto.Message {
			return &alertingv1.CreateRuleRequest{Rule: &alertingv1.Rule{
				DisplayName: "borrowing a channel",
				Condition:   &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: 1}},
				ChannelIds:  []string{a.channelID},
			}}
		}},
		alerting + "GetRule":   {role: viewer, foreign: func(a *tenantA) proto.Message { return &alertingv1.GetRuleRequest{Id: a.ruleID} }},
		alerting + "ListRules": {role: viewer},
		alerting + "UpdateRule": {role: editor, reference: true, foreign: func(a *tenantA) proto.Message {
			return &alertingv1.UpdateRuleRequest{Rule: &alertingv1.Rule{
				Id: a.ruleID, DisplayName: "taken over",
				Condition:  &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: 1}},
				ChannelIds: []string{a.channelID},
			}}
		}},
		alerting + "DeleteRule":    {role: editor, foreign: func(a *tenantA) proto.Message { return &alertingv1.DeleteRuleRequest{Id: a.ruleID} }},
		alerting + "CreateChannel": {role: editor},
		alerting + "GetChannel":    {role: viewer, foreign: func(a *tenantA) proto.Message { return &alertingv1.GetChannelRequest{Id: a.channelID} }},
		alerting + "ListChannels":  {role: viewer},
		alerting + "UpdateChannel": {role: editor, foreign: func(a *tenantA) proto.Message {
			return &alertingv1.UpdateChannelRequest{Channel: &alertingv1.Channel{
				Id: a.channelID, DisplayName: "taken over",
				Kind: &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: "http://127.0.0.1:9/x", SigningSecret: a.signingSecret}},
			}}
		}},
		alerting + "DeleteChannel": {role: editor, foreign: func(a *tenantA) proto.Message { return &alertingv1.DeleteChannelRequest{Id: a.channelID} }},
		alerting + "TestChannel":   {role: editor, foreign: func(a *tenantA) proto.Message { return &alertingv1.TestChannelRequest{Id: a.channelID} }},
		alerting + "ListIncidents": {role: viewer, answers: true, foreign: func(a *tenantA) proto.Message {
			return &alertingv1.ListIncidentsRequest{RuleId: a.ruleID, JobId: a.jobID}
		}},
		alerting + "GetIncident": {role: viewer, foreign: func(a *tenantA) proto.Message { return &alertingv1.GetIncidentRequest{Id: a.incidentID} }},
		alerting + "AcknowledgeIncident": {role: editor, foreign: func(a *tenantA) proto.Message {
			return &alertingv1.AcknowledgeIncidentRequest{Id: a.incidentID}
		}},
		alerting + "ResolveIncident": {role: editor, foreign: func(a *tenantA) proto.Message {
			return &alertingv1.ResolveIncidentRequest{Id: a.incidentID}
		}},

		keys + "CreateKey": {role: admin, answers: true, foreign: func(a *tenantA) proto.Message {
			return &registryv1.CreateKeyRequest{Name: "taken over", Role: registryv1.KeyRole_KEY_ROLE_VIEWER, RequestId: a.requestID}
		}},
		keys + "ListKeys":       {role: admin, answers: true},
		keys + "RotateKey":      {role: admin, foreign: func(a *tenantA) proto.Message { return &registryv1.RotateKeyRequest{Id: a.managedKeyID} }},
		keys + "RevokeKey":      {role: admin, foreign: func(a *tenantA) proto.Message { return &registryv1.RevokeKeyRequest{Id: a.managedKeyID} }},
		keys + "ListKeyDigests": {role: admin, operatorOnly: true},
		// Names only the caller's own key: B learns B's namespace.
		keys + "GetCallerIdentity": {role: viewer, answers: true},

		// Served by each of the five services, each listing its own records.
		audit + "ListAuditEvents": {role: admin, answers: true, foreign: func(a *tenantA) proto.Message {
			return &auditv1.ListAuditEventsRequest{KeyId: a.keyID}
		}},
	}
}

// auditService is the audit log's API, which every service serves.
var auditService = auditv1.File_cronmesh_audit_v1_audit_service_proto.Services().Get(0)

// publicServices are the five public APIs and where the mesh serves each.
var publicServices = []struct {
	descs []protoreflect.ServiceDescriptor
	url   func(*meshrun.Mesh) string
}{
	{[]protoreflect.ServiceDescriptor{
		registryv1.File_cronmesh_registry_v1_job_service_proto.Services().Get(0),
		registryv1.File_cronmesh_registry_v1_key_service_proto.Services().Get(0),
	}, func(m *meshrun.Mesh) string { return m.Registry.URL }},
	{[]protoreflect.ServiceDescriptor{triggerv1.File_cronmesh_trigger_v1_trigger_service_proto.Services().Get(0)}, func(m *meshrun.Mesh) string { return m.Triggers[0].URL }},
	{[]protoreflect.ServiceDescriptor{dispatcherv1.File_cronmesh_dispatcher_v1_dispatch_service_proto.Services().Get(0)}, func(m *meshrun.Mesh) string { return m.Dispatcher.URL }},
	{[]protoreflect.ServiceDescriptor{historyv1.File_cronmesh_history_v1_history_service_proto.Services().Get(0)}, func(m *meshrun.Mesh) string { return m.History.URL }},
	{[]protoreflect.ServiceDescriptor{alertingv1.File_cronmesh_alerting_v1_alert_service_proto.Services().Get(0)}, func(m *meshrun.Mesh) string { return m.Alerting.URL }},
}

// TestMatrixCoversEveryService: every service declared under proto/ is one
// the matrix walks, so a new service cannot escape it either.
func TestMatrixCoversEveryService(t *testing.T) {
	t.Parallel()
	walked := map[string]bool{string(auditService.FullName()): true}
	for _, svc := range publicServices {
		for _, desc := range svc.descs {
			walked[string(desc.FullName())] = true
		}
	}
	files, err := filepath.Glob("../../../proto/cronmesh/*/*/*.proto")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	pkg, service := regexp.MustCompile(`(?m)^package ([\w.]+);`), regexp.MustCompile(`(?m)^service (\w+) \{`)
	declared := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range service.FindAllStringSubmatch(string(src), -1) {
			declared++
			name := pkg.FindStringSubmatch(string(src))[1] + "." + m[1]
			require.Truef(t, walked[name], "%s (%s) is not walked by the isolation matrix: add it to publicServices", name, file)
		}
	}
	require.Equal(t, len(walked), declared, "the matrix walks only declared services")
}

// rpc is one RPC of the mesh, callable with any request message.
type rpc struct {
	method protoreflect.MethodDescriptor
	url    string
}

// call sends req (nil: the empty request) with key and returns the answer.
// It goes through the descriptors rather than the generated clients so the
// matrix can call every RPC the same way.
func (r rpc) call(t *testing.T, key string, req proto.Message) (*dynamicpb.Message, error) {
	t.Helper()
	in := dynamicpb.NewMessage(r.method.Input())
	if req != nil {
		raw, err := proto.Marshal(req)
		require.NoError(t, err)
		require.NoError(t, proto.Unmarshal(raw, in))
	}
	procedure := fmt.Sprintf("/%s/%s", r.method.Parent().FullName(), r.method.Name())
	client := connect.NewClient[dynamicpb.Message, dynamicpb.Message](http.DefaultClient, r.url+procedure,
		connect.WithSchema(r.method), rpctest.Bearer(key),
		connect.WithResponseInitializer(func(_ connect.Spec, msg any) error {
			*msg.(*dynamicpb.Message) = *dynamicpb.NewMessage(r.method.Output())
			return nil
		}))
	resp, err := client.CallUnary(t.Context(), connect.NewRequest(in))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// TestIsolationMatrix walks every RPC of the five services, from their
// descriptors, against one mesh of real processes:
//
//   - tenant B's admin key, calling it with tenant A's ids and names, gets
//     NOT_FOUND or PERMISSION_DENIED, or for lists and creates an answer
//     that holds nothing of A; afterwards A's objects are as they were;
//   - a viewer, an editor and an admin key each get PERMISSION_DENIED from
//     exactly the RPCs above their role, through the services' real API key
//     middleware and role interceptor;
//   - each service's audit log holds its namespace's changes by key id, B's
//     attempts on A's objects in B's log and not in A's.
//
// The AuditService, which every service serves, is walked on each of them.
func TestIsolationMatrix(t *testing.T) {
	t.Parallel()
	mesh := meshtest.Start(t, bins, meshtest.Options{
		APIKeys: map[string]string{
			"tenant-a": tenantAKey, "tenant-b": tenantBKey,
			"roles": roleAdminKey, "roles:editor": roleEditKey, "roles:viewer": roleViewKey,
		},
		RetryTiers: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second},
	})
	cases := isolationCases()
	var rpcs []rpc
	walked := map[protoreflect.FullName]bool{}
	for _, svc := range publicServices {
		url := svc.url(mesh)
		for _, served := range append(slices.Clone(svc.descs), auditService) {
			for i := range served.Methods().Len() {
				md := served.Methods().Get(i)
				_, ok := cases[md.FullName()]
				require.Truef(t, ok, "%s has no row in the isolation matrix: add one to isolationCases", md.FullName())
				rpcs = append(rpcs, rpc{method: md, url: url})
				walked[md.FullName()] = true
			}
		}
	}
	require.Len(t, walked, len(cases), "every row of the matrix is an RPC of the services")

	a := seedTenantA(t, mesh)
	t.Run("CrossNamespace", func(t *testing.T) {
		for _, r := range rpcs {
			c := cases[r.method.FullName()]
			if c.operatorOnly {
				_, err := r.call(t, a.bManagedAdmin, nil)
				require.Equalf(t, connect.CodePermissionDenied, connect.CodeOf(err), "%s with tenant B's managed admin key: %v", r.method.FullName(), err)
				continue
			}
			var req proto.Message
			if c.foreign != nil {
				req = c.foreign(a)
			}
			resp, err := r.call(t, tenantBKey, req)
			if err != nil {
				code := connect.CodeOf(err)
				if c.foreign != nil && !(c.reference && code == connect.CodeInvalidArgument) {
					require.Containsf(t, []connect.Code{connect.CodeNotFound, connect.CodePermissionDenied}, code,
						"%s with tenant A's objects and B's key: %v", r.method.FullName(), err)
				}
				if c.reference && code == connect.CodeInvalidArgument {
					_, unknownErr := r.call(t, tenantBKey, c.foreign(a.unknown()))
					require.Equalf(t, unknownErr.Error(), err.Error(), "%s: A's object answers as one that does not exist", r.method.FullName())
				}
				for _, id := range a.ids() {
					require.NotContainsf(t, err.Error(), id, "%s: an error names A's object", r.method.FullName())
				}
				continue
			}
			require.Truef(t, c.foreign == nil || c.answers, "%s with tenant A's objects succeeded for B", r.method.FullName())
			text, err := protojson.Marshal(resp)
			require.NoError(t, err)
			for _, id := range a.ids() {
				require.NotContainsf(t, string(text), id, "%s answered B with A's object: %s", r.method.FullName(), text)
			}
			if r.method.FullName() == "cronmesh.history.v1.HistoryService.GetJobStats" {
				require.Zero(t, resp.Get(resp.Descriptor().Fields().ByName("runs")).Int(), "B sees no runs of A's job")
			}
			if r.method.FullName() == "cronmesh.registry.v1.KeyService.GetCallerIdentity" {
				require.Equal(t, "tenant-b", resp.Get(resp.Descriptor().Fields().ByName("namespace")).String(), "B's key is B's")
			}
			if r.method.FullName() == "cronmesh.dispatcher.v1.DispatchService.RedriveDeadLetters" {
				require.Zero(t, resp.Get(resp.Descriptor().Fields().ByName("redriven")).Int(), "B redrove none of A's dead letters")
			}
		}
		a.requireUntouched(t, mesh)
	})
	t.Run("AuditLog", func(t *testing.T) {
		// Each service's log holds its own namespace's changes, by key; B's
		// attempts on A's objects are in B's log, not A's.
		ownLog := func(url, key string) []*auditv1.AuditEvent {
			resp, err := auditv1connect.NewAuditServiceClient(http.DefaultClient, url, rpctest.Bearer(key)).
				ListAuditEvents(t.Context(), connect.NewRequest(&auditv1.ListAuditEventsRequest{PageSize: 1000}))
			require.NoError(t, err)
			return resp.Msg.GetEvents()
		}
		find := func(events []*auditv1.AuditEvent, procedure, objectID string) *auditv1.AuditEvent {
			for _, ev := range events {
				if ev.GetProcedure() == procedure && slices.Contains(ev.GetObjectIds(), objectID) {
					return ev
				}
			}
			return nil
		}
		created := find(ownLog(mesh.Registry.URL, tenantAKey), registryv1connect.JobServiceCreateJobProcedure, a.jobID)
		require.NotNil(t, created, "A's CreateJob is in the registry's log")
		require.Equal(t, a.keyID, created.GetKeyId())
		require.Equal(t, "ok", created.GetCode())
		rule := find(ownLog(mesh.Alerting.URL, tenantAKey), alertingv1connect.AlertServiceCreateRuleProcedure, a.ruleID)
		require.NotNil(t, rule, "A's CreateRule is in the alerting service's log")
		require.Equal(t, a.keyID, rule.GetKeyId())

		bLog := ownLog(mesh.Registry.URL, tenantBKey)
		attempt := find(bLog, registryv1connect.JobServiceDeleteJobProcedure, a.jobID)
		require.NotNil(t, attempt, "B's attempt to delete A's job is in B's log")
		require.Equal(t, apikey.ConfiguredKeyID(tenantBKey), attempt.GetKeyId())
		require.Equal(t, "not_found", attempt.GetCode())
		require.Nil(t, find(ownLog(mesh.Registry.URL, tenantAKey), registryv1connect.JobServiceDeleteJobProcedure, a.jobID),
			"B's attempt is not in A's log")
		purge := find(ownLog(mesh.Dispatcher.URL, tenantBKey), dispatcherv1connect.DispatchServicePurgeDeadLetterProcedure, a.deadLetterID)
		require.NotNil(t, purge, "the dispatcher keeps its own log")
		require.Equal(t, "not_found", purge.GetCode())
	})
	t.Run("Roles", func(t *testing.T) {
		keys := map[apikey.Role]string{apikey.RoleViewer: roleViewKey, apikey.RoleEditor: roleEditKey, apikey.RoleAdmin: roleAdminKey}
		for _, r := range rpcs {
			need := cases[r.method.FullName()].role
			for role, key := range keys {
				_, err := r.call(t, key, nil)
				allowed := roleRank(role) >= roleRank(need)
				if allowed {
					require.NotEqualf(t, connect.CodePermissionDenied, connect.CodeOf(err), "%s: %s may call it: %v", r.method.FullName(), role, err)
				} else {
					require.Equalf(t, connect.CodePermissionDenied, connect.CodeOf(err), "%s: %s may not call it (needs %s): %v", r.method.FullName(), role, need, err)
					require.Containsf(t, err.Error(), string(need), "%s: the refusal names the role needed", r.method.FullName())
				}
			}
		}
	})
}

// roleRank orders the roles, written out here rather than taken from
// libs/authz so the matrix checks the interceptor against an independent
// statement of the rules.
func roleRank(r apikey.Role) int {
	return map[apikey.Role]int{apikey.RoleViewer: 1, apikey.RoleEditor: 2, apikey.RoleAdmin: 3}[r]
}

// seedTenantA gives tenant A one of everything: a channel and a rule, and
// a one-time job whose target fails, so its single execution is recorded,
// dead-lettered (no retries) and opens an incident.
func seedTenantA(t *testing.T, mesh *meshrun.Mesh) *tenantA {
	t.Helper()
	ctx := t.Context()
	c := newClients(mesh, tenantAKey)
	a := &tenantA{
		label: fmt.Sprintf("m%d", time.Now().UnixNano()), requestID: fmt.Sprintf("matrix-%d", time.Now().UnixNano()),
		jobDisplayName: "tenant A's secret job", ruleName: "tenant A's secret rule", signingSecret: newSigningSecret(t),
		keyID: apikey.ConfiguredKeyID(tenantAKey),
	}
	hook := newRecorder(t, http.StatusNoContent)
	channel, err := c.alerts.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: &alertingv1.Channel{
		DisplayName: "tenant A's hook",
		Kind:        &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: hook.URL + "/alerts", SigningSecret: newSigningSecret(t)}},
	}}))
	require.NoError(t, err)
	a.channelID = channel.Msg.GetChannel().GetId()
	rule, err := c.alerts.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: &alertingv1.Rule{
		DisplayName: a.ruleName,
		Selector:    &alertingv1.JobSelector{Labels: map[string]string{"matrix": a.label}},
		Condition:   &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: 1}},
		ChannelIds:  []string{a.channelID},
	}}))
	require.NoError(t, err)
	a.ruleID = rule.Msg.GetRule().GetId()

	target := newRecorder(t, http.StatusInternalServerError)
	created, err := c.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{RequestId: a.requestID, Job: &registryv1.Job{
		DisplayName: a.jobDisplayName,
		Labels:      map[string]string{"matrix": a.label},
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: timestamppb.New(time.Now().Truncate(time.Second).Add(3 * time.Second))}},
		Target:      &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: target.URL + "/fail"}}},
		RetryPolicy: &registryv1.RetryPolicy{MaxRetries: proto32(0), InitialBackoff: durationpb.New(time.Second)},
	}}))
	require.NoError(t, err)
	a.jobID = created.Msg.GetJob().GetId()

	waitFor(t, 60*time.Second, "tenant A's dead letter", func() bool {
		resp, err := c.dispatch.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{JobId: a.jobID}))
		if err != nil || len(resp.Msg.GetDeadLetters()) == 0 {
			return false
		}
		a.deadLetterID = resp.Msg.GetDeadLetters()[0].GetId()
		a.executionID = resp.Msg.GetDeadLetters()[0].GetExecutionId()
		return true
	})
	waitFor(t, 30*time.Second, "tenant A's execution in the history", func() bool {
		resp, err := c.history.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{JobId: a.jobID}))
		return err == nil && len(resp.Msg.GetExecutions()) == 1
	})
	waitFor(t, 30*time.Second, "tenant A's incident", func() bool {
		resp, err := c.alerts.ListIncidents(ctx, connect.NewRequest(&alertingv1.ListIncidentsRequest{JobId: a.jobID}))
		if err != nil || len(resp.Msg.GetIncidents()) == 0 {
			return false
		}
		a.incidentID = resp.Msg.GetIncidents()[0].GetId()
		return true
	})
	mine, err := c.keys.CreateKey(ctx, connect.NewRequest(&registryv1.CreateKeyRequest{Name: "tenant A's key", Role: registryv1.KeyRole_KEY_ROLE_VIEWER}))
	require.NoError(t, err)
	a.managedKeyID = mine.Msg.GetKey().GetId()
	bAdmin, err := newClients(mesh, tenantBKey).keys.CreateKey(ctx, connect.NewRequest(&registryv1.CreateKeyRequest{Name: "tenant B's admin", Role: registryv1.KeyRole_KEY_ROLE_ADMIN}))
	require.NoError(t, err)
	a.bManagedAdmin = bAdmin.Msg.GetSecret()
	waitFor(t, 30*time.Second, "tenant B's managed key at the registry", func() bool {
		_, err := newClients(mesh, a.bManagedAdmin).keys.ListKeys(ctx, connect.NewRequest(&registryv1.ListKeysRequest{}))
		return err == nil
	})
	for _, id := range a.ids() {
		require.NotEmpty(t, id)
	}
	return a
}

// requireUntouched checks, with A's own key, that none of B's calls changed
// A's objects.
func (a *tenantA) requireUntouched(t *testing.T, mesh *meshrun.Mesh) {
	t.Helper()
	ctx := t.Context()
	c := newClients(mesh, tenantAKey)
	job, err := c.jobs.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: a.jobID}))
	require.NoError(t, err)
	require.Equal(t, a.jobDisplayName, job.Msg.GetJob().GetDisplayName())
	require.False(t, job.Msg.GetJob().GetPaused())
	rule, err := c.alerts.GetRule(ctx, connect.NewRequest(&alertingv1.GetRuleRequest{Id: a.ruleID}))
	require.NoError(t, err)
	require.Equal(t, a.ruleName, rule.Msg.GetRule().GetDisplayName())
	channel, err := c.alerts.GetChannel(ctx, connect.NewRequest(&alertingv1.GetChannelRequest{Id: a.channelID}))
	require.NoError(t, err)
	require.Equal(t, "tenant A's hook", channel.Msg.GetChannel().GetDisplayName())
	letters, err := c.dispatch.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{JobId: a.jobID}))
	require.NoError(t, err)
	require.Len(t, letters.Msg.GetDeadLetters(), 1, "A's dead letter is neither redriven nor purged")
	incident, err := c.alerts.GetIncident(ctx, connect.NewRequest(&alertingv1.GetIncidentRequest{Id: a.incidentID}))
	require.NoError(t, err)
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_OPEN, incident.Msg.GetIncident().GetState(), "A's incident is not acknowledged")
	slots, err := c.trigger.ListSlots(ctx, connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: a.jobID}))
	require.NoError(t, err)
	require.Len(t, slots.Msg.GetSlots(), 1, "no manual run or backfill of A's job")
	require.False(t, strings.Contains(job.Msg.GetJob().GetTarget().GetHttp().GetUrl(), "127.0.0.1:9"), "A's target is A's")
	keys, err := c.keys.ListKeys(ctx, connect.NewRequest(&registryv1.ListKeysRequest{}))
	require.NoError(t, err)
	require.Len(t, keys.Msg.GetKeys(), 1)
	require.Equal(t, a.managedKeyID, keys.Msg.GetKeys()[0].GetId())
	require.Nil(t, keys.Msg.GetKeys()[0].GetRevokeTime(), "A's key is not revoked")
	require.True(t, proto.Equal(keys.Msg.GetKeys()[0].GetCreateTime(), keys.Msg.GetKeys()[0].GetRotateTime()), "A's key is not rotated")
}
