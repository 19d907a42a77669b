package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestServerTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := time.Now()
	got, err := e.store.ServerTime(t.Context())
	require.NoError(t, err)
	// The test's PostgreSQL runs on this host: its clock is this one.
	require.WithinDuration(t, before, got, 2*time.Second)
	later, err := e.store.ServerTime(t.Context())
	require.NoError(t, err)
	require.True(t, later.After(got), "clock_timestamp moves within a session, unlike now()")
}
