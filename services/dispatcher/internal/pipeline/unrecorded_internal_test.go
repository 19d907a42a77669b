package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

func TestUnrecorded(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	u := newUnrecorded(2)
	require.True(t, u.add(store.CompletedAttempt{ExecutionID: "a", Attempt: 2, Time: at}))
	require.True(t, u.add(store.CompletedAttempt{ExecutionID: "a", Attempt: 1, Final: true, Time: at.Add(-time.Second)}))
	require.True(t, u.covers("a", 1))
	require.True(t, u.covers("a", 2))
	require.False(t, u.covers("a", 3), "a redrive's next attempt is not covered, final or not")
	require.False(t, u.covers("b", 1))

	require.True(t, u.add(store.CompletedAttempt{ExecutionID: "b", Attempt: 1, Time: at}))
	require.False(t, u.add(store.CompletedAttempt{ExecutionID: "c", Attempt: 1, Time: at}), "full")
	require.True(t, u.add(store.CompletedAttempt{ExecutionID: "b", Attempt: 2, Time: at}), "a held execution still merges when full")

	taken := u.take(10)
	require.Len(t, taken, 2)
	require.Contains(t, taken, store.CompletedAttempt{ExecutionID: "a", Attempt: 2, Final: true, Time: at})
	// b completes another attempt between take and forget: its newer
	// completion stays held.
	require.True(t, u.add(store.CompletedAttempt{ExecutionID: "b", Attempt: 3, Time: at.Add(time.Second)}))
	u.forget(taken)
	require.Equal(t, 1, u.len())
	require.True(t, u.covers("b", 3))
	require.False(t, u.covers("a", 1))
}
