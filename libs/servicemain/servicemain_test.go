package servicemain_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"log/slog"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/servicemain"
)

type testConfig struct {
	config.Common
	Schema string
}

func service(ran *string, got *testConfig) servicemain.Service[testConfig] {
	return servicemain.Service[testConfig]{
		Name: "svc",
		Register: func(c *testConfig, fs *flag.FlagSet) {
			c.Common.Register(fs, "127.0.0.1:9999")
			fs.StringVar(&c.Schema, "schema", "svc", "schema")
		},
		LogLevel:        func(c testConfig) string { return c.LogLevel },
		ShutdownTimeout: func(c testConfig) time.Duration { return c.ShutdownTimeout },
		Serve: func(_ context.Context, c testConfig, _ *slog.Logger) error {
			*ran, *got = "serve", c
			return nil
		},
		Migrate: func(_ context.Context, c testConfig, _ *slog.Logger) error {
			*ran, *got = "migrate", c
			return nil
		},
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		ran        string
		schema     string
		wantErr    string
		noMigrates bool
	}{
		{"serve by default", nil, nil, "serve", "svc", "", false},
		{"serve named, flag wins over env", []string{"serve", "--schema", "flag"}, map[string]string{"CRONMESH_SCHEMA": "env"}, "serve", "flag", "", false},
		{"env fallback", nil, map[string]string{"CRONMESH_SCHEMA": "env"}, "serve", "env", "", false},
		{"migrate", []string{"migrate", "--schema", "m"}, nil, "migrate", "m", "", false},
		{"migrate is a stray argument without a Migrate", []string{"migrate"}, nil, "", "", "migrate", true},
		{"unknown flag", []string{"--nope"}, nil, "", "", "nope", false},
		{"bad log level", []string{"--log-level", "loud"}, nil, "", "", "loud", false},
		{"TLS certificate without its key", []string{"--tls-cert", "/tls/tls.crt"}, nil, "", "", "--tls-cert and --tls-key go together", false},
		{"TLS key without its certificate, from env", nil, map[string]string{"CRONMESH_TLS_KEY": "/tls/tls.key"}, "", "", "--tls-cert and --tls-key go together", false},
		{"TLS migrate refused too", []string{"migrate", "--tls-cert", "/tls/tls.crt"}, nil, "", "", "--tls-key", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var ran string
			var got testConfig
			s := service(&ran, &got)
			if tt.noMigrates {
				s.Migrate = nil
			}
			var stderr bytes.Buffer
			err := servicemain.Run(t.Context(), s, tt.args, env(tt.env), &stderr)
			if tt.wantErr != "" {
				require.Error(t, err)
				require.Contains(t, err.Error()+stderr.String(), tt.wantErr)
				require.Empty(t, ran)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.ran, ran)
			require.Equal(t, tt.schema, got.Schema)
		})
	}
}

func TestRunPassesTheServiceError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	s := servicemain.Service[testConfig]{
		Name:            "svc",
		Register:        func(c *testConfig, fs *flag.FlagSet) { c.Common.Register(fs, "127.0.0.1:9999") },
		LogLevel:        func(c testConfig) string { return c.LogLevel },
		ShutdownTimeout: func(c testConfig) time.Duration { return c.ShutdownTimeout },
		Serve:           func(context.Context, testConfig, *slog.Logger) error { return boom },
	}
	require.ErrorIs(t, servicemain.Run(t.Context(), s, nil, func(string) (string, bool) { return "", false }, &bytes.Buffer{}), boom)
	require.Error(t, servicemain.Run(t.Context(), servicemain.Service[testConfig]{Name: "x"}, nil, nil, &bytes.Buffer{}))
}

// TestRunBoundsShutdown: once ctx is done, a Serve that does not return
// within --shutdown-timeout is given up on with an error and a goroutine
// dump showing where it hangs; one that returns in time is waited for.
func TestRunBoundsShutdown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	service := func(stopIn time.Duration) servicemain.Service[testConfig] {
		return servicemain.Service[testConfig]{
			Name:            "svc",
			Register:        func(c *testConfig, fs *flag.FlagSet) { c.Common.Register(fs, "127.0.0.1:9999") },
			LogLevel:        func(c testConfig) string { return c.LogLevel },
			ShutdownTimeout: func(c testConfig) time.Duration { return c.ShutdownTimeout },
			Serve: func(ctx context.Context, _ testConfig, _ *slog.Logger) error {
				<-ctx.Done()
				select {
				case <-time.After(stopIn):
				case <-release: // the hanging one, at the test's end
				}
				return nil
			},
		}
	}
	noEnv := func(string) (string, bool) { return "", false }
	args := []string{"--shutdown-timeout", "200ms"}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stderr bytes.Buffer
	err := servicemain.Run(ctx, service(time.Hour), args, noEnv, &stderr)
	require.ErrorContains(t, err, "shutdown did not finish within 200ms")
	require.Contains(t, stderr.String(), "servicemain_test.TestRunBoundsShutdown", "the goroutine dump shows the hanging Serve")

	require.NoError(t, servicemain.Run(ctx, service(0), args, noEnv, &bytes.Buffer{}))
}

// TestRunReadsCommonSettings: a configuration that embeds config.Common
// needs no LogLevel or ShutdownTimeout: Run reads them from it (the log
// level is checked, the shutdown timeout bounds the shutdown).
func TestRunReadsCommonSettings(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s := servicemain.Service[testConfig]{
		Name:     "svc",
		Register: func(c *testConfig, fs *flag.FlagSet) { c.Common.Register(fs, "127.0.0.1:9999") },
		Serve: func(ctx context.Context, _ testConfig, _ *slog.Logger) error {
			<-ctx.Done()
			<-release
			return nil
		},
	}
	noEnv := func(string) (string, bool) { return "", false }
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stderr bytes.Buffer
	err := servicemain.Run(ctx, s, []string{"--shutdown-timeout", "100ms", "--log-level", "error"}, noEnv, &stderr)
	require.ErrorContains(t, err, "shutdown did not finish within 100ms")
	require.ErrorContains(t, servicemain.Run(ctx, s, []string{"--log-level", "loud"}, noEnv, &bytes.Buffer{}), "loud")
}

// TestTuneGC changes the process's GC target, so it does not run in
// parallel; it restores the target it found.
func TestTuneGC(t *testing.T) {
	found := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(found) })

	servicemain.TuneGC(func(string) (string, bool) { return "", false })
	require.Equal(t, servicemain.DefaultGCPercent, debug.SetGCPercent(100), "GOGC unset: the services' default")

	servicemain.TuneGC(func(k string) (string, bool) { return "50", k == "GOGC" })
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC set: the runtime applied it, left alone")
}
