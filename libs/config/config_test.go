package config_test

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/ratelimit"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/testkit/tlstest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// env turns a map into a lookup function, standing in for os.LookupEnv.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func newFlagSet() (*flag.FlagSet, *config.Common, *config.StringList, *int) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c config.Common
	c.Register(fs, "127.0.0.1:8081")
	// A service's own flags must get the environment fallback too.
	keys := &config.StringList{}
	fs.Var(keys, "api-keys", "API keys")
	workers := fs.Int("workers", 4, "workers")
	return fs, &c, keys, workers
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c *config.Common, keys []string, workers int)
		wantErr string
	}{
		{
			name: "defaults",
			check: func(t *testing.T, c *config.Common, keys []string, workers int) {
				require.Equal(t, config.Common{
					Listen:          "127.0.0.1:8081",
					PostgresURL:     "postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable",
					AMQPURL:         "amqp://guest:guest@127.0.0.1:5672/",
					OTLPEndpoint:    "",
					EtcdEndpoints:   []string{"127.0.0.1:2379"},
					LogLevel:        "info",
					ShutdownTimeout: 15 * time.Second,
					RateLimit:       ratelimit.Config{Default: ratelimit.DefaultRate, MaxKeys: ratelimit.DefaultMaxKeys},
					Limits: server.Limits{
						MaxRequestBytes: server.DefaultMaxRequestBytes,
						ReadTimeout:     server.DefaultReadTimeout,
						WriteTimeout:    server.DefaultWriteTimeout,
						IdleTimeout:     server.DefaultIdleTimeout,
						MaxHeaderBytes:  server.DefaultMaxHeaderBytes,
					},
					AuditRetention: 90 * 24 * time.Hour,
				}, *c)
				require.Empty(t, keys)
				require.Equal(t, 4, workers)
			},
		},
		{
			name: "env applied",
			env: map[string]string{
				"CRONMESH_LISTEN":            ":9000",
				"CRONMESH_POSTGRES_URL":      "postgres://db/x",
				"CRONMESH_OTLP_ENDPOINT":     "collector:4317",
				"CRONMESH_ETCD_ENDPOINTS":    "a:1, b:2",
				"CRONMESH_LOG_LEVEL":         "DEBUG",
				"CRONMESH_SHUTDOWN_TIMEOUT":  "3s",
				"CRONMESH_API_KEYS":          "k1,k2",
				"CRONMESH_WORKERS":           "9",
				"CRONMESH_MAX_REQUEST_BYTES": "1048576",
				"CRONMESH_READ_TIMEOUT":      "5s",
				"CRONMESH_WRITE_TIMEOUT":     "6s",
				"CRONMESH_IDLE_TIMEOUT":      "7s",
				"CRONMESH_MAX_HEADER_BYTES":  "8192",
			},
			check: func(t *testing.T, c *config.Common, keys []string, workers int) {
				require.Equal(t, ":9000", c.Listen)
				require.Equal(t, "postgres://db/x", c.PostgresURL)
				require.Equal(t, "collector:4317", c.OTLPEndpoint)
				require.Equal(t, []string{"a:1", "b:2"}, c.EtcdEndpoints)
				require.Equal(t, "debug", c.LogLevel)
				require.Equal(t, 3*time.Second, c.ShutdownTimeout)
				require.Equal(t, []string{"k1", "k2"}, keys)
				require.Equal(t, 9, workers)
				require.Equal(t, server.Limits{
					MaxRequestBytes: 1 << 20, ReadTimeout: 5 * time.Second, WriteTimeout: 6 * time.Second,
					IdleTimeout: 7 * time.Second, MaxHeaderBytes: 8 << 10,
				}, c.Limits)
			},
		},
		{
			name: "flag beats env",
			args: []string{"--listen", ":1", "-etcd-endpoints=x:1", "--workers=2", "--log-level", "warn"},
			env: map[string]string{
				"CRONMESH_LISTEN":         ":2",
				"CRONMESH_ETCD_ENDPOINTS": "y:1",
				"CRONMESH_WORKERS":        "bogus", // never applied, so never an error
				"CRONMESH_LOG_LEVEL":      "error",
			},
			check: func(t *testing.T, c *config.Common, _ []string, workers int) {
				require.Equal(t, ":1", c.Listen)
				require.Equal(t, []string{"x:1"}, c.EtcdEndpoints)
				require.Equal(t, 2, workers)
				require.Equal(t, "warn", c.LogLevel)
			},
		},
		{
			name: "empty env blanks a default",
			env:  map[string]string{"CRONMESH_ETCD_ENDPOINTS": "", "CRONMESH_AMQP_URL": ""},
			check: func(t *testing.T, c *config.Common, _ []string, _ int) {
				require.Empty(t, c.EtcdEndpoints)
				require.Empty(t, c.AMQPURL)
			},
		},
		{
			name: "rate limit from env",
			env:  map[string]string{"CRONMESH_RATE_LIMIT": "off", "CRONMESH_RATE_LIMIT_NAMESPACES": "team-a=5:10"},
			check: func(t *testing.T, c *config.Common, _ []string, _ int) {
				require.True(t, c.RateLimit.Default.Unlimited())
				require.Equal(t, ratelimit.NamespaceRates{"team-a": {PerSecond: 5, Burst: 10}}, c.RateLimit.Namespaces)
			},
		},
		{
			name:    "bad env rate limit names the variable",
			env:     map[string]string{"CRONMESH_RATE_LIMIT": "fast"},
			wantErr: "CRONMESH_RATE_LIMIT",
		},
		{
			name:    "bad env duration names the variable",
			env:     map[string]string{"CRONMESH_SHUTDOWN_TIMEOUT": "soon"},
			wantErr: "CRONMESH_SHUTDOWN_TIMEOUT",
		},
		{
			name:    "bad env int of a service flag names the variable",
			env:     map[string]string{"CRONMESH_WORKERS": "many"},
			wantErr: "CRONMESH_WORKERS",
		},
		{
			name:    "bad env log level",
			env:     map[string]string{"CRONMESH_LOG_LEVEL": "verbose"},
			wantErr: "CRONMESH_LOG_LEVEL",
		},
		{
			name:    "bad flag log level",
			args:    []string{"--log-level=trace"},
			wantErr: "unknown log level",
		},
		{
			name:    "unknown flag",
			args:    []string{"--nope"},
			wantErr: "nope",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs, c, keys, workers := newFlagSet()
			err := config.Parse(fs, tt.args, env(tt.env))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, c, *keys, *workers)
		})
	}
}

