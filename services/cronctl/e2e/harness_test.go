package e2e_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
	"github.com/cronmesh/cronmesh/services/cronctl/internal/cli"
)

// bins are the mesh's binaries (libs/testkit/meshtest), built once for every test
// of the package: the CLI is tested against the services it will talk to,
// started as processes because their app packages are internal to each
// service.
var bins = &meshtest.Binaries{}

func TestMain(m *testing.M) { bins.Main(m) }

// stack is a registry, a trigger node, a dispatcher, the history and the
// alerting service on loopback against real PostgreSQL (a schema each),
// RabbitMQ (names of their own) and an embedded etcd. Every test uses its
// own API key, hence its own namespace. Targets and webhook channels are
// httptest servers on loopback, which the dispatcher and alerting allow.
type stack struct {
	registry, trigger, dispatcher, history, alerting string // base URLs

	mu      sync.Mutex
	outputs []string // everything cronctl printed, for the API key check
	keys    []string
	secrets []string // channel secrets given to cronctl, never to be printed
}

// traceLinkTemplate is the history's --trace-link-template.
const traceLinkTemplate = "http://127.0.0.1:16686/trace/{trace_id}"

// triggerNode is the node id of the stack's one trigger node (meshrun
// names them trigger-1, trigger-2, ...).
const triggerNode = "trigger-1"

// testKeys are the namespaces' keys; each test takes one.
var testKeys = []string{"jobs", "apply", "invalid", "dead", "ring", "secret", "etag", "preview", "history", "alerts", "keys"}

func keyOf(namespace string) string { return namespace + "-key-0123456789abcdef" }

func startStack(t *testing.T) *stack {
	t.Helper()
	keys := map[string]string{}
	for _, ns := range testKeys {
		keys[ns] = keyOf(ns)
	}
	mesh := meshtest.Start(t, bins, meshtest.Options{
		APIKeys: keys, TriggerNodes: 1, Partitions: 8, RetryTiers: []time.Duration{time.Second}, LogLevel: "warn",
		ExtraArgs: map[string][]string{
			"registry": {"--outbox-lanes", "4"},
			"history":  {"--trace-link-template", traceLinkTemplate},
			// Notifications go out and are retried quickly, so that the
			// alert tests see them within seconds.
			"alerting": {"--notify-poll", "200ms", "--notify-backoff", "200ms"},
		},
	})
	return &stack{
		registry: mesh.Registry.URL, trigger: mesh.Triggers[0].URL, dispatcher: mesh.Dispatcher.URL,
		history: mesh.History.URL, alerting: mesh.Alerting.URL,
	}
}

// result is what one cronctl invocation printed and returned.
type result struct {
	stdout, stderr string
	code           int
}

// cronctl runs the CLI as a person would, with the stack's endpoints and
// the namespace's API key in the environment (plus extra variables).
func (s *stack) cronctl(t *testing.T, namespace string, extraEnv map[string]string, args ...string) result {
	t.Helper()
	env := map[string]string{
		"CRONMESH_REGISTRY_URL":   s.registry,
		"CRONMESH_TRIGGER_URL":    s.trigger,
		"CRONMESH_DISPATCHER_URL": s.dispatcher,
		"CRONMESH_HISTORY_URL":    s.history,
		"CRONMESH_ALERTING_URL":   s.alerting,
		"CRONMESH_API_KEY":        keyOf(namespace),
	}
	for k, v := range extraEnv {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	var stdout, stderr bytes.Buffer
	code := cli.Run(context.Background(), args, cli.Env{
		Stdout:    &stdout,
		Stderr:    &stderr,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		ReadFile:  os.ReadFile,
	})
	s.mu.Lock()
	s.outputs = append(s.outputs, stdout.String(), stderr.String())
	s.keys = append(s.keys, keyOf(namespace))
	s.mu.Unlock()
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// ok runs cronctl and requires exit 0.
func (s *stack) ok(t *testing.T, namespace string, args ...string) string {
	t.Helper()
	r := s.cronctl(t, namespace, nil, args...)
	require.Equal(t, cli.ExitOK, r.code, "cronctl %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.stdout, r.stderr)
	return r.stdout
}

// addSecret records a channel secret that cronctl was given, so that
// requireNoSecretPrinted checks it never shows up.
func (s *stack) addSecret(secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets = append(s.secrets, secret)
}

// requireNoSecretPrinted asserts that no API key used and no channel
// secret given appears in anything cronctl printed.
func (s *stack) requireNoSecretPrinted(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NotEmpty(t, s.outputs)
	require.NotEmpty(t, s.secrets, "the channel tests gave cronctl secrets")
	for _, key := range append(append(s.keys, keyOf("secret")), s.secrets...) {
		for _, out := range s.outputs {
			require.NotContains(t, out, key)
		}
	}
}
