package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	auditv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1/auditv1connect"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/registry/internal/app"
)

// logBuffer collects a registry's logs, to prove no secret reaches them.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// keyRegistry is a registry whose logs (debug and up) are kept, and which a
// test may stop early.
type keyRegistry struct {
	baseURL string
	logs    *logBuffer
	stop    func()
}

func startKeyRegistry(t *testing.T) *keyRegistry {
	t.Helper()
	_, schema := pgtest.New(t)
	cfg := app.Config{
		Common: config.Common{
			Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL(),
			LogLevel: "debug", ShutdownTimeout: 5 * time.Second,
		},
		APIKeys:            config.StringList{"alpha=" + keyAlpha, "beta=" + keyBeta},
		Schema:             schema,
		Exchange:           amqptest.UniqueName(t, "cronmesh.jobs"),
		OutboxLanes:        2,
		ExecutionsExchange: amqptest.UniqueName(t, "cronmesh.executions"),
		ExecutionsQueue:    amqptest.UniqueName(t, "cronmesh.registry.executions"),
		Keys:               keyring.Config{Refresh: 50 * time.Millisecond},
	}
	amqptest.DeleteOnCleanup(t, []string{cfg.ExecutionsQueue}, []string{cfg.ExecutionsExchange, cfg.Exchange})
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, logger)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Server().Ready():
	case err := <-done:
		t.Fatalf("registry stopped before serving: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return &keyRegistry{baseURL: "http://" + a.Server().Addr(), logs: logs, stop: stop}
}

func (r *keyRegistry) keys(secret string, opts ...connect.ClientOption) registryv1connect.KeyServiceClient {
	opts = append(opts, connect.WithInterceptors(rpctest.BearerInterceptor(secret)))
	return registryv1connect.NewKeyServiceClient(rpctest.H2CClient(), r.baseURL, opts...)
}

func (r *keyRegistry) jobs(secret string) registryv1connect.JobServiceClient {
	return registryv1connect.NewJobServiceClient(rpctest.H2CClient(), r.baseURL, connect.WithInterceptors(rpctest.BearerInterceptor(secret)))
}

func createKey(t *testing.T, c registryv1connect.KeyServiceClient, name string, role registryv1.KeyRole) (*registryv1.Key, string) {
	t.Helper()
	resp, err := c.CreateKey(context.Background(), connect.NewRequest(&registryv1.CreateKeyRequest{Name: name, Role: role}))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(resp.Msg.Secret, apikey.SecretPrefix), "a recognisable secret")
	require.GreaterOrEqual(t, len(resp.Msg.Secret), 40)
	return resp.Msg.Key, resp.Msg.Secret
}

// canListJobs reports whether secret authenticates at the registry.
func canListJobs(t *testing.T, r *keyRegistry, secret string) bool {
	t.Helper()
	_, err := r.jobs(secret).ListJobs(context.Background(), connect.NewRequest(&registryv1.ListJobsRequest{}))
	if err == nil {
		return true
	}
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), err.Error())
	return false
}

