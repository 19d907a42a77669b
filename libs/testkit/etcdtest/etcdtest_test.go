package etcdtest_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
)

func TestClusterPutGetStopRestart(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	_, err := cli.Put(ctx, "k", "v1")
	require.NoError(t, err)

	c.Stop()
	c.Stop() // idempotent
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cli.Get(short, "k")
	cancelShort()
	require.Error(t, err, "a stopped cluster must not answer")

	c.Restart(t)
	c.Restart(t) // no-op while running
	require.NoError(t, etcdtest.Wait(ctx, cli))
	resp, err := cli.Get(ctx, "k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, "v1", string(resp.Kvs[0].Value), "data survives a restart")
}

// TestMinimumLeaseTTL pins the reason for the shortened election timeout: a
// 1 s lease is granted as 1 s, not raised to etcd's default minimum of 2 s.
func TestMinimumLeaseTTL(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	resp, err := cli.Grant(t.Context(), 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, resp.TTL)
}

func TestStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		wantErr bool
	}{
		{name: "bad scheme", url: "unix:///tmp/x", wantErr: true},
		{name: "no host", url: "http://", wantErr: true},
		{name: "ok", url: ""}, // a free port, picked below
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := tt.url
			if u == "" {
				addr, err := freeport.Addr()
				require.NoError(t, err)
				u = "http://" + addr
			}
			logger := slog.New(slog.DiscardHandler)
			e, err := etcdtest.Start(t.TempDir(), u, logger)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			defer e.Close()
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			require.NoError(t, err)
			defer cli.Close()
			_, err = cli.Put(t.Context(), "k", "v")
			require.NoError(t, err)
		})
	}
}
