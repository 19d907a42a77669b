package api

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
	"github.com/cronmesh/cronmesh/services/registry/internal/validate"
)

// Limits of the KeyService.
const (
	// MaxKeyName bounds a key's name, in characters.
	MaxKeyName = 128
	// DefaultRotationGrace is how long the previous secrets of a rotated key
	// stay valid when the request does not say: a day to roll the new one
	// out to every client.
	DefaultRotationGrace = 24 * time.Hour
	// MaxRotationGrace bounds the grace period: a rotation must end the old
	// secret within a week.
	MaxRotationGrace = 7 * 24 * time.Hour
)

// KeyHandler implements registryv1connect.KeyServiceHandler.
type KeyHandler struct {
	store  *store.Store
	logger *slog.Logger
	// changed is called after a change to the keys, so the registry's own
	// key ring need not wait for its next refresh.
	changed func(context.Context)
}

var _ registryv1connect.KeyServiceHandler = (*KeyHandler)(nil)

// NewKeyHandler returns a KeyService handler backed by s; changed (optional)
// is called after every change to the keys.
func NewKeyHandler(s *store.Store, logger *slog.Logger, changed func(context.Context)) *KeyHandler {
	if changed == nil {
		changed = func(context.Context) {}
	}
	return &KeyHandler{store: s, logger: logger, changed: changed}
}

// admin returns the caller, who must hold an admin key: managing keys is
// the admin role's privilege.
func admin(ctx context.Context) (apikey.Principal, error) {
	p, ok := apikey.PrincipalFrom(ctx)
	if !ok {
		return apikey.Principal{}, connect.NewError(connect.CodeUnauthenticated, errors.New("no authenticated namespace"))
	}
	if p.Role != apikey.RoleAdmin {
		return apikey.Principal{}, connect.NewError(connect.CodePermissionDenied, errors.New("managing API keys needs a key with role admin"))
	}
	return p, nil
}

// CreateKey implements KeyService.CreateKey.
func (h *KeyHandler) CreateKey(ctx context.Context, req *connect.Request[registryv1.CreateKeyRequest]) (*connect.Response[registryv1.CreateKeyResponse], error) {
	caller, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	name := req.Msg.GetName()
	if n := utf8.RuneCountInString(name); n == 0 || n > MaxKeyName || !utf8.ValidString(name) {
		v.Add("name", "must be 1 to %d characters of valid UTF-8", MaxKeyName)
	}
	role, ok := keyring.RoleFromProto(req.Msg.GetRole())
	if !ok {
		v.Add("role", "must be KEY_ROLE_ADMIN, KEY_ROLE_EDITOR or KEY_ROLE_VIEWER")
	}
	validate.RequestID(v, "request_id", req.Msg.GetRequestId())
	if !v.Empty() {
		return nil, v.Err()
	}
	secret, digest := apikey.NewSecret()
	key, created, err := h.store.CreateKey(ctx, store.NewKey{
		Namespace: caller.Namespace, Name: name, Role: role,
		RequestID: req.Msg.GetRequestId(), CreatedBy: caller.KeyID, Digest: digest,
	})
	if err != nil {
		return nil, h.toConnect(ctx, "CreateKey", err)
	}
	resp := &registryv1.CreateKeyResponse{Key: key}
	if created {
		resp.Secret = secret
		h.changed(ctx)
		h.logger.InfoContext(ctx, "API key created", slog.String("namespace", key.Namespace),
			slog.String("key_id", key.Id), slog.String("role", string(role)), slog.String("by", caller.KeyID))
	}
	return connect.NewResponse(resp), nil
}

// ListKeys implements KeyService.ListKeys.
func (h *KeyHandler) ListKeys(ctx context.Context, req *connect.Request[registryv1.ListKeysRequest]) (*connect.Response[registryv1.ListKeysResponse], error) {
	caller, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	size := int(req.Msg.GetPageSize())
	if size < 0 {
		v.Add("page_size", "must not be negative")
	}
	after, ok := decodePageToken(req.Msg.GetPageToken())
	if !ok {
		v.Add("page_token", "is not a token returned by ListKeys")
	}
	if !v.Empty() {
		return nil, v.Err()
	}
	keys, next, err := h.store.ListKeys(ctx, caller.Namespace, store.KeyFilter{
		PageSize: min(cmp.Or(size, DefaultPageSize), MaxPageSize), After: after, ShowRevoked: req.Msg.GetShowRevoked(),
	})
	if err != nil {
		return nil, h.toConnect(ctx, "ListKeys", err)
	}
	return connect.NewResponse(&registryv1.ListKeysResponse{Keys: keys, NextPageToken: encodePageToken(next)}), nil
}

