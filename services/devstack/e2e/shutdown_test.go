package e2e_test

import (
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
	"github.com/cronmesh/cronmesh/libs/testkit/otlptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/proxytest"
)

const shutdownKey = "shutdown-key-0123456789abcdef"

const (
	// shutdownTimeout is every service's --shutdown-timeout here.
	shutdownTimeout = 5 * time.Second
	// exitMargin is what a process may take past its shutdown timeout to
	// be reaped: the runtime's exit and the test's own scheduling on a
	// loaded machine.
	exitMargin = 3 * time.Second
)

// TestShutdownWithDependenciesDown: each service, running alone (the
// trigger as two nodes: a leader and a follower of its elections), is cut
// off from every dependency it has — PostgreSQL, RabbitMQ, its etcd and the
// OTLP collector, each behind a proxy (libs/testkit/proxytest), with a span
// waiting to be exported — and is then sent SIGTERM. It must exit on its
// own, with status 0, within its --shutdown-timeout: Kubernetes would
// otherwise SIGKILL it mid-shutdown. Twice: the dependencies refuse
// connections (a stopped server), or they are unreachable without an error
// (a network partition: every call waits for its own deadline).
func TestShutdownWithDependenciesDown(t *testing.T) {
	t.Parallel()
	// A traced call of each service's API: a span for the exporter to flush
	// at shutdown.
	procedures := map[string]string{
		"registry":   registryv1connect.JobServiceListJobsProcedure,
		"trigger":    triggerv1connect.TriggerServiceGetRingProcedure,
		"dispatcher": dispatcherv1connect.DispatchServiceListDeadLettersProcedure,
		"history":    historyv1connect.HistoryServiceListExecutionsProcedure,
		"alerting":   alertingv1connect.AlertServiceListRulesProcedure,
	}
	outages := []struct {
		name string
		cut  func(*proxytest.Proxy)
	}{
		{"refused", (*proxytest.Proxy).Down},
		{"unreachable", (*proxytest.Proxy).Blackhole},
	}
	for _, outage := range outages {
		for _, svc := range meshrun.Services() {
			t.Run(outage.name+"/"+svc, func(t *testing.T) {
				t.Parallel() // each has its own proxies, etcd, collector and mesh
				database := pgtest.NewProxy(t, false)
				broker := amqptest.NewProxy(t, false)
				etcd := etcdtest.New(t)
				etcdURL, err := url.Parse(etcd.Endpoints()[0])
				require.NoError(t, err)
				etcdProxy := proxytest.New(t, etcdURL.Host, false)
				collectorProxy := proxytest.New(t, otlptest.New(t).Endpoint(), false)
				mesh := meshtest.Start(t, bins, meshtest.Options{
					APIKeys: map[string]string{"shutdown": shutdownKey}, Only: []string{svc}, TriggerNodes: 2,
					Etcd: etcd, EtcdEndpoints: []string{"http://" + etcdProxy.Addr()},
					PostgresURL: database.URL(), AMQPURL: broker.URL(), OTLPEndpoint: collectorProxy.Addr(),
					ExtraArgs: map[string][]string{svc: {"--shutdown-timeout", shutdownTimeout.String()}},
				})
				// Runs before the mesh's cleanup, which drops its schemas and
				// queues through the proxies.
				t.Cleanup(func() { database.Up(); broker.Up() })
				procs := map[string][]*meshrun.Process{
					"registry": {mesh.Registry}, "trigger": mesh.Triggers, "dispatcher": {mesh.Dispatcher},
					"history": {mesh.History}, "alerting": {mesh.Alerting},
				}[svc]

				for _, p := range []*proxytest.Proxy{database.Proxy, broker.Proxy, etcdProxy, collectorProxy} {
					outage.cut(p)
				}
				call(t, procs[0].URL+procedures[svc])
				// Past the trigger's lease: every part has noticed and is
				// retrying (the trigger node that was not the retention
				// sweep's leader is campaigning again), which is when an
				// unbounded call hangs.
				time.Sleep(3 * time.Second)

				sent := time.Now()
				for _, p := range procs {
					require.NoError(t, p.Signal(syscall.SIGTERM))
				}
				for _, p := range procs {
					select {
					case <-p.Done():
						t.Logf("%s exited %s after SIGTERM", p.Name, time.Since(sent).Round(time.Millisecond))
						require.NoError(t, p.ExitErr(), "%s's exit status; log: %s", p.Name, p.LogPath)
					case <-time.After(time.Until(sent.Add(shutdownTimeout + exitMargin))):
						t.Fatalf("%s still running %s after SIGTERM (--shutdown-timeout %s)", p.Name, shutdownTimeout+exitMargin, shutdownTimeout)
					}
				}
			})
		}
	}
}

// call makes an authenticated Connect call with an empty request; any
// answer will do (the database is down), only the span matters. It gives
// up after 2 s, which ends the handler too, before the SIGTERM: a request
// still running then would be cut off at the end of the drain, and the
// exit status would rightly say so.
func call(t *testing.T, url string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+shutdownKey)
	client := &http.Client{Timeout: 2 * time.Second}
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}
}
