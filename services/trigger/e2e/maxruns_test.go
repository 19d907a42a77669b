package e2e_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/amqptest"
)

// TestMaxRunsThroughFailover runs three trigger nodes with every-second
// jobs limited to 10 runs and, while they run, SIGKILLs one node and
// SIGSTOPs another past its lease: the partitions of both move to the
// survivors, which read each job's count from the database. Every job must
// reach the dispatch queue exactly 10 times, for its first 10 slots, each
// from one outbox row: never an 11th run, never one fewer.
func TestMaxRunsThroughFailover(t *testing.T) {
	const (
		jobs    = 150
		maxRuns = 10
	)
	c := newCluster(t, amqptest.URL())
	for _, id := range []string{"n1", "n2", "n3"} {
		c.start(id)
	}
	ctx, stopConsuming := context.WithCancel(context.Background())
	consumer := c.consume(ctx)
	var created time.Time
	ids := c.createJobsWith(jobs, func(j *registryv1.Job) {
		j.MaxRuns = maxRuns
		created = j.CreateTime.AsTime()
	})
	first := created.Truncate(time.Second).Add(time.Second) // the first slot of every job

	sleepUntil(first.Add(3 * time.Second))
	t.Log("SIGKILL n1")
	require.NoError(t, c.nodes["n1"].cmd.Process.Kill())
	sleepUntil(first.Add(5 * time.Second))
	t.Logf("SIGSTOP n2 for %s (past its lease)", 2*c.leaseTTL+time.Second)
	n2 := c.nodes["n2"].cmd.Process
	require.NoError(t, n2.Signal(syscall.SIGSTOP))
	time.Sleep(2*c.leaseTTL + time.Second)
	require.NoError(t, n2.Signal(syscall.SIGCONT))

	pool := c.pool()
	require.Eventually(t, func() bool {
		var done int
		err := pool.QueryRow(context.Background(), `
			SELECT count(*) FROM jobs WHERE runs_fired = max_runs AND next_fire_at IS NULL`).Scan(&done)
		return err == nil && done == jobs
	}, 60*time.Second, 100*time.Millisecond, "not every job completed")
	c.waitOutboxDrained(time.Minute)
	c.stopAll()
	c.waitQuiet()
	stopConsuming()
	consumer.Wait()

	require.Empty(t, c.received.problems)
	var wrong []string
	for _, id := range ids {
		got := c.received.slotsOf(id)
		want := make([]int64, maxRuns)
		for i := range want {
			want[i] = first.Unix() + int64(i)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			wrong = append(wrong, fmt.Sprintf("%s: slots %v, want %v", id, got, want))
		}
		for s, rows := range c.received.rowsOf(id) {
			if rows > 1 {
				wrong = append(wrong, fmt.Sprintf("%s: slot %d fired from %d outbox rows", id, s, rows))
			}
		}
	}
	require.Empty(t, head(wrong), "%d jobs did not run exactly %d times", len(wrong), maxRuns)
}
