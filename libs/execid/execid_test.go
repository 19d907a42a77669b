package execid_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/execid"
)

func TestFor(t *testing.T) {
	t.Parallel()
	job := "0190f0c4-6c1e-7a00-8000-000000000001"
	at := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	id := execid.For(job, at)
	parsed, err := uuid.Parse(id)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(5), parsed.Version())
	require.Equal(t, id, execid.For(job, at.In(time.FixedZone("CEST", 7200))), "the same instant in any zone is the same slot")
	require.NotEqual(t, id, execid.For(job, at.Add(time.Nanosecond)))
	require.NotEqual(t, id, execid.For("0190f0c4-6c1e-7a00-8000-000000000002", at))
	require.Equal(t, execid.For("not-a-uuid", at), execid.For("not-a-uuid", at))
	// Pinned (checked against Python's uuid.uuid5) so that a change of the
	// derivation, which would break idempotency across versions, cannot go
	// unnoticed.
	require.Equal(t, "041db75b-c69a-5bfe-a390-cbae09aaf25e", id)
}
