package app_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/etcdclient"
	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/libs/testkit/tlstest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
	"github.com/cronmesh/cronmesh/services/trigger/internal/app"
)

// TestTLSEverywhere runs a trigger node as a hardened deployment does:
// its port over mutual TLS, and etcd over TLS with client certificates and
// password authentication, the node allowed only its ring's prefix.
func TestTLSEverywhere(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "mesh")
	etcdPair := ca.Server("etcd")
	etcd := etcdtest.NewTLS(t, etcdtest.ClientTLS{CertFile: etcdPair.CertFile, KeyFile: etcdPair.KeyFile, ClientCAFile: ca.CertFile})
	nodeCert := ca.Client("trigger")
	etcdFiles := tlsconfig.Client{CAFile: ca.CertFile, CertFile: nodeCert.CertFile, KeyFile: nodeCert.KeyFile}
	admin, err := etcdclient.New(etcdclient.Options{Endpoints: etcd.Endpoints(), TLS: etcdFiles})
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	prefix := "/" + amqptest.UniqueName(t, "ring") + "/"
	etcdtest.EnableAuth(t, admin, "cronmesh-trigger", "ring-password", prefix)

	_, schema := pgtest.New(t)
	listenerPair := ca.Server("trigger-api")
	cfg := app.Config{
		Common: config.Common{
			Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL(),
			EtcdEndpoints: etcd.Endpoints(), LogLevel: "warn", ShutdownTimeout: 5 * time.Second,
			EtcdTLS: etcdFiles, EtcdUsername: "cronmesh-trigger", EtcdPassword: "ring-password",
			TLS: tlsconfig.Server{CertFile: listenerPair.CertFile, KeyFile: listenerPair.KeyFile, ClientCAFile: ca.CertFile},
		},
		APIKeys:            config.StringList{"alpha=" + key},
		NodeID:             "node-tls",
		Schema:             schema,
		EtcdPrefix:         prefix,
		Partitions:         8,
		LeaseTTL:           2 * time.Second,
		JobsExchange:       amqptest.UniqueName(t, "cronmesh.jobs"),
		JobsQueue:          amqptest.UniqueName(t, "cronmesh.jobsq"),
		DispatchExchange:   amqptest.UniqueName(t, "cronmesh.dispatch"),
		DispatchQueue:      amqptest.UniqueName(t, "cronmesh.dispatchq"),
		ExecutionsExchange: amqptest.UniqueName(t, "cronmesh.executions"),
		OutboxLanes:        4,
		Lookahead:          5 * time.Second,
	}
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		for _, b := range broker.DispatchQueues(cfg.DispatchExchange, cfg.DispatchQueue) {
			_, _ = ch.QueueDelete(b.Queue, false, false, false)
		}
		_, _ = ch.QueueDelete(cfg.JobsQueue, false, false, false)
		for _, x := range []string{cfg.JobsExchange, cfg.DispatchExchange, cfg.ExecutionsExchange} {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	wrongPassword := cfg
	wrongPassword.EtcdPassword = "guess"
	_, err = app.New(t.Context(), wrongPassword, logger)
	require.ErrorContains(t, err, "authentication failed", "a wrong etcd password stops the node at start")

	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, logger)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	<-a.Server().Ready()
	url := "https://" + a.Server().Addr()

	withCert, err := rpcclient.NewHTTPClient(tlsconfig.Client{CAFile: ca.CertFile, CertFile: nodeCert.CertFile, KeyFile: nodeCert.KeyFile})
	require.NoError(t, err)
	t.Cleanup(withCert.CloseIdleConnections)
	noCert, err := rpcclient.NewHTTPClient(tlsconfig.Client{CAFile: ca.CertFile})
	require.NoError(t, err)
	t.Cleanup(noCert.CloseIdleConnections)

	// The kubelet's probe, without a certificate: ready once the node holds
	// its partitions, which it takes through the authenticated etcd.
	require.Eventually(t, func() bool {
		resp, err := noCert.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "the node never held its partitions")

	bearer := rpctest.Bearer(key)
	ring, err := triggerv1connect.NewTriggerServiceClient(withCert, url, bearer, connect.WithGRPC()).
		GetRing(t.Context(), connect.NewRequest(&triggerv1.GetRingRequest{}))
	require.NoError(t, err)
	require.NotEmpty(t, ring.Msg.GetMembers())

	_, err = triggerv1connect.NewTriggerServiceClient(noCert, url, bearer).
		GetRing(t.Context(), connect.NewRequest(&triggerv1.GetRingRequest{}))
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "an API key without a client certificate: %v", err)
}
