package keyring_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/keyring"
)

const configuredKey = "alpha-key-0123456789abcdef"

// fakeSource serves a settable key set; fail makes it unreachable.
type fakeSource struct {
	mu       sync.Mutex
	revision int64
	digests  []*registryv1.KeyDigest
	fail     bool
	calls    int
}

func (f *fakeSource) KeyDigests(ctx context.Context, known int64) (*registryv1.ListKeyDigestsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if sc := trace.SpanContextFromContext(ctx); !sc.IsValid() || sc.IsSampled() {
		return nil, errors.New("a refresh must run in an unsampled trace")
	}
	if f.fail {
		return nil, errors.New("registry unreachable")
	}
	if known == f.revision {
		return &registryv1.ListKeyDigestsResponse{Revision: f.revision, Unchanged: true}, nil
	}
	return &registryv1.ListKeyDigestsResponse{Revision: f.revision, Digests: f.digests}, nil
}

func (f *fakeSource) set(revision int64, digests ...*registryv1.KeyDigest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revision, f.digests = revision, digests
}

func (f *fakeSource) setFailing(fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

func digest(secret, keyID, namespace string, role registryv1.KeyRole, expires time.Time) *registryv1.KeyDigest {
	sum := sha256.Sum256([]byte(secret))
	d := &registryv1.KeyDigest{Sha256: sum[:], KeyId: keyID, Namespace: namespace, Role: role}
	if !expires.IsZero() {
		d.ExpireTime = timestamppb.New(expires)
	}
	return d
}

func newRing(t *testing.T, src keyring.Source, clk clock.Clock, interval time.Duration) *keyring.Ring {
	t.Helper()
	configured, err := keyring.ParseConfigured([]string{"alpha=" + configuredKey})
	require.NoError(t, err)
	r, err := keyring.New(keyring.Options{Configured: configured, Source: src, Clock: clk, Interval: interval})
	require.NoError(t, err)
	return r
}

func TestAuthenticateRoles(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	src.set(3,
		digest("cm_admin", "k-admin", "alpha", registryv1.KeyRole_KEY_ROLE_ADMIN, time.Time{}),
		digest("cm_editor", "k-editor", "alpha", registryv1.KeyRole_KEY_ROLE_EDITOR, time.Time{}),
		digest("cm_viewer", "k-viewer", "beta", registryv1.KeyRole_KEY_ROLE_VIEWER, time.Time{}),
		digest("cm_unknown_role", "k-odd", "beta", registryv1.KeyRole(42), time.Time{}),
		&registryv1.KeyDigest{Sha256: []byte("short"), KeyId: "k-short", Namespace: "beta", Role: registryv1.KeyRole_KEY_ROLE_ADMIN},
	)
	r := newRing(t, src, clock.NewFake(time.Unix(1e9, 0)), 0)

	p, ok := r.Authenticate(configuredKey)
	require.True(t, ok, "configured keys work before the first refresh")
	require.Equal(t, apikey.Principal{Namespace: "alpha", KeyID: apikey.ConfiguredKeyID(configuredKey), Role: apikey.RoleAdmin}, p)
	_, ok = r.Authenticate("cm_admin")
	require.False(t, ok, "managed keys only after a refresh")

	require.NoError(t, r.Refresh(context.Background()))
	require.EqualValues(t, 3, r.Revision())
	for secret, want := range map[string]apikey.Principal{
		"cm_admin":  {Namespace: "alpha", KeyID: "k-admin", Role: apikey.RoleAdmin},
		"cm_editor": {Namespace: "alpha", KeyID: "k-editor", Role: apikey.RoleEditor},
		"cm_viewer": {Namespace: "beta", KeyID: "k-viewer", Role: apikey.RoleViewer},
	} {
		p, ok := r.Authenticate(secret)
		require.True(t, ok, secret)
		require.Equal(t, want, p)
	}
	_, ok = r.Authenticate("cm_unknown_role")
	require.False(t, ok, "a role this build does not know grants nothing")
	_, ok = r.Authenticate("cm_admi")
	require.False(t, ok)
}

func TestGracePeriodEndsOnTheClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1e9, 0))
	end := clk.Now().Add(time.Hour)
	src := &fakeSource{}
	src.set(2,
		digest("cm_new", "k1", "alpha", registryv1.KeyRole_KEY_ROLE_EDITOR, time.Time{}),
		digest("cm_old", "k1", "alpha", registryv1.KeyRole_KEY_ROLE_EDITOR, end),
	)
	r := newRing(t, src, clk, 0)
	require.NoError(t, r.Refresh(context.Background()))
	for _, secret := range []string{"cm_new", "cm_old"} {
		p, ok := r.Authenticate(secret)
		require.True(t, ok, secret)
		require.Equal(t, "k1", p.KeyID, "both secrets are the same key")
	}
	clk.Set(end.Add(-time.Nanosecond))
	_, ok := r.Authenticate("cm_old")
	require.True(t, ok, "valid until its end")
	clk.Set(end)
	_, ok = r.Authenticate("cm_old")
	require.False(t, ok, "refused from its end on, without a refresh")
	_, ok = r.Authenticate("cm_new")
	require.True(t, ok)
}