// RotateKey implements KeyService.RotateKey.
func (h *KeyHandler) RotateKey(ctx context.Context, req *connect.Request[registryv1.RotateKeyRequest]) (*connect.Response[registryv1.RotateKeyResponse], error) {
	caller, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	requireID(v, req.Msg.GetId())
	grace := DefaultRotationGrace
	if g := req.Msg.GetGracePeriod(); g != nil {
		if err := g.CheckValid(); err != nil {
			v.Add("grace_period", "is not a valid duration")
		} else if grace = g.AsDuration(); grace < 0 || grace > MaxRotationGrace {
			v.Add("grace_period", "must be between 0 and %s", MaxRotationGrace)
		}
	}
	if !v.Empty() {
		return nil, v.Err()
	}
	secret, digest := apikey.NewSecret()
	key, err := h.store.RotateKey(ctx, caller.Namespace, req.Msg.GetId(), digest, grace)
	if err != nil {
		return nil, h.toConnect(ctx, "RotateKey", err)
	}
	h.changed(ctx)
	h.logger.InfoContext(ctx, "API key rotated", slog.String("namespace", key.Namespace),
		slog.String("key_id", key.Id), slog.Duration("grace", grace), slog.String("by", caller.KeyID))
	return connect.NewResponse(&registryv1.RotateKeyResponse{Key: key, Secret: secret}), nil
}

// RevokeKey implements KeyService.RevokeKey.
func (h *KeyHandler) RevokeKey(ctx context.Context, req *connect.Request[registryv1.RevokeKeyRequest]) (*connect.Response[registryv1.RevokeKeyResponse], error) {
	caller, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	requireID(v, req.Msg.GetId())
	if !v.Empty() {
		return nil, v.Err()
	}
	key, err := h.store.RevokeKey(ctx, caller.Namespace, req.Msg.GetId())
	if err != nil {
		return nil, h.toConnect(ctx, "RevokeKey", err)
	}
	h.changed(ctx)
	h.logger.InfoContext(ctx, "API key revoked", slog.String("namespace", key.Namespace),
		slog.String("key_id", key.Id), slog.String("by", caller.KeyID))
	return connect.NewResponse(&registryv1.RevokeKeyResponse{Key: key}), nil
}

// GetCallerIdentity implements KeyService.GetCallerIdentity: the calling
// key as the services authenticated it, from the request's principal alone
// (no store read, so it answers even while the database is away, and says
// exactly what the other services will let the key do).
func (h *KeyHandler) GetCallerIdentity(ctx context.Context, _ *connect.Request[registryv1.GetCallerIdentityRequest]) (*connect.Response[registryv1.GetCallerIdentityResponse], error) {
	p, ok := apikey.PrincipalFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no authenticated namespace"))
	}
	return connect.NewResponse(&registryv1.GetCallerIdentityResponse{
		Namespace: p.Namespace, KeyId: p.KeyID, Role: keyring.RoleToProto(p.Role), Configured: apikey.IsConfiguredKeyID(p.KeyID),
	}), nil
}

// ListKeyDigests implements KeyService.ListKeyDigests. It spans every
// namespace, so only a configured key may call it: such a key is the
// operator's (it is in every service's configuration), while a managed
// admin key is a tenant's.
func (h *KeyHandler) ListKeyDigests(ctx context.Context, req *connect.Request[registryv1.ListKeyDigestsRequest]) (*connect.Response[registryv1.ListKeyDigestsResponse], error) {
	caller, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	if !apikey.IsConfiguredKeyID(caller.KeyID) {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("ListKeyDigests needs a key given in the services' configuration"))
	}
	resp, err := h.store.KeyDigests(ctx, req.Msg.GetKnownRevision())
	if err != nil {
		return nil, h.toConnect(ctx, "ListKeyDigests", err)
	}
	return connect.NewResponse(resp), nil
}

func requireID(v *rpcerr.Violations, id string) {
	if id == "" {
		v.Add("id", "is required")
	}
}

func (h *KeyHandler) toConnect(ctx context.Context, procedure string, err error) error {
	switch {
	case errors.Is(err, store.ErrKeyNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrKeyNotFound)
	case errors.Is(err, store.ErrKeyNameTaken):
		return connect.NewError(connect.CodeAlreadyExists, store.ErrKeyNameTaken)
	case errors.Is(err, store.ErrKeyRevoked):
		return connect.NewError(connect.CodeFailedPrecondition, store.ErrKeyRevoked)
	case errors.Is(err, store.ErrTooManyKeys):
		return connect.NewError(connect.CodeResourceExhausted, store.ErrTooManyKeys)
	case errors.Is(err, store.ErrTooManySecrets):
		return connect.NewError(connect.CodeResourceExhausted, store.ErrTooManySecrets)
	default:
		return rpcerr.Infrastructure(ctx, h.logger, procedure, "the key store", err)
	}
}
