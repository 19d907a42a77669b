package authz

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	authv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/auth/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
)

// rank orders the roles: a key may call an RPC when its role's rank is at
// least the required one's. An unknown role ranks below every real one.
func rank(r apikey.Role) int {
	switch r {
	case apikey.RoleViewer:
		return 1
	case apikey.RoleEditor:
		return 2
	case apikey.RoleAdmin:
		return 3
	default:
		return 0
	}
}

// Allows reports whether a key of role has may call an RPC that requires
// role need. An empty or unknown role is allowed nothing.
func Allows(has, need apikey.Role) bool {
	return rank(need) > 0 && rank(has) >= rank(need)
}

// RequiredRole returns the role the RPC md requires, from its
// cronmesh.auth.v1.required_role option, and false when it states none (or
// ROLE_UNSPECIFIED): such an RPC is refused to every key.
func RequiredRole(md protoreflect.MethodDescriptor) (apikey.Role, bool) {
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil {
		return "", false
	}
	switch proto.GetExtension(opts, authv1.E_RequiredRole).(authv1.Role) {
	case authv1.Role_ROLE_VIEWER:
		return apikey.RoleViewer, true
	case authv1.Role_ROLE_EDITOR:
		return apikey.RoleEditor, true
	case authv1.Role_ROLE_ADMIN:
		return apikey.RoleAdmin, true
	default:
		return "", false
	}
}

// Mutating reports whether the RPC md may change state: every RPC not
// declared idempotency_level = NO_SIDE_EFFECTS. Mutating RPCs are the ones
// audited.
func Mutating(md protoreflect.MethodDescriptor) bool {
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	return !ok || opts.GetIdempotencyLevel() != descriptorpb.MethodOptions_NO_SIDE_EFFECTS
}

// Method returns the descriptor of the RPC a Connect call is for: the
// schema the generated handler attached to spec, or else the procedure
// ("/package.Service/Method") looked up among the linked-in descriptors.
func Method(spec connect.Spec) (protoreflect.MethodDescriptor, bool) {
	if md, ok := spec.Schema.(protoreflect.MethodDescriptor); ok {
		return md, true
	}
	name := strings.ReplaceAll(strings.TrimPrefix(spec.Procedure, "/"), "/", ".")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, false
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	return md, ok
}

// Check decides a call: nil when the authenticated caller of ctx may call
// the RPC of spec; Unauthenticated when ctx carries no principal (the
// authentication middleware is missing: a wiring bug, refused rather than
// guessed); PermissionDenied naming the needed role when the caller's role
// is below it, or when the RPC is unknown or states no role.
func Check(ctx context.Context, spec connect.Spec) error {
	p, ok := apikey.PrincipalFrom(ctx)
	if !ok {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("missing API key"))
	}
	md, ok := Method(spec)
	if !ok {
		return connect.NewError(connect.CodePermissionDenied, errors.New("this call is not open to any API key"))
	}
	need, ok := RequiredRole(md)
	if !ok {
		return connect.NewError(connect.CodePermissionDenied, errors.New("this call is not open to any API key"))
	}
	if !Allows(p.Role, need) {
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("this call needs an API key with the %s role", need))
	}
	return nil
}

// Interceptor is the Connect handler interceptor that applies Check before
// every call; client calls pass untouched. Every service installs it
// through server.HandlerOptions, after authentication.
type Interceptor struct{}

// NewInterceptor returns the enforcing interceptor.
func NewInterceptor() *Interceptor { return &Interceptor{} }

// WrapUnary implements connect.Interceptor.
func (*Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		if err := Check(ctx, req.Spec()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor; clients are not checked.
func (*Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor: a stream is checked
// before the handler sees it.
func (*Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := Check(ctx, conn.Spec()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