func TestSourceDownKeepsTheLastSet(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	src.set(2, digest("cm_key", "k1", "alpha", registryv1.KeyRole_KEY_ROLE_VIEWER, time.Time{}))
	r := newRing(t, src, clock.NewFake(time.Unix(1e9, 0)), 0)
	require.NoError(t, r.Refresh(context.Background()))

	src.setFailing(true)
	require.Error(t, r.Refresh(context.Background()))
	_, ok := r.Authenticate("cm_key")
	require.True(t, ok, "the last known set keeps serving while the source is down")
	require.EqualValues(t, 2, r.Revision())

	src.set(3)
	src.setFailing(false)
	require.NoError(t, r.Refresh(context.Background()))
	_, ok = r.Authenticate("cm_key")
	require.False(t, ok, "revoked once the source answers again")
}

func TestUnchangedRevisionKeepsTheSet(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	src.set(5, digest("cm_key", "k1", "alpha", registryv1.KeyRole_KEY_ROLE_VIEWER, time.Time{}))
	r := newRing(t, src, clock.NewFake(time.Unix(1e9, 0)), 0)
	require.NoError(t, r.Refresh(context.Background()))
	require.NoError(t, r.Refresh(context.Background()))
	_, ok := r.Authenticate("cm_key")
	require.True(t, ok, "an unchanged answer carries no digests and must not empty the set")
}

// TestRunPicksUpARevocation drives Run with a short real interval and polls
// for the outcome.
func TestRunPicksUpARevocation(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	src.set(2, digest("cm_key", "k1", "alpha", registryv1.KeyRole_KEY_ROLE_ADMIN, time.Time{}))
	r := newRing(t, src, clock.Real{}, 10*time.Millisecond)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })

	handler := r.Middleware().Wrap(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p, ok := apikey.PrincipalFrom(req.Context())
		require.True(t, ok)
		_, _ = w.Write([]byte(p.KeyID + " " + string(p.Role)))
	}))
	call := func(secret string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/cronmesh.history.v1.HistoryService/ListExecutions", nil)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	require.Eventually(t, func() bool { code, _ := call("cm_key"); return code == http.StatusOK }, 5*time.Second, 5*time.Millisecond)
	_, body := call("cm_key")
	require.Equal(t, "k1 admin", body)

	src.set(3)
	require.Eventually(t, func() bool { code, _ := call("cm_key"); return code == http.StatusUnauthorized }, 5*time.Second, 5*time.Millisecond)
	code, _ := call(configuredKey)
	require.Equal(t, http.StatusOK, code)
	code, _ = call("")
	require.Equal(t, http.StatusUnauthorized, code)
}

func TestParseConfiguredNeedsAKey(t *testing.T) {
	t.Parallel()
	_, err := keyring.ParseConfigured(nil)
	require.Error(t, err)
}

