package authz_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/authn"
	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	auditv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/authz"
)

// publicFiles are the files of the five public APIs, and of the audit log
// every service serves.
var publicFiles = []protoreflect.FileDescriptor{
	auditv1.File_cronmesh_audit_v1_audit_service_proto,
	registryv1.File_cronmesh_registry_v1_job_service_proto,
	registryv1.File_cronmesh_registry_v1_key_service_proto,
	triggerv1.File_cronmesh_trigger_v1_trigger_service_proto,
	dispatcherv1.File_cronmesh_dispatcher_v1_dispatch_service_proto,
	historyv1.File_cronmesh_history_v1_history_service_proto,
	alertingv1.File_cronmesh_alerting_v1_alert_service_proto,
}

// adminOnly are the cluster-level RPCs: the only ones a namespace's editor
// may not call. Adding one is a decision, so it is spelled out here too.
var adminOnly = map[protoreflect.FullName]bool{
	"cronmesh.trigger.v1.TriggerService.GetRing": true,
	// The audit log names the namespace's keys, which are admin business.
	"cronmesh.audit.v1.AuditService.ListAuditEvents": true,
	// Keys are managed by the namespace's admins (ADR 0009).
	"cronmesh.registry.v1.KeyService.CreateKey":      true,
	"cronmesh.registry.v1.KeyService.ListKeys":       true,
	"cronmesh.registry.v1.KeyService.RotateKey":      true,
	"cronmesh.registry.v1.KeyService.RevokeKey":      true,
	"cronmesh.registry.v1.KeyService.ListKeyDigests": true,
}

// TestEveryRPCStatesItsRole is what makes a forgotten role a test failure:
// every RPC of the public APIs states a required role, reads are open to
// viewers and changes never are, and exactly the cluster-level RPCs need
// admin.
func TestEveryRPCStatesItsRole(t *testing.T) {
	t.Parallel()
	seen := 0
	for _, file := range publicFiles {
		for i := range file.Services().Len() {
			svc := file.Services().Get(i)
			for j := range svc.Methods().Len() {
				md := svc.Methods().Get(j)
				seen++
				role, ok := authz.RequiredRole(md)
				require.Truef(t, ok, "%s states no (cronmesh.auth.v1.required_role)", md.FullName())
				if adminOnly[md.FullName()] {
					require.Equalf(t, apikey.RoleAdmin, role, "%s is cluster-level", md.FullName())
					continue
				}
				read := md.Options().(*descriptorpb.MethodOptions).GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
				require.Equal(t, !read, authz.Mutating(md))
				if read {
					require.Equalf(t, apikey.RoleViewer, role, "%s reads (NO_SIDE_EFFECTS): viewers may call it", md.FullName())
				} else {
					require.Equalf(t, apikey.RoleEditor, role, "%s changes state: editors, not viewers", md.FullName())
				}
			}
		}
	}
	require.Greater(t, seen, 30, "the five services' RPCs were walked")
}

// TestEveryServiceIsChecked: every service declared under proto/ is among
// publicFiles, so a new service's RPCs are checked too.
func TestEveryServiceIsChecked(t *testing.T) {
	t.Parallel()
	checked := map[string]bool{}
	for _, file := range publicFiles {
		for i := range file.Services().Len() {
			checked[string(file.Services().Get(i).FullName())] = true
		}
	}
	files, err := filepath.Glob("../../proto/cronmesh/*/*/*.proto")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	pkg, service := regexp.MustCompile(`(?m)^package ([\w.]+);`), regexp.MustCompile(`(?m)^service (\w+) \{`)
	for _, file := range files {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range service.FindAllStringSubmatch(string(src), -1) {
			name := pkg.FindStringSubmatch(string(src))[1] + "." + m[1]
			require.Truef(t, checked[name], "%s (%s): add its file to publicFiles", name, file)
		}
	}
}

func TestAllows(t *testing.T) {
	t.Parallel()
	roles := []apikey.Role{apikey.RoleViewer, apikey.RoleEditor, apikey.RoleAdmin}
	for i, has := range roles {
		for j, need := range roles {
			require.Equal(t, i >= j, authz.Allows(has, need), "%s calling a %s RPC", has, need)
		}
		require.False(t, authz.Allows(has, ""), "an RPC without a role is open to nobody")
	}
	require.False(t, authz.Allows("", apikey.RoleViewer))
	require.False(t, authz.Allows("owner", apikey.RoleViewer), "an unknown role is allowed nothing")
}

// ring is a TriggerService whose every RPC succeeds, so a refusal can only
// come from the interceptor.
type ring struct {
	triggerv1connect.UnimplementedTriggerServiceHandler
}

func (ring) GetRing(context.Context, *connect.Request[triggerv1.GetRingRequest]) (*connect.Response[triggerv1.GetRingResponse], error) {
	return connect.NewResponse(&triggerv1.GetRingResponse{}), nil
}

func (ring) ListSlots(context.Context, *connect.Request[triggerv1.ListSlotsRequest]) (*connect.Response[triggerv1.ListSlotsResponse], error) {
	return connect.NewResponse(&triggerv1.ListSlotsResponse{}), nil
}