func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	r := startKeyRegistry(t)
	ctx := context.Background()
	for _, proto := range rpctest.Protocols() {
		t.Run(proto.Name, func(t *testing.T) {
			bootstrap := r.keys(keyAlpha, proto.Opts...)
			admin, adminSecret := createKey(t, bootstrap, "ci admin "+proto.Name, registryv1.KeyRole_KEY_ROLE_ADMIN)
			require.Equal(t, "alpha", admin.Namespace)
			require.Equal(t, apikey.ConfiguredKeyID(keyAlpha), admin.CreatedBy)
			require.Equal(t, registryv1.KeyRole_KEY_ROLE_ADMIN, admin.Role)

			// A managed admin key manages keys itself.
			viewer, viewerSecret := createKey(t, r.keys(adminSecret, proto.Opts...), "dashboard "+proto.Name, registryv1.KeyRole_KEY_ROLE_VIEWER)
			require.Equal(t, admin.Id, viewer.CreatedBy)
			editor, editorSecret := createKey(t, bootstrap, "deployer "+proto.Name, registryv1.KeyRole_KEY_ROLE_EDITOR)
			for _, secret := range []string{adminSecret, viewerSecret, editorSecret} {
				require.True(t, canListJobs(t, r, secret), "a new key works at once on the registry")
			}

			// Only admins manage keys.
			for _, secret := range []string{viewerSecret, editorSecret} {
				_, err := r.keys(secret, proto.Opts...).ListKeys(ctx, connect.NewRequest(&registryv1.ListKeysRequest{}))
				rpctest.RequireCode(t, err, connect.CodePermissionDenied)
				_, err = r.keys(secret, proto.Opts...).CreateKey(ctx, connect.NewRequest(&registryv1.CreateKeyRequest{Name: "x", Role: registryv1.KeyRole_KEY_ROLE_ADMIN}))
				rpctest.RequireCode(t, err, connect.CodePermissionDenied)
			}

			list, err := bootstrap.ListKeys(ctx, connect.NewRequest(&registryv1.ListKeysRequest{}))
			require.NoError(t, err)
			ids := map[string]bool{}
			for _, k := range list.Msg.Keys {
				ids[k.Id] = true
				require.Equal(t, "alpha", k.Namespace)
			}
			require.True(t, ids[admin.Id] && ids[viewer.Id] && ids[editor.Id])
			listed, err := protojson.Marshal(list.Msg)
			require.NoError(t, err)
			for _, secret := range []string{adminSecret, viewerSecret, editorSecret} {
				require.NotContains(t, string(listed), secret, "ListKeys never shows a secret")
			}

			// Another namespace sees none of them, and cannot touch them.
			other, err := r.keys(keyBeta, proto.Opts...).ListKeys(ctx, connect.NewRequest(&registryv1.ListKeysRequest{}))
			require.NoError(t, err)
			for _, k := range other.Msg.Keys {
				require.False(t, ids[k.Id], "beta lists alpha's key %s", k.Id)
			}
			_, err = r.keys(keyBeta, proto.Opts...).RevokeKey(ctx, connect.NewRequest(&registryv1.RevokeKeyRequest{Id: viewer.Id}))
			rpctest.RequireCode(t, err, connect.CodeNotFound)
			_, err = r.keys(keyBeta, proto.Opts...).RotateKey(ctx, connect.NewRequest(&registryv1.RotateKeyRequest{Id: viewer.Id}))
			rpctest.RequireCode(t, err, connect.CodeNotFound)

			// Revocation works at once on the registry, and is idempotent.
			revoked, err := bootstrap.RevokeKey(ctx, connect.NewRequest(&registryv1.RevokeKeyRequest{Id: viewer.Id}))
			require.NoError(t, err)
			require.NotNil(t, revoked.Msg.Key.RevokeTime)
			require.False(t, canListJobs(t, r, viewerSecret))
			again, err := bootstrap.RevokeKey(ctx, connect.NewRequest(&registryv1.RevokeKeyRequest{Id: viewer.Id}))
			require.NoError(t, err)
			require.Equal(t, revoked.Msg.Key.RevokeTime.AsTime(), again.Msg.Key.RevokeTime.AsTime())
			_, err = bootstrap.RotateKey(ctx, connect.NewRequest(&registryv1.RotateKeyRequest{Id: viewer.Id}))
			rpctest.RequireCode(t, err, connect.CodeFailedPrecondition)

			active, err := bootstrap.ListKeys(ctx, connect.NewRequest(&registryv1.ListKeysRequest{}))
			require.NoError(t, err)
			for _, k := range active.Msg.Keys {
				require.NotEqual(t, viewer.Id, k.Id, "revoked keys are listed only on request")
			}
			all, err := bootstrap.ListKeys(ctx, connect.NewRequest(&registryv1.ListKeysRequest{ShowRevoked: true}))
			require.NoError(t, err)
			require.Greater(t, len(all.Msg.Keys), len(active.Msg.Keys))

			// The name of a revoked key is free again; an unrevoked one's is not.
			createKey(t, bootstrap, "dashboard "+proto.Name, registryv1.KeyRole_KEY_ROLE_VIEWER)
			_, err = bootstrap.CreateKey(ctx, connect.NewRequest(&registryv1.CreateKeyRequest{Name: "deployer " + proto.Name, Role: registryv1.KeyRole_KEY_ROLE_VIEWER}))
			rpctest.RequireCode(t, err, connect.CodeAlreadyExists)
		})
	}
	for _, secret := range []string{keyAlpha, keyBeta} {
		require.NotContains(t, r.logs.String(), secret)
	}
	require.NotContains(t, r.logs.String(), apikey.SecretPrefix, "no issued secret is ever logged")
}

