package heldjobs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/cronmesh/cronmesh/bench/internal/heldjobs"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

// TestCopyWritesHeldJobs: every row is written once, on a partition of the
// ring, with its job's protobuf as the spec and a next slot at least 2 h
// away.
func TestCopyWritesHeldJobs(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	_, err := pool.Exec(t.Context(), `CREATE TABLE jobs (
		job_id uuid PRIMARY KEY, namespace text, partition int, version bigint, deleted bool, paused bool,
		spec bytea, next_fire_at timestamptz, update_time timestamptz)`)
	require.NoError(t, err)
	start := time.Now()
	n, err := heldjobs.Copy(t.Context(), pool, heldjobs.Options{
		Jobs: 25, Streams: 3, Namespace: "held", Partitions: 4,
		Job: func(id string, i int, schedule *registryv1.Schedule, created time.Time) *registryv1.Job {
			return &registryv1.Job{Id: id, DisplayName: "held", Schedule: schedule}
		},
	})
	require.NoError(t, err)
	require.Greater(t, n, 4*24*60*9/10, "most minutes of the day in four zones")

	rows, err := pool.Query(t.Context(), `SELECT job_id::text, namespace, partition, spec, next_fire_at FROM jobs`)
	require.NoError(t, err)
	defer rows.Close()
	count := 0
	for rows.Next() {
		var id, ns string
		var partition int
		var spec []byte
		var next time.Time
		require.NoError(t, rows.Scan(&id, &ns, &partition, &spec, &next))
		var job registryv1.Job
		require.NoError(t, proto.Unmarshal(spec, &job))
		require.Equal(t, id, job.GetId())
		require.NotEmpty(t, job.GetSchedule().GetCron())
		require.Equal(t, "held", ns)
		require.True(t, partition >= 0 && partition < 4, "partition %d", partition)
		require.GreaterOrEqual(t, next.Sub(start), 2*time.Hour)
		count++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 25, count)
}