func (ring) BackfillJob(context.Context, *connect.Request[triggerv1.BackfillJobRequest]) (*connect.Response[triggerv1.BackfillJobResponse], error) {
	return connect.NewResponse(&triggerv1.BackfillJobResponse{}), nil
}

// roleHeader is how the test picks the caller's role: a stand-in for the
// API key middleware, which is what sets the principal in the services.
const roleHeader = "Test-Role"

func serve(t *testing.T, opts ...connect.ClientOption) triggerv1connect.TriggerServiceClient {
	t.Helper()
	return serveRecording(t, nil, append([]connect.ClientOption{connect.WithGRPC()}, opts...)...)
}

// serveRecording serves the ring behind the interceptor, noting each HTTP
// method in methods when it is not nil.
func serveRecording(t *testing.T, methods *[]string, opts ...connect.ClientOption) triggerv1connect.TriggerServiceClient {
	t.Helper()
	path, handler := triggerv1connect.NewTriggerServiceHandler(ring{}, connect.WithInterceptors(authz.NewInterceptor()))
	mux := http.NewServeMux()
	mux.Handle(path, authn.NewMiddleware(func(_ context.Context, r *http.Request) (any, error) {
		if methods != nil {
			*methods = append(*methods, r.Method)
		}
		role := r.Header.Get(roleHeader)
		if role == "" {
			return nil, nil // no principal: the interceptor must refuse
		}
		return apikey.Principal{Namespace: "alpha", KeyID: "k1", Role: apikey.Role(role)}, nil
	}).Wrap(handler))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return triggerv1connect.NewTriggerServiceClient(srv.Client(), srv.URL, opts...)
}

// TestReadsOverGET: reads are NO_SIDE_EFFECTS, so Connect clients may send
// them as HTTP GET; the role check applies to them the same.
func TestReadsOverGET(t *testing.T) {
	t.Parallel()
	var methods []string
	client := serveRecording(t, &methods, connect.WithHTTPGet())
	require.NoError(t, call(t.Context(), client, "viewer", "ListSlots"))
	err := call(t.Context(), client, "editor", "GetRing")
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
	require.NoError(t, call(t.Context(), client, "admin", "GetRing"))
	require.Equal(t, []string{http.MethodGet, http.MethodGet, http.MethodGet}, methods)
}

func call(ctx context.Context, client triggerv1connect.TriggerServiceClient, role string, rpc string) error {
	set := func(h http.Header) {
		if role != "" {
			h.Set(roleHeader, role)
		}
	}
	switch rpc {
	case "GetRing":
		req := connect.NewRequest(&triggerv1.GetRingRequest{})
		set(req.Header())
		_, err := client.GetRing(ctx, req)
		return err
	case "ListSlots":
		req := connect.NewRequest(&triggerv1.ListSlotsRequest{})
		set(req.Header())
		_, err := client.ListSlots(ctx, req)
		return err
	default:
		req := connect.NewRequest(&triggerv1.BackfillJobRequest{})
		set(req.Header())
		_, err := client.BackfillJob(ctx, req)
		return err
	}
}

func TestInterceptorEnforcesRoles(t *testing.T) {
	t.Parallel()
	client := serve(t)
	need := map[string]string{"GetRing": "admin", "ListSlots": "viewer", "BackfillJob": "editor"}
	for _, role := range []apikey.Role{apikey.RoleViewer, apikey.RoleEditor, apikey.RoleAdmin, "owner"} {
		for rpc, needed := range need {
			err := call(t.Context(), client, string(role), rpc)
			if authz.Allows(role, apikey.Role(needed)) {
				require.NoErrorf(t, err, "%s calling %s", role, rpc)
				continue
			}
			require.Equalf(t, connect.CodePermissionDenied, connect.CodeOf(err), "%s calling %s: %v", role, rpc, err)
			require.Contains(t, err.Error(), "needs an API key with the "+needed+" role")
			require.False(t, strings.Contains(err.Error(), "alpha") || strings.Contains(err.Error(), "k1"),
				"a refusal names the needed role and nothing of the caller: %v", err)
		}
	}
	err := call(t.Context(), client, "", "ListSlots")
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "no principal, no call: %v", err)
}

// TestUnknownProcedureIsRefused: a handler whose procedure is not among the
// descriptors (no schema, no role) is refused to an admin too.
func TestUnknownProcedureIsRefused(t *testing.T) {
	t.Parallel()
	ctx := authn.SetInfo(t.Context(), apikey.Principal{Namespace: "alpha", KeyID: "k1", Role: apikey.RoleAdmin})
	err := authz.Check(ctx, connect.Spec{Procedure: "/cronmesh.trigger.v1.TriggerService/DropRing"})
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	require.NoError(t, authz.Check(ctx, connect.Spec{Procedure: triggerv1connect.TriggerServiceGetRingProcedure}),
		"a procedure without a schema is looked up among the descriptors")
}
