package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
)

// testClock is the store's settable clock.
type testClock struct{ now time.Time }

func (c *testClock) Now() time.Time { return c.now }

func newStore(t *testing.T) (*store.Store, *testClock) {
	t.Helper()
	s, clk, _ := newStoreWithPool(t)
	return s, clk
}

func newStoreWithPool(t *testing.T) (*store.Store, *testClock, *pgxpool.Pool) {
	t.Helper()
	pool, _ := pgtest.Migrated(t, store.Migrations)
	clk := &testClock{now: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}
	return store.New(store.Options{Pool: pool, Now: clk.Now}), clk, pool
}

// digests returns the key id of every digest the store hands out.
func digests(t *testing.T, s *store.Store) map[[32]byte]*registryv1.KeyDigest {
	t.Helper()
	resp, err := s.KeyDigests(context.Background(), 0)
	require.NoError(t, err)
	out := map[[32]byte]*registryv1.KeyDigest{}
	for _, d := range resp.Digests {
		var sum [32]byte
		copy(sum[:], d.Sha256)
		out[sum] = d
	}
	return out
}

func TestKeyRotationOnTheStoreClock(t *testing.T) {
	t.Parallel()
	s, clk := newStore(t)
	ctx := context.Background()
	first, firstDigest := apikey.NewSecret()
	key, created, err := s.CreateKey(ctx, store.NewKey{Namespace: "alpha", Name: "ci", Role: apikey.RoleEditor, CreatedBy: "cfg-x", Digest: firstDigest})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, registryv1.KeyRole_KEY_ROLE_EDITOR, key.Role)
	require.NotContains(t, key.String(), first)

	clk.now = clk.now.Add(time.Minute)
	_, secondDigest := apikey.NewSecret()
	rotated, err := s.RotateKey(ctx, "alpha", key.Id, secondDigest, time.Hour)
	require.NoError(t, err)
	end := clk.now.Add(time.Hour)
	require.Equal(t, end, rotated.PreviousSecretExpireTime.AsTime())

	set := digests(t, s)
	require.Len(t, set, 2, "both secrets are valid during the grace period")
	require.Nil(t, set[secondDigest].ExpireTime)
	require.Equal(t, end, set[firstDigest].ExpireTime.AsTime())
	require.Equal(t, key.Id, set[firstDigest].KeyId)

	clk.now = end
	set = digests(t, s)
	require.Len(t, set, 1, "from the end of the grace period only the new secret")
	require.Contains(t, set, secondDigest)
	keys, _, err := s.ListKeys(ctx, "alpha", store.KeyFilter{PageSize: 10})
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Nil(t, keys[0].PreviousSecretExpireTime)

	// A second rotation with a longer grace never extends an earlier end.
	clk.now = clk.now.Add(time.Minute)
	_, thirdDigest := apikey.NewSecret()
	_, err = s.RotateKey(ctx, "alpha", key.Id, thirdDigest, 2*time.Hour)
	require.NoError(t, err)
	clk.now = clk.now.Add(time.Minute)
	_, fourthDigest := apikey.NewSecret()
	_, err = s.RotateKey(ctx, "alpha", key.Id, fourthDigest, 24*time.Hour)
	require.NoError(t, err)
	set = digests(t, s)
	require.Len(t, set, 3)
	require.Equal(t, clk.now.Add(-time.Minute).Add(2*time.Hour), set[secondDigest].ExpireTime.AsTime(), "kept its earlier end")
	require.Equal(t, clk.now.Add(24*time.Hour), set[thirdDigest].ExpireTime.AsTime())
	require.Nil(t, set[fourthDigest].ExpireTime)

	_, err = s.RevokeKey(ctx, "alpha", key.Id)
	require.NoError(t, err)
	require.Empty(t, digests(t, s), "a revoked key has no valid secret")
	_, err = s.RotateKey(ctx, "alpha", key.Id, firstDigest, 0)
	require.ErrorIs(t, err, store.ErrKeyRevoked)
	_, err = s.RevokeKey(ctx, "beta", key.Id)
	require.ErrorIs(t, err, store.ErrKeyNotFound, "another namespace's key")
}

