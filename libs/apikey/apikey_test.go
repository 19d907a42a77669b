package apikey_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
		p, ok := keys.Principal(key)
		require.True(t, ok, key)
		require.Equal(t, want, p.Namespace)
	}
	_, ok := keys.Principal("alpha-key-012345678")
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

func TestPrincipal(t *testing.T) {
	t.Parallel()
	keys, err := apikey.Parse([]string{"alpha=alpha-key-0123456789"})
	require.NoError(t, err)
	p, ok := keys.Principal("alpha-key-0123456789")
	require.True(t, ok)
	require.Equal(t, apikey.Principal{
		Namespace: "alpha", KeyID: apikey.ConfiguredKeyID("alpha-key-0123456789"), Role: apikey.RoleAdmin,
	}, p, "a configured key is its namespace's bootstrap admin")
	require.Regexp(t, `^cfg-[0-9a-f]{12}$`, p.KeyID)
	require.NotEqual(t, apikey.ConfiguredKeyID("alpha-key-9876543210"), p.KeyID)
	for _, wrong := range []string{"alpha-key-9876543210", "", "alpha-key-012345678"} {
		_, ok := keys.Principal(wrong)
		require.False(t, ok, wrong)
	}
	_, ok = apikey.NamespaceFrom(context.Background())
	require.False(t, ok)
	ns, ok := apikey.NamespaceFrom(apikey.WithNamespace(context.Background(), "beta"))
	require.True(t, ok)
	require.Equal(t, "beta", ns)
}

// TestConfiguredRoles: "namespace:role=key" gives a configured key a role
// below admin, which its principal carries.
func TestConfiguredRoles(t *testing.T) {
	t.Parallel()
	keys, err := apikey.Parse([]string{
		"alpha=admin-key-0123456789", "alpha:editor=editor-key-0123456789",
		"alpha:viewer=viewer-key-0123456789", "alpha:admin=admin2-key-0123456789",
	})
	require.NoError(t, err)
	for key, want := range map[string]apikey.Role{
		"admin-key-0123456789":  apikey.RoleAdmin,
		"editor-key-0123456789": apikey.RoleEditor,
		"viewer-key-0123456789": apikey.RoleViewer,
		"admin2-key-0123456789": apikey.RoleAdmin,
	} {
		principal, ok := keys.Principal(key)
		require.True(t, ok)
		require.Equal(t, apikey.Principal{Namespace: "alpha", KeyID: apikey.ConfiguredKeyID(key), Role: want}, principal, key)
	}
	p, ok := apikey.PrincipalFrom(apikey.WithPrincipal(context.Background(), apikey.Principal{Namespace: "beta", KeyID: "k", Role: apikey.RoleViewer}))
	require.True(t, ok)
	require.Equal(t, apikey.RoleViewer, p.Role)
}