func TestNewRegistryRing(t *testing.T) {
	t.Parallel()
	cfg := keyring.Config{RegistryURL: "http://127.0.0.1:1"}
	_, err := cfg.NewRegistryRing([]string{"alpha=sha256:" + hexDigest("only-a-digest-0123456789")}, http.DefaultClient, nil, nil)
	require.ErrorContains(t, err, "--registry-api-key", "a digest cannot be sent to the registry")
	r, err := cfg.NewRegistryRing([]string{"alpha=sha256:" + hexDigest("only-a-digest-0123456789"), "beta=" + configuredKey}, http.DefaultClient, nil, nil)
	require.NoError(t, err)
	require.Error(t, r.Refresh(context.Background()), "nothing listens on port 1")
	local, err := (keyring.Config{}).NewRegistryRing([]string{"alpha=" + configuredKey}, http.DefaultClient, nil, nil)
	require.NoError(t, err, "no registry: configured keys only")
	require.NoError(t, local.Refresh(context.Background()))
	_, ok := local.Authenticate(configuredKey)
	require.True(t, ok)
}

func hexDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// registryStub is a KeyService that records what the ring sends.
type registryStub struct {
	registryv1connect.UnimplementedKeyServiceHandler
	mu      sync.Mutex
	headers http.Header
}

func (r *registryStub) ListKeyDigests(_ context.Context, req *connect.Request[registryv1.ListKeyDigestsRequest]) (*connect.Response[registryv1.ListKeyDigestsResponse], error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = req.Header().Clone()
	sum := sha256.Sum256([]byte("cm_from_the_registry"))
	return connect.NewResponse(&registryv1.ListKeyDigestsResponse{Revision: 7, Digests: []*registryv1.KeyDigest{
		{Sha256: sum[:], KeyId: "k7", Namespace: "beta", Role: registryv1.KeyRole_KEY_ROLE_EDITOR},
	}}), nil
}

func TestRegistrySource(t *testing.T) {
	t.Parallel()
	stub := &registryStub{}
	mux := http.NewServeMux()
	mux.Handle(registryv1connect.NewKeyServiceHandler(stub))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	cfg := keyring.Config{RegistryURL: srv.URL}
	r, err := cfg.NewRegistryRing([]string{
		"alpha=sha256:" + hexDigest("only-a-digest-0123456789"), "beta:viewer=viewer-key-0123456789", "beta=" + configuredKey,
	}, srv.Client(), nil, nil)
	require.NoError(t, err)
	require.NoError(t, r.Refresh(context.Background()))
	p, ok := r.Authenticate("cm_from_the_registry")
	require.True(t, ok)
	require.Equal(t, apikey.Principal{Namespace: "beta", KeyID: "k7", Role: apikey.RoleEditor}, p)

	stub.mu.Lock()
	defer stub.mu.Unlock()
	require.Equal(t, "Bearer "+configuredKey, stub.headers.Get("Authorization"), "the first plain configured admin key: a viewer may not fetch the keys")
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-00$`, stub.headers.Get("Traceparent"), "the registry is told not to record the poll")
}

// TestConfiguredKeyKeepsItsRole: a configured key of a lesser role
// ("namespace:viewer=key") is not promoted to admin by the ring.
func TestConfiguredKeyKeepsItsRole(t *testing.T) {
	t.Parallel()
	const viewerKey = "viewer-key-0123456789"
	configured, err := keyring.ParseConfigured([]string{"alpha=" + configuredKey, "alpha:viewer=" + viewerKey})
	require.NoError(t, err)
	r, err := keyring.New(keyring.Options{Configured: configured, Source: &fakeSource{}, Clock: clock.NewFake(time.Unix(1e9, 0))})
	require.NoError(t, err)
	p, ok := r.Authenticate(viewerKey)
	require.True(t, ok)
	require.Equal(t, apikey.Principal{Namespace: "alpha", KeyID: apikey.ConfiguredKeyID(viewerKey), Role: apikey.RoleViewer}, p)
}