func TestKeyRotationGrace(t *testing.T) {
	t.Parallel()
	r := startKeyRegistry(t)
	ctx := context.Background()
	bootstrap := r.keys(keyAlpha)
	key, first := createKey(t, bootstrap, "rotated", registryv1.KeyRole_KEY_ROLE_EDITOR)

	rotated, err := bootstrap.RotateKey(ctx, connect.NewRequest(&registryv1.RotateKeyRequest{Id: key.Id}))
	require.NoError(t, err)
	second := rotated.Msg.Secret
	require.NotEqual(t, first, second)
	require.Equal(t, key.Id, rotated.Msg.Key.Id, "a rotation keeps the key's id")
	end := rotated.Msg.Key.PreviousSecretExpireTime.AsTime()
	require.WithinDuration(t, time.Now().Add(24*time.Hour), end, time.Minute, "the default grace period is 24 h")
	require.True(t, canListJobs(t, r, first), "the previous secret works during the grace period")
	require.True(t, canListJobs(t, r, second))

	// A zero grace period ends the previous secrets at once.
	third, err := bootstrap.RotateKey(ctx, connect.NewRequest(&registryv1.RotateKeyRequest{Id: key.Id, GracePeriod: durationpb.New(0)}))
	require.NoError(t, err)
	require.Nil(t, third.Msg.Key.PreviousSecretExpireTime)
	require.False(t, canListJobs(t, r, first))
	require.False(t, canListJobs(t, r, second))
	require.True(t, canListJobs(t, r, third.Msg.Secret))

	// A short grace period: both valid until its end, then only the new.
	fourth, err := bootstrap.RotateKey(ctx, connect.NewRequest(&registryv1.RotateKeyRequest{Id: key.Id, GracePeriod: durationpb.New(300 * time.Millisecond)}))
	require.NoError(t, err)
	end = fourth.Msg.Key.PreviousSecretExpireTime.AsTime()
	if time.Now().Before(end) {
		// Only meaningful when the call came back before the end.
		ok := canListJobs(t, r, third.Msg.Secret)
		require.True(t, ok || !time.Now().Before(end), "the previous secret is refused before its end")
	}
	require.Eventually(t, func() bool { return !canListJobs(t, r, third.Msg.Secret) }, 5*time.Second, 20*time.Millisecond)
	require.False(t, time.Now().Before(end), "refused only from the end of the grace period")
	require.True(t, canListJobs(t, r, fourth.Msg.Secret))

	for name, req := range map[string]*registryv1.RotateKeyRequest{
		"grace_period": {Id: key.Id, GracePeriod: durationpb.New(8 * 24 * time.Hour)},
		"id":           {},
	} {
		_, err := bootstrap.RotateKey(ctx, connect.NewRequest(req))
		rpctest.RequireCode(t, err, connect.CodeInvalidArgument)
		require.Contains(t, err.Error(), name)
	}
	_, err = bootstrap.RotateKey(ctx, connect.NewRequest(&registryv1.RotateKeyRequest{Id: "not-a-uuid"}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	require.NotContains(t, r.logs.String(), apikey.SecretPrefix)
}

func TestCreateKeyValidationAndReplay(t *testing.T) {
	t.Parallel()
	r := startKeyRegistry(t)
	ctx := context.Background()
	bootstrap := r.keys(keyAlpha)
	for field, req := range map[string]*registryv1.CreateKeyRequest{
		"name":       {Role: registryv1.KeyRole_KEY_ROLE_VIEWER},
		"role":       {Name: "no role"},
		"request_id": {Name: "long request", Role: registryv1.KeyRole_KEY_ROLE_VIEWER, RequestId: strings.Repeat("r", 129)},
	} {
		_, err := bootstrap.CreateKey(ctx, connect.NewRequest(req))
		rpctest.RequireCode(t, err, connect.CodeInvalidArgument)
		require.Contains(t, err.Error(), field)
	}
	_, err := bootstrap.CreateKey(ctx, connect.NewRequest(&registryv1.CreateKeyRequest{Name: strings.Repeat("n", 129), Role: registryv1.KeyRole_KEY_ROLE_VIEWER}))
	rpctest.RequireCode(t, err, connect.CodeInvalidArgument)

	req := &registryv1.CreateKeyRequest{Name: "idempotent", Role: registryv1.KeyRole_KEY_ROLE_VIEWER, RequestId: "req-1"}
	first, err := bootstrap.CreateKey(ctx, connect.NewRequest(req))
	require.NoError(t, err)
	require.NotEmpty(t, first.Msg.Secret)
	replay, err := bootstrap.CreateKey(ctx, connect.NewRequest(req))
	require.NoError(t, err)
	require.Equal(t, first.Msg.Key.Id, replay.Msg.Key.Id, "a replay returns the key the first call created")
	require.Empty(t, replay.Msg.Secret, "the secret is not stored, so a replay cannot return it")
	require.True(t, canListJobs(t, r, first.Msg.Secret))
}

func TestListKeyDigests(t *testing.T) {
	t.Parallel()
	r := startKeyRegistry(t)
	ctx := context.Background()
	bootstrap := r.keys(keyAlpha)
	admin, adminSecret := createKey(t, bootstrap, "tenant admin", registryv1.KeyRole_KEY_ROLE_ADMIN)
	_, betaSecret := createKey(t, r.keys(keyBeta), "beta viewer", registryv1.KeyRole_KEY_ROLE_VIEWER)

	_, err := r.keys(adminSecret).ListKeyDigests(ctx, connect.NewRequest(&registryv1.ListKeyDigestsRequest{}))
	rpctest.RequireCode(t, err, connect.CodePermissionDenied)

	resp, err := bootstrap.ListKeyDigests(ctx, connect.NewRequest(&registryv1.ListKeyDigestsRequest{}))
	require.NoError(t, err)
	require.False(t, resp.Msg.Unchanged)
	want := map[[32]byte]bool{apikey.Digest(adminSecret): false, apikey.Digest(betaSecret): false}
	for _, d := range resp.Msg.Digests {
		var sum [32]byte
		copy(sum[:], d.Sha256)
		if _, ok := want[sum]; ok {
			want[sum] = true
		}
		require.NotContains(t, string(d.Sha256), apikey.SecretPrefix)
	}
	for _, seen := range want {
		require.True(t, seen, "every namespace's keys are listed")
	}

	same, err := bootstrap.ListKeyDigests(ctx, connect.NewRequest(&registryv1.ListKeyDigestsRequest{KnownRevision: resp.Msg.Revision}))
	require.NoError(t, err)
	require.True(t, same.Msg.Unchanged)
	require.Empty(t, same.Msg.Digests)

	_, err = bootstrap.RevokeKey(ctx, connect.NewRequest(&registryv1.RevokeKeyRequest{Id: admin.Id}))
	require.NoError(t, err)
	after, err := bootstrap.ListKeyDigests(ctx, connect.NewRequest(&registryv1.ListKeyDigestsRequest{KnownRevision: resp.Msg.Revision}))
	require.NoError(t, err)
	require.Greater(t, after.Msg.Revision, resp.Msg.Revision)
	for _, d := range after.Msg.Digests {
		require.NotEqual(t, admin.Id, d.KeyId, "a revoked key's digests are gone")
	}
}

// TestRevocationReachesAnotherService runs what every other service runs
// (keyring.Config.NewRegistryRing and its middleware) against a live
// registry: a key revoked at the registry is refused there within the
// refresh interval, and while the registry is down the last known keys keep
// serving.
func TestRevocationReachesAnotherService(t *testing.T) {
	t.Parallel()
	r := startKeyRegistry(t)
	ctx := context.Background()
	bootstrap := r.keys(keyAlpha)
	revokedKey, revokedSecret := createKey(t, bootstrap, "soon revoked", registryv1.KeyRole_KEY_ROLE_EDITOR)
	_, keptSecret := createKey(t, bootstrap, "kept", registryv1.KeyRole_KEY_ROLE_VIEWER)

	cfg := keyring.Config{RegistryURL: r.baseURL, Refresh: 50 * time.Millisecond}
	ring, err := cfg.NewRegistryRing([]string{"alpha=" + keyAlpha}, &http.Client{}, nil, nil)
	require.NoError(t, err)
	runCtx, stopRing := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- ring.Run(runCtx) }()
	t.Cleanup(func() { stopRing(); require.NoError(t, <-runDone) })
	service := httptest.NewServer(ring.Middleware().Wrap(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p, _ := apikey.PrincipalFrom(req.Context())
		_, _ = w.Write([]byte(string(p.Role)))
	})))
	t.Cleanup(service.Close)
	call := func(secret string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, service.URL+"/cronmesh.history.v1.HistoryService/ListExecutions", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		return resp.StatusCode, body.String()
	}
	require.Eventually(t, func() bool { code, _ := call(revokedSecret); return code == http.StatusOK }, 5*time.Second, 20*time.Millisecond)
	_, role := call(revokedSecret)
	require.Equal(t, "editor", role)
	_, role = call(keptSecret)
	require.Equal(t, "viewer", role)
	_, role = call(keyAlpha)
	require.Equal(t, "admin", role)

	_, err = bootstrap.RevokeKey(ctx, connect.NewRequest(&registryv1.RevokeKeyRequest{Id: revokedKey.Id}))
	require.NoError(t, err)
	require.Eventually(t, func() bool { code, _ := call(revokedSecret); return code == http.StatusUnauthorized }, 5*time.Second, 20*time.Millisecond,
		"a revoked key is refused by another service within the refresh interval")

	revision := ring.Revision()
	r.stop()
	// Let the ring fail at least once against the stopped registry.
	require.Eventually(t, func() bool { return ring.Refresh(ctx) != nil }, 5*time.Second, 20*time.Millisecond)
	code, role := call(keptSecret)
	require.Equal(t, http.StatusOK, code, "the last known keys keep serving while the registry is down")
	require.Equal(t, "viewer", role)
	require.Equal(t, revision, ring.Revision())
	code, _ = call(revokedSecret)
	require.Equal(t, http.StatusUnauthorized, code)
}

