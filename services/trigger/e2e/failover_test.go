package e2e_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/ledger"
)

// jobCount is 1,000 in `make test`; `make chaos` raises it.
func jobCount(t *testing.T) int {
	if v := os.Getenv("CRONMESH_E2E_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	return 1000
}

// sleepUntil waits for the wall clock: these tests run real processes that
// fire on real time.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// TestFailover runs three trigger nodes with every-second jobs and, under
// load, SIGKILLs one, SIGSTOPs another past its lease and resumes it, and
// adds a fourth. Every slot of every job must reach the dispatch queue from
// exactly one outbox row (fired once), and no slot later than the 5 s
// promise. A row the relay published again (its leader frozen or killed
// between the broker's confirm and its delete) is logged, not failed: the
// broker has no deduplication, so the dispatcher absorbs those copies.
func TestFailover(t *testing.T) {
	c := newCluster(t, "", 3)
	jobs := c.createJobs(jobCount(t))
	c.waitProjected(len(jobs))

	ctx, stopConsuming := context.WithCancel(context.Background())
	consumer := c.consume(ctx)
	from := time.Now().Truncate(time.Second).Add(2 * time.Second)

	sleepUntil(from.Add(3 * time.Second))
	t.Log("SIGKILL trigger-1")
	require.NoError(t, c.node(1).Signal(syscall.SIGKILL))

	sleepUntil(from.Add(9 * time.Second))
	t.Logf("SIGSTOP trigger-2 for %s (past its lease)", 2*leaseTTL+time.Second)
	require.NoError(t, c.node(2).Signal(syscall.SIGSTOP))
	time.Sleep(2*leaseTTL + time.Second)
	require.NoError(t, c.node(2).Signal(syscall.SIGCONT))

	sleepUntil(from.Add(18 * time.Second))
	t.Log("adding trigger-4")
	c.addNode()

	sleepUntil(from.Add(24 * time.Second))
	to := from.Add(24*time.Second - 6*time.Second) // every slot up to here had 6 s to arrive
	c.stopAll()
	c.waitQuiet()
	stopConsuming()
	consumer.Wait()

	v := c.received.CheckQueue(jobs, from, to, from)
	t.Logf("%d slots checked, max lateness %s (slot %s), %d republished by the relay", v.Slots, v.MaxLate, v.MaxLateSlot, len(v.Republished))
	t.Logf("max lateness (s) of each second from %s (kill at +3, stop at +9, join at +18): %s",
		from.UTC().Format(time.TimeOnly), strings.Join(v.Lateness, " "))
	requireFiredOnce(t, v)
	require.LessOrEqual(t, v.MaxLate, 5*time.Second, "a slot reached the queue later than the 5 s promise")
}

// TestBrokerOutage cuts the nodes off RabbitMQ for 30 s: firing goes on into
// the outbox, and every slot goes out, once, when the broker is back.
func TestBrokerOutage(t *testing.T) {
	proxy := amqptest.NewProxy(t, false)
	c := newCluster(t, proxy.URL(), 2)
	jobs := c.createJobs(jobCount(t) / 5)
	c.waitProjected(len(jobs))
	ctx, stopConsuming := context.WithCancel(context.Background())
	consumer := c.consume(ctx) // reads the queue directly, not through the proxy
	from := time.Now().Truncate(time.Second).Add(2 * time.Second)

	sleepUntil(from.Add(2 * time.Second))
	t.Log("broker down for 30 s")
	proxy.Down()
	time.Sleep(30 * time.Second)
	proxy.Up()
	c.waitOutboxDrained(time.Minute)
	t.Log("the outbox drained after the broker came back")
	sleepUntil(time.Now().Add(3 * time.Second))
	to := time.Now().Truncate(time.Second).Add(-2 * time.Second)
	c.stopAll()
	c.waitQuiet()
	stopConsuming()
	consumer.Wait()

	v := c.received.CheckQueue(jobs, from, to, to.Add(time.Second))
	t.Logf("%d slots checked, %d republished by the relay", v.Slots, len(v.Republished))
	requireFiredOnce(t, v)
}

// requireFiredOnce requires every slot of the verdict at the broker, each
// from one outbox row, as a first attempt with its own execution id, none
// before its time (a republished row is the dispatcher's to absorb).
func requireFiredOnce(t *testing.T, v ledger.QueueVerdict) {
	t.Helper()
	require.Empty(t, v.Problems)
	require.Zero(t, v.Retries, "only first attempts: no dispatcher runs")
	require.Empty(t, head(v.NotEnqueued), "%d slots never reached the queue", len(v.NotEnqueued))
	require.Empty(t, head(v.DoubleEnqueued), "%d slots fired twice", len(v.DoubleEnqueued))
	require.Empty(t, head(v.Early), "%d slots reached the queue before their time", len(v.Early))
}

// waitProjected waits until the trigger holds every job with a next fire
// time.
func (c *cluster) waitProjected(n int) {
	c.t.Helper()
	pool := c.db
	require.Eventually(c.t, func() bool {
		var got int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE next_fire_at IS NOT NULL`).Scan(&got)
		return err == nil && got == n
	}, 60*time.Second, 100*time.Millisecond, "the trigger never projected all %d jobs", n)
}

// waitOutboxDrained waits until the trigger's outbox is empty: everything
// fired so far has been confirmed by the broker.
func (c *cluster) waitOutboxDrained(timeout time.Duration) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		var pending int
		err := c.db.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&pending)
		return err == nil && pending == 0
	}, timeout, 100*time.Millisecond, "the outbox never drained")
}

// stopAll stops every node gracefully.
func (c *cluster) stopAll() {
	c.t.Helper()
	for _, n := range c.mesh.Triggers {
		require.NoError(c.t, n.Stop(30*time.Second))
	}
}

// waitQuiet waits until no dispatch request has arrived for 2 s (at most a
// minute: the nodes are stopped, so the flow must end).
func (c *cluster) waitQuiet() {
	last, since, deadline := -1, time.Now(), time.Now().Add(time.Minute)
	for time.Since(since) < 2*time.Second && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if n, _ := c.received.Counts(); n != last {
			last, since = n, time.Now()
		}
	}
}

func head(s []string) []string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}
