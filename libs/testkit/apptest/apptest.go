// Package apptest runs a service's app (services/NAME/internal/app) in its
// own package's tests: started on a free port, stopped at the test's end,
// and checked for what every app shares.
package apptest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/server"
)

// App is what a service's app package builds: it runs until its context
// is done, serving on its Server.
type App interface {
	Run(ctx context.Context) error
	Server() *server.Server
}

// Start builds the app with newApp, runs it with the same context until
// the test ends (its cleanup stops it and requires Run to return nil) and
// returns it with its base URL once it serves. name is the service's, for
// the failures.
func Start[A App](t testing.TB, name string, newApp func(ctx context.Context) (A, error)) (A, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := newApp(ctx)
	if err != nil {
		cancel()
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Server().Ready():
	case err := <-done:
		cancel()
		t.Fatalf("%s stopped before serving: %v", name, err)
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done, name)
	})
	return a, "http://" + a.Server().Addr()
}

// WaitReady waits up to 30 s for the service at baseURL to answer /readyz
// with 200: its consumers subscribed, its partitions held. msg says what
// did not happen otherwise.
func WaitReady(t testing.TB, baseURL, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(baseURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, msg)
}

// ReachableName is a configuration with an internal AMQP name, the value
// of the flag Flag, that a namespace's AMQP targets could publish to
// ("<namespace>.*", or a name without a namespace).
type ReachableName[C any] struct {
	Flag, Value string
	Config      C
}

// RefusesReachableNames checks that serve (the app package's Serve) refuses
// each case's configuration, naming the flag and its value: an internal
// name a target could reach would let a namespace forge messages into the
// service. serve is given a context already done, so that an app built by
// mistake stops at once.
func RefusesReachableNames[C any](t *testing.T, serve func(context.Context, C, *slog.Logger) error, cases []ReachableName[C]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Flag, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := serve(ctx, tc.Config, slog.New(slog.DiscardHandler))
			require.ErrorContains(t, err, fmt.Sprintf("--%s %q", tc.Flag, tc.Value))
			require.ErrorContains(t, err, "could be published to by the AMQP targets of namespace")
		})
	}
}