// TestGetCallerIdentity: every key, of every role, configured or managed,
// learns its own namespace, id and role, and the call leaves nothing in the
// audit log (a refused call would).
func TestGetCallerIdentity(t *testing.T) {
	t.Parallel()
	r := startKeyRegistry(t)
	ctx := context.Background()
	for _, proto := range rpctest.Protocols() {
		t.Run(proto.Name, func(t *testing.T) {
			bootstrap := r.keys(keyAlpha, proto.Opts...)
			editor, editorSecret := createKey(t, bootstrap, "identity editor "+proto.Name, registryv1.KeyRole_KEY_ROLE_EDITOR)
			viewer, viewerSecret := createKey(t, bootstrap, "identity viewer "+proto.Name, registryv1.KeyRole_KEY_ROLE_VIEWER)
			for _, tc := range []struct {
				name, secret string
				want         *registryv1.GetCallerIdentityResponse
			}{
				{"configured admin", keyAlpha, &registryv1.GetCallerIdentityResponse{
					Namespace: "alpha", KeyId: apikey.ConfiguredKeyID(keyAlpha), Role: registryv1.KeyRole_KEY_ROLE_ADMIN, Configured: true,
				}},
				{"other namespace", keyBeta, &registryv1.GetCallerIdentityResponse{
					Namespace: "beta", KeyId: apikey.ConfiguredKeyID(keyBeta), Role: registryv1.KeyRole_KEY_ROLE_ADMIN, Configured: true,
				}},
				{"managed editor", editorSecret, &registryv1.GetCallerIdentityResponse{
					Namespace: "alpha", KeyId: editor.Id, Role: registryv1.KeyRole_KEY_ROLE_EDITOR,
				}},
				{"managed viewer", viewerSecret, &registryv1.GetCallerIdentityResponse{
					Namespace: "alpha", KeyId: viewer.Id, Role: registryv1.KeyRole_KEY_ROLE_VIEWER,
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					resp, err := r.keys(tc.secret, proto.Opts...).GetCallerIdentity(ctx, connect.NewRequest(&registryv1.GetCallerIdentityRequest{}))
					require.NoError(t, err)
					require.Empty(t, cmp.Diff(tc.want, resp.Msg, protocmp.Transform()))
				})
			}

			_, err := r.keys("cm_not_a_key_0000000000000000", proto.Opts...).GetCallerIdentity(ctx, connect.NewRequest(&registryv1.GetCallerIdentityRequest{}))
			rpctest.RequireCode(t, err, connect.CodeUnauthenticated)

			// The viewer's refused CreateKey is audited; its identity calls
			// are not.
			_, err = r.keys(viewerSecret, proto.Opts...).CreateKey(ctx, connect.NewRequest(&registryv1.CreateKeyRequest{Name: "x", Role: registryv1.KeyRole_KEY_ROLE_ADMIN}))
			rpctest.RequireCode(t, err, connect.CodePermissionDenied)
			audit := auditv1connect.NewAuditServiceClient(rpctest.H2CClient(), r.baseURL, append(slices.Clone(proto.Opts), connect.WithInterceptors(rpctest.BearerInterceptor(keyAlpha)))...)
			events, err := audit.ListAuditEvents(ctx, connect.NewRequest(&auditv1.ListAuditEventsRequest{KeyId: viewer.Id}))
			require.NoError(t, err)
			var procedures []string
			for _, e := range events.Msg.Events {
				procedures = append(procedures, e.Procedure)
			}
			require.Equal(t, []string{registryv1connect.KeyServiceCreateKeyProcedure}, procedures, "only the refused CreateKey is in the audit log")
		})
	}
}
