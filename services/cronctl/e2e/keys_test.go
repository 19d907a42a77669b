package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/cronctl/internal/cli"
)

type keyJSON struct {
	Key struct {
		ID   string `json:"id"`
		Name string `json:"name"`
		Role string `json:"role"`
	} `json:"key"`
	Secret string `json:"secret"`
}

// testKeyManagement manages keys with cronctl and watches another service (the
// history) accept and then refuse them: the managed keys reach every
// service, and a rotation or a revocation reaches it without a restart.
func testKeyManagement(t *testing.T, s *stack) {
	const ns = "keys"
	// convergence bounds how long a change may take to reach the history:
	// the promise is 5 s (a 1 s refresh); the margin is for a loaded machine.
	const convergence = 15 * time.Second
	historyWith := func(secret string) result {
		return s.cronctl(t, ns, map[string]string{"CRONMESH_API_KEY": secret}, "history", "list", "-o", "json")
	}
	accepted := func(secret string) func() bool {
		return func() bool { return historyWith(secret).code == cli.ExitOK }
	}
	refused := func(secret string) func() bool {
		return func() bool {
			r := historyWith(secret)
			return r.code == cli.ExitError && strings.Contains(r.stderr, "unauthenticated")
		}
	}

	created := decode[keyJSON](t, s.ok(t, ns, "keys", "create", "dashboard", "--role", "viewer", "-o", "json"))
	require.Equal(t, "KEY_ROLE_VIEWER", created.Key.Role)
	require.True(t, strings.HasPrefix(created.Secret, "cm_"))
	require.Eventually(t, accepted(created.Secret), convergence, 100*time.Millisecond, "a new key reaches the history")

	table := s.ok(t, ns, "keys", "list")
	require.Regexp(t, `(?m)^ID\s+NAME\s+ROLE\s+CREATED\s+ROTATED\s+PREVIOUS SECRET UNTIL\s+REVOKED$`, table)
	require.Regexp(t, `(?m)^`+created.Key.ID+`\s+dashboard\s+viewer\s`, table)
	require.NotContains(t, table, created.Secret)

	// A viewer cannot manage keys.
	r := s.cronctl(t, ns, map[string]string{"CRONMESH_API_KEY": created.Secret}, "keys", "list")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "permission_denied")

	rotated := decode[keyJSON](t, s.ok(t, ns, "keys", "rotate", created.Key.ID, "--grace", "0s", "-o", "json"))
	require.Equal(t, created.Key.ID, rotated.Key.ID)
	require.NotEqual(t, created.Secret, rotated.Secret)
	require.Eventually(t, refused(created.Secret), convergence, 100*time.Millisecond, "the old secret ends everywhere")
	require.Eventually(t, accepted(rotated.Secret), convergence, 100*time.Millisecond)

	revoked := s.ok(t, ns, "keys", "revoke", created.Key.ID)
	require.Regexp(t, `(?m)^revoked:\s+\S+`, revoked)
	require.Eventually(t, refused(rotated.Secret), convergence, 100*time.Millisecond, "a revoked key is refused by the history without a restart")

	r = s.cronctl(t, ns, nil, "keys", "create", "x", "--role", "owner")
	require.Equal(t, cli.ExitUsage, r.code)
}
