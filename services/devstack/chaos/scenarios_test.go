package chaos_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

// settle bounds how long a scenario waits after the load window for the
// window's last slots (and retries) to be delivered.
const settle = 3 * time.Minute

// TestTriggerSIGKILL kills a trigger node: the others take its partitions
// over within the lease and fire its slots, each once.
func TestTriggerSIGKILL(t *testing.T) {
	t.Parallel()
	r := start(t, 3)
	fault := r.steadyThenFault("SIGKILL trigger-1")
	r.mesh.Triggers[0].Kill()
	r.finish("trigger SIGKILL", fault, settle)
}

// TestTriggerSIGSTOP freezes a trigger node past its lease and resumes it:
// the others take its partitions over, and the resumed node, fenced, fires
// nothing twice.
func TestTriggerSIGSTOP(t *testing.T) {
	t.Parallel()
	r := start(t, 3)
	node := r.mesh.Triggers[1]
	fault := r.steadyThenFault("SIGSTOP trigger-2 past its lease")
	require.NoError(t, node.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = node.Signal(syscall.SIGCONT) })
	time.Sleep(3*2*time.Second + time.Second) // three lease TTLs and a second
	require.NoError(t, node.Signal(syscall.SIGCONT))
	r.finish("trigger SIGSTOP past the lease", fault, settle)
}

// TestDispatcherSIGKILL kills the dispatcher while the target holds
// requests open, and restarts it: the requests in flight are delivered
// again, with the same webhook-id.
func TestDispatcherSIGKILL(t *testing.T) {
	t.Parallel()
	r := start(t, 2)
	sleepUntil(r.from.Add(steady))
	r.target.hold()
	require.Eventually(t, func() bool { return r.target.held.Load() > 0 }, 10*time.Second, 10*time.Millisecond,
		"no delivery reached the held target")
	time.Sleep(500 * time.Millisecond) // more workers' deliveries pile up behind the first
	fault := r.steadyThenFault("SIGKILL the dispatcher mid-delivery")
	t.Logf("%d requests held open", r.target.held.Load())
	r.mesh.Dispatcher.Kill()
	r.target.release()
	_, err := r.mesh.Restart(t.Context(), r.mesh.Dispatcher)
	require.NoError(t, err)
	r.finish("dispatcher SIGKILL mid-delivery", fault, settle)
}

// TestHistoryAlertingSIGKILL kills history and alerting, leaves them down
// for the outage, and restarts them: they catch up from their queues, and
// the history holds every execution once.
func TestHistoryAlertingSIGKILL(t *testing.T) {
	t.Parallel()
	r := start(t, 2)
	fault := r.steadyThenFault("SIGKILL history and alerting")
	r.mesh.History.Kill()
	r.mesh.Alerting.Kill()
	time.Sleep(r.cfg.outage)
	_, err := r.mesh.Restart(t.Context(), r.mesh.History)
	require.NoError(t, err)
	_, err = r.mesh.Restart(t.Context(), r.mesh.Alerting)
	require.NoError(t, err)
	r.finish("history and alerting SIGKILL", fault, settle)
}

// TestRabbitMQRestart stops the RabbitMQ application of the mesh's own
// node for the outage and starts it again: every service reconnects, the
// triggers' outboxes hold what fired meanwhile, and nothing is lost or
// enqueued twice.
func TestRabbitMQRestart(t *testing.T) {
	t.Parallel()
	broker := amqptest.NewServer(t)
	r := startOn(t, 2, servers{amqp: broker.URL()})
	fault := r.steadyThenFault("RabbitMQ stop_app")
	broker.StopApp()
	time.Sleep(r.cfg.outage)
	broker.StartApp()
	r.finish("RabbitMQ restart", fault, settle)
}

// TestPostgresRestart crashes the mesh's own PostgreSQL cluster for the
// outage and starts it again.
func TestPostgresRestart(t *testing.T) {
	t.Parallel()
	database := pgtest.NewServer(t)
	r := startOn(t, 2, servers{postgres: database.URL()})
	fault := r.steadyThenFault("PostgreSQL stop")
	database.Stop()
	time.Sleep(r.cfg.outage)
	database.Start()
	r.finish("PostgreSQL restart", fault, settle)
}

// TestEtcdRestart stops etcd for the outage (longer than the lease) and
// restarts it: the nodes stop firing when their sessions lapse, take their
// partitions back afterwards and fire what fell due meanwhile, once.
func TestEtcdRestart(t *testing.T) {
	t.Parallel()
	r := start(t, 2)
	fault := r.steadyThenFault("etcd stop")
	r.etcd.Stop()
	time.Sleep(r.cfg.outage)
	r.etcd.Restart(t)
	r.finish("etcd restart", fault, settle)
}

// TestTargetTimeouts makes the target hang past the delivery timeout for
// the hang period, then answer again: everything is delivered after, by
// retries.
func TestTargetTimeouts(t *testing.T) {
	t.Parallel()
	r := start(t, 2)
	fault := r.steadyThenFault("the target hangs for " + r.cfg.hang.String())
	r.target.hang(r.cfg.hang)
	time.Sleep(r.cfg.hang)
	r.finish("target timeouts", fault, settle)
}

// TestClockOffset adds a trigger node whose clock is 10 s ahead: nothing
// fires before its nominal time by the real clock, nothing twice.
func TestClockOffset(t *testing.T) {
	t.Parallel()
	r := start(t, 2)
	fault := r.steadyThenFault("a trigger node with its clock 10 s ahead joins")
	skewed, err := r.mesh.AddTriggerWith(t.Context(), "trigger-skewed", "--clock-offset", "10s")
	require.NoError(t, err)
	// The skew was injected and seen: the node corrects its clock by -10 s
	// (a node that ignored the flag would pass the ledger trivially).
	resp, err := http.Get(skewed.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^trigger_clock_correction_seconds\S* (\S+)$`).FindSubmatch(body)
	require.NotNil(t, m, "the skewed node exports no trigger_clock_correction_seconds")
	correction, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	require.InDelta(t, -10, correction, 0.1, "the skewed node's clock correction")
	r.finish("clock offset +10 s", fault, settle)
}

// TestRollingRestart restarts every service in turn under load, as a
// Kubernetes rollout does: each replica is sent SIGTERM, must exit on its
// own within the harness's 30 s (a SIGKILL fails the scenario), and is
// started again; the next replica is touched only once the replacement is
// ready (a trigger node holds its partitions), so the trigger nodes go one
// at a time. The product promises no missed execution "even during
// deployments": nothing may be missed or fired twice.
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	r := start(t, 3)
	rollout := append([]*meshrun.Process{r.mesh.Registry}, r.mesh.Triggers...)
	rollout = append(rollout, r.mesh.Dispatcher, r.mesh.History, r.mesh.Alerting)
	fault := r.steadyThenFault("rolling restart of every service")
	for _, p := range rollout {
		began := time.Now()
		_, err := r.mesh.Restart(t.Context(), p)
		require.NoError(t, err)
		t.Logf("%s replaced and ready in %s", p.Name, time.Since(began).Round(time.Millisecond))
	}
	r.finish("rolling restart", fault, settle)
}