func TestParseNilLookup(t *testing.T) {
	t.Parallel()
	fs, c, _, _ := newFlagSet()
	require.NoError(t, config.Parse(fs, []string{"--listen=:5"}, nil))
	require.Equal(t, ":5", c.Listen)
}

func TestParseHelp(t *testing.T) {
	t.Parallel()
	fs, _, _, _ := newFlagSet()
	require.ErrorIs(t, config.Parse(fs, []string{"-h"}, nil), flag.ErrHelp)
}

func TestStringList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
		str  string
	}{
		{in: "", want: []string{}, str: ""},
		{in: "a", want: []string{"a"}, str: "a"},
		{in: "a,b", want: []string{"a", "b"}, str: "a,b"},
		{in: " a , b ,, ", want: []string{"a", "b"}, str: "a,b"},
		{in: ",,,", want: []string{}, str: ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			l := config.StringList{"old"}
			require.NoError(t, l.Set(tt.in))
			require.Equal(t, tt.want, []string(l))
			require.Equal(t, tt.str, l.String())
			require.Equal(t, tt.want, l.Get())
		})
	}
	var nilList *config.StringList
	require.Empty(t, nilList.String())
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"listen":         "CRONMESH_LISTEN",
		"postgres-url":   "CRONMESH_POSTGRES_URL",
		"etcd-endpoints": "CRONMESH_ETCD_ENDPOINTS",
		"a.b-c":          "CRONMESH_A_B_C",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, want, config.EnvName(in))
		})
	}
}