func TestKeyNamesAndReplays(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	_, d1 := apikey.NewSecret()
	first, created, err := s.CreateKey(ctx, store.NewKey{Namespace: "alpha", Name: "ci", Role: apikey.RoleViewer, RequestID: "r1", CreatedBy: "cfg-x", Digest: d1})
	require.NoError(t, err)
	require.True(t, created)
	_, d2 := apikey.NewSecret()
	again, created, err := s.CreateKey(ctx, store.NewKey{Namespace: "alpha", Name: "ci", Role: apikey.RoleViewer, RequestID: "r1", CreatedBy: "cfg-x", Digest: d2})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.Id, again.Id)
	require.NotContains(t, digests(t, s), d2, "a replay stores no second secret")

	_, d3 := apikey.NewSecret()
	_, _, err = s.CreateKey(ctx, store.NewKey{Namespace: "alpha", Name: "ci", Role: apikey.RoleAdmin, CreatedBy: "cfg-x", Digest: d3})
	require.ErrorIs(t, err, store.ErrKeyNameTaken)
	_, created, err = s.CreateKey(ctx, store.NewKey{Namespace: "beta", Name: "ci", Role: apikey.RoleAdmin, CreatedBy: "cfg-y", Digest: d3})
	require.NoError(t, err, "names are per namespace")
	require.True(t, created)
}

func TestKeyLimits(t *testing.T) {
	t.Parallel()
	s, clk, pool := newStoreWithPool(t)
	ctx := context.Background()

	_, digest := apikey.NewSecret()
	key, _, err := s.CreateKey(ctx, store.NewKey{Namespace: "alpha", Name: "rotated", Role: apikey.RoleViewer, CreatedBy: "cfg-x", Digest: digest})
	require.NoError(t, err)
	for range store.MaxSecretsPerKey - 1 {
		clk.now = clk.now.Add(time.Second)
		_, digest := apikey.NewSecret()
		_, err := s.RotateKey(ctx, "alpha", key.Id, digest, time.Hour)
		require.NoError(t, err)
	}
	require.Len(t, digests(t, s), store.MaxSecretsPerKey)
	_, digest = apikey.NewSecret()
	_, err = s.RotateKey(ctx, "alpha", key.Id, digest, time.Hour)
	require.ErrorIs(t, err, store.ErrTooManySecrets)
	_, err = s.RotateKey(ctx, "alpha", key.Id, digest, 0)
	require.NoError(t, err, "a zero grace period ends the others first")
	require.Len(t, digests(t, s), 1)

	// Fill the namespace up to the limit (one key exists already).
	_, err = pool.Exec(ctx, `
		INSERT INTO api_keys (id, namespace, name, role, created_at, created_by, rotated_at)
		SELECT gen_random_uuid(), 'alpha', 'bulk ' || i, 'viewer', now(), 'cfg-x', now()
		FROM generate_series(2, $1) AS i`, store.MaxKeysPerNamespace)
	require.NoError(t, err)
	_, digest = apikey.NewSecret()
	_, _, err = s.CreateKey(ctx, store.NewKey{Namespace: "alpha", Name: "one too many", Role: apikey.RoleViewer, CreatedBy: "cfg-x", Digest: digest})
	require.ErrorIs(t, err, store.ErrTooManyKeys)
	_, _, err = s.CreateKey(ctx, store.NewKey{Namespace: "beta", Name: "one too many", Role: apikey.RoleViewer, CreatedBy: "cfg-x", Digest: digest})
	require.NoError(t, err, "the limit is per namespace")
	_, err = s.RevokeKey(ctx, "alpha", key.Id)
	require.NoError(t, err)
	_, digest = apikey.NewSecret()
	_, _, err = s.CreateKey(ctx, store.NewKey{Namespace: "alpha", Name: "after a revocation", Role: apikey.RoleViewer, CreatedBy: "cfg-x", Digest: digest})
	require.NoError(t, err, "revoked keys do not count")
}
