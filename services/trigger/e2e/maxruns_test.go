package e2e_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
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
	c := newCluster(t, "", 3)
	ctx, stopConsuming := context.WithCancel(context.Background())
	consumer := c.consume(ctx)
	var created time.Time
	ids := c.createJobsWith(jobs, func(j *registryv1.Job) {
		j.MaxRuns = maxRuns
		created = j.CreateTime.AsTime()
	})
	first := created.Truncate(time.Second).Add(time.Second) // the first slot of every job

	sleepUntil(first.Add(3 * time.Second))
	t.Log("SIGKILL trigger-1")
	require.NoError(t, c.node(1).Signal(syscall.SIGKILL))
	sleepUntil(first.Add(5 * time.Second))
	t.Logf("SIGSTOP trigger-2 for %s (past its lease)", 2*leaseTTL+time.Second)
	require.NoError(t, c.node(2).Signal(syscall.SIGSTOP))
	time.Sleep(2*leaseTTL + time.Second)
	require.NoError(t, c.node(2).Signal(syscall.SIGCONT))

	pool := c.db
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

	requireFiredOnce(t, c.received.CheckQueue(ids, first, first.Add((maxRuns-1)*time.Second), first))
	var wrong []string
	for _, id := range ids {
		got := c.received.EnqueuedSlots(id)
		want := make([]int64, maxRuns)
		for i := range want {
			want[i] = first.Unix() + int64(i)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			wrong = append(wrong, fmt.Sprintf("%s: slots %v, want %v", id, got, want))
		}
		for s, rows := range c.received.OutboxRows(id) {
			if rows > 1 {
				wrong = append(wrong, fmt.Sprintf("%s: slot %d fired from %d outbox rows", id, s, rows))
			}
		}
	}
	require.Empty(t, head(wrong), "%d jobs did not run exactly %d times", len(wrong), maxRuns)
}
