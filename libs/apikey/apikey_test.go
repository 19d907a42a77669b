package apikey_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/apikey"
)

func TestParse(t *testing.T) {
	t.Parallel()
	digest := sha256.Sum256([]byte("hashed-key-0123456789"))
	keys, err := apikey.Parse([]string{"alpha=alpha-key-0123456789", " beta=sha256:" + hex.EncodeToString(digest[:]), "alpha=second-alpha-key-0123"})
	require.NoError(t, err)
	require.Equal(t, 3, keys.Len())
	for key, want := range map[string]string{
		"alpha-key-0123456789":  "alpha",
		"hashed-key-0123456789": "beta",
		"second-alpha-key-0123": "alpha",
	} {
		ns, ok := keys.Namespace(key)
		require.True(t, ok, key)
		require.Equal(t, want, ns)
	}
	_, ok := keys.Namespace("alpha-key-012345678")
	require.False(t, ok, "a prefix of a key is not a key")

	for name, entries := range map[string][]string{
		"no separator":       {"alpha"},
		"short key":          {"alpha=short"},
		"bad namespace":      {"Alpha_1=alpha-key-0123456789"},
		"bad digest":         {"alpha=sha256:abc"},
		"one key, two ns":    {"alpha=shared-key-0123456789", "beta=shared-key-0123456789"},
		"empty namespace":    {"=alpha-key-0123456789"},
		"namespace too long": {string(make([]byte, 64)) + "=alpha-key-0123456789"},
		"unknown role":       {"alpha:owner=alpha-key-0123456789"},
		"empty role":         {"alpha:=alpha-key-0123456789"},
		"one key, two roles": {"alpha:viewer=shared-key-0123456789", "alpha:editor=shared-key-0123456789"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := apikey.Parse(entries)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "0123456789", "errors never echo a key")
		})
	}
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	keys, err := apikey.Parse([]string{"alpha=alpha-key-0123456789"})
	require.NoError(t, err)
	var seen string
	var principal apikey.Principal
	handler := keys.Middleware().Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, ok := apikey.NamespaceFrom(r.Context())
		require.True(t, ok)
		seen = ns
		principal, _ = apikey.PrincipalFrom(r.Context())
	}))
	for _, tc := range []struct {
		name, header string
		status       int
	}{
		{"valid", "Bearer alpha-key-0123456789", http.StatusOK},
		{"missing", "", http.StatusUnauthorized},
		{"wrong", "Bearer alpha-key-9876543210", http.StatusUnauthorized},
		{"not bearer", "Basic YWxwaGE6eA==", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen = ""
			req := httptest.NewRequest(http.MethodPost, "/cronmesh.registry.v1.JobService/ListJobs", nil)
			req.Header.Set("Content-Type", "application/json")
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			require.Equal(t, tc.status, rec.Code)
			if tc.status == http.StatusOK {
				require.Equal(t, "alpha", seen)
				require.Equal(t, apikey.Principal{
					Namespace: "alpha", KeyID: apikey.ConfiguredKeyID("alpha-key-0123456789"), Role: apikey.RoleAdmin,
				}, principal, "a configured key is its namespace's bootstrap admin")
				require.Regexp(t, `^cfg-[0-9a-f]{12}$`, principal.KeyID)
				require.NotEqual(t, apikey.ConfiguredKeyID("alpha-key-9876543210"), principal.KeyID)
			}
		})
	}
	_, ok := apikey.NamespaceFrom(context.Background())
	require.False(t, ok)
	ns, ok := apikey.NamespaceFrom(apikey.WithNamespace(context.Background(), "beta"))
	require.True(t, ok)
	require.Equal(t, "beta", ns)
}

// TestConfiguredRoles: "namespace:role=key" gives a configured key a role
// below admin, which the middleware passes on in the principal.
func TestConfiguredRoles(t *testing.T) {
	t.Parallel()
	keys, err := apikey.Parse([]string{
		"alpha=admin-key-0123456789", "alpha:editor=editor-key-0123456789",
		"alpha:viewer=viewer-key-0123456789", "alpha:admin=admin2-key-0123456789",
	})
	require.NoError(t, err)
	var principal apikey.Principal
	handler := keys.Middleware().Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		principal, _ = apikey.PrincipalFrom(r.Context())
	}))
	for key, want := range map[string]apikey.Role{
		"admin-key-0123456789":  apikey.RoleAdmin,
		"editor-key-0123456789": apikey.RoleEditor,
		"viewer-key-0123456789": apikey.RoleViewer,
		"admin2-key-0123456789": apikey.RoleAdmin,
	} {
		req := httptest.NewRequest(http.MethodPost, "/cronmesh.registry.v1.JobService/ListJobs", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		handler.ServeHTTP(httptest.NewRecorder(), req)
		require.Equal(t, apikey.Principal{Namespace: "alpha", KeyID: apikey.ConfiguredKeyID(key), Role: want}, principal, key)
		ns, ok := keys.Namespace(key)
		require.True(t, ok)
		require.Equal(t, "alpha", ns)
	}
	p, ok := apikey.PrincipalFrom(apikey.WithPrincipal(context.Background(), apikey.Principal{Namespace: "beta", KeyID: "k", Role: apikey.RoleViewer}))
	require.True(t, ok)
	require.Equal(t, apikey.RoleViewer, p.Role)
}
