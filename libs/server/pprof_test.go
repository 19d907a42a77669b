package server_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/server"
)

func TestProfilingIsOptIn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profiling bool
		status    int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		srv, err := server.New(server.Options{Name: "pprof", Listen: "127.0.0.1:0", Profiling: tc.profiling})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		<-srv.Ready()
		resp, err := http.Get("http://" + srv.Addr() + "/debug/pprof/")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, tc.status, resp.StatusCode, "profiling=%v", tc.profiling)
		cancel()
		require.NoError(t, <-done)
	}
}