func TestTLSAndEtcdFlags(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "mesh")
	server, client := ca.Server("registry"), ca.Client("trigger")
	fs, c, _, _ := newFlagSet()
	require.NoError(t, config.Parse(fs, []string{
		"--tls-cert=" + server.CertFile, "--tls-key=" + server.KeyFile, "--tls-client-ca=" + ca.CertFile,
		"--etcd-ca-file=" + ca.CertFile, "--etcd-cert=" + client.CertFile, "--etcd-key=" + client.KeyFile, "--etcd-username=trigger",
	}, env(map[string]string{"CRONMESH_ETCD_PASSWORD": "from-env"})))
	require.Equal(t, tlsconfig.Server{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: ca.CertFile}, c.TLS)
	require.Equal(t, tlsconfig.Client{CAFile: ca.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile}, c.EtcdTLS)
	require.Equal(t, "trigger", c.EtcdUsername)
	require.Equal(t, "from-env", c.EtcdPassword)
	require.NoError(t, c.Validate())
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "mesh")
	server, client := ca.Server("registry"), ca.Client("trigger")
	cert, key, caFile := "--tls-cert="+server.CertFile, "--tls-key="+server.KeyFile, "--tls-client-ca="+ca.CertFile
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "nothing set"},
		{name: "TLS", args: []string{cert, key}},
		{name: "mutual TLS", args: []string{cert, key, caFile}},
		{name: "etcd TLS and auth", args: []string{"--etcd-ca-file=" + ca.CertFile, "--etcd-cert=" + client.CertFile, "--etcd-key=" + client.KeyFile, "--etcd-username=u", "--etcd-password=p"}},
		{name: "cert without key", args: []string{cert}, wantErr: "--tls-cert and --tls-key go together"},
		{name: "key without cert", args: []string{key}, wantErr: "--tls-cert and --tls-key go together"},
		{name: "client CA alone", args: []string{caFile}, wantErr: "--tls-client-ca needs --tls-cert and --tls-key"},
		{name: "missing certificate file", args: []string{cert + ".missing", key}, wantErr: "no such file"},
		{name: "key of another certificate", args: []string{cert, "--tls-key=" + client.KeyFile}, wantErr: "private key does not match"},
		{name: "client CA not a certificate", args: []string{cert, key, "--tls-client-ca=" + server.KeyFile}, wantErr: "no PEM certificate"},
		{name: "etcd cert without key", args: []string{"--etcd-cert=" + client.CertFile}, wantErr: "--etcd-cert and --etcd-key go together"},
		{name: "missing etcd CA", args: []string{"--etcd-ca-file=" + ca.CertFile + ".missing"}, wantErr: "--etcd-ca-file"},
		{name: "etcd password without user", args: []string{"--etcd-password=p"}, wantErr: "--etcd-password needs --etcd-username"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs, c, _, _ := newFlagSet()
			require.NoError(t, config.Parse(fs, tt.args, nil))
			err := c.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestServiceOwnMaxRequestBytesDefault(t *testing.T) {
	t.Parallel()
	parse := func(preset int, args ...string) int {
		var c config.Common
		c.Limits.MaxRequestBytes = preset
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		c.Register(fs, "127.0.0.1:0")
		require.NoError(t, fs.Parse(args))
		return c.Limits.MaxRequestBytes
	}
	require.Equal(t, server.DefaultMaxRequestBytes, parse(0), "no preset: the registry's default")
	require.Equal(t, server.SmallAPIMaxRequestBytes, parse(server.SmallAPIMaxRequestBytes), "a service's preset is its default")
	require.Equal(t, 1234, parse(server.SmallAPIMaxRequestBytes, "--max-request-bytes=1234"), "the flag wins")
}
