package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
)

// TestUnsettledBudget: settlements are kept within the budget, replaced per
// attempt and let go on forget; when the budget is spent, entries past
// their age make room, and a settlement that still does not fit is not
// kept (and counted).
func TestUnsettledBudget(t *testing.T) {
	t.Parallel()
	drops := 0
	big := settlement{kind: settleRetry, out: deliver.Outcome{Excerpt: strings.Repeat("x", 1000)}}
	u := newUnsettled(3*big.size(), time.Minute, func() { drops++ })
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	a, b, c, d := attemptKey{"alpha", "a", 1}, attemptKey{"alpha", "b", 1}, attemptKey{"alpha", "c", 1}, attemptKey{"alpha", "d", 1}

	u.keep(a, big, start)
	u.keep(a, big, start) // the same attempt again replaces it
	u.keep(b, big, start.Add(30*time.Second))
	u.keep(c, big, start.Add(30*time.Second))
	require.Equal(t, 3, u.len())
	got, ok := u.get(a)
	require.True(t, ok)
	require.Equal(t, settleRetry, got.kind)
	_, ok = u.get(attemptKey{"alpha", "a", 2})
	require.False(t, ok, "another attempt of the execution is not covered")
	_, ok = u.get(attemptKey{"beta", "a", 1})
	require.False(t, ok, "nor the same id in another namespace")

	u.keep(d, big, start.Add(45*time.Second))
	require.Equal(t, 1, drops, "full, and nothing old enough to make room")
	_, ok = u.get(d)
	require.False(t, ok)

	u.keep(d, big, start.Add(61*time.Second))
	_, ok = u.get(a)
	require.False(t, ok, "a is past its age and made room")
	_, ok = u.get(d)
	require.True(t, ok)
	require.Equal(t, 1, drops)

	u.forget(b)
	u.forget(b)
	require.Equal(t, 2, u.len())
	require.Equal(t, 2*big.size(), u.used)
}
