package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/amqptest"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/etcdtest"
	"github.com/cronmesh/cronmesh/libs/pgtest"
	"github.com/cronmesh/cronmesh/services/cronctl/internal/cli"
)

// binaries holds the real registry, trigger, dispatcher, history and
// alerting, built once by
// TestMain: the CLI is tested against the services it will talk to, started
// as processes because their app packages are internal to each service.
var binaries = map[string]string{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cronctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, svc := range []string{"registry", "trigger", "dispatcher", "history", "alerting"} {
		binaries[svc] = filepath.Join(dir, svc)
		build := exec.Command("go", "build", "-o", binaries[svc], "github.com/cronmesh/cronmesh/services/"+svc+"/cmd/"+svc)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building the", svc+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

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

// testKeys are the namespaces' keys; each test takes one.
var testKeys = []string{"jobs", "apply", "invalid", "dead", "ring", "secret", "etag", "preview", "history", "alerts", "keys"}

func keyOf(namespace string) string { return namespace + "-key-0123456789abcdef" }

func startStack(t *testing.T) *stack {
	t.Helper()
	var keys []string
	for _, ns := range testKeys {
		keys = append(keys, ns+"="+keyOf(ns))
	}
	apiKeys := strings.Join(keys, ",")
	_, regSchema := pgtest.New(t)
	_, trgSchema := pgtest.New(t)
	_, dspSchema := pgtest.New(t)
	_, hstSchema := pgtest.New(t)
	_, alrSchema := pgtest.New(t)
	etcd := etcdtest.New(t)
	jobsX := amqptest.UniqueName(t, "cronmesh.jobs")
	jobsQ := amqptest.UniqueName(t, "cronmesh.jobsq")
	dispatchX := amqptest.UniqueName(t, "cronmesh.dispatch")
	dispatchQ := amqptest.UniqueName(t, "cronmesh.dispatchq")
	executionsX := amqptest.UniqueName(t, "cronmesh.executions")
	retryX, retryQ := amqptest.UniqueName(t, "cronmesh.retry"), amqptest.UniqueName(t, "cronmesh.retryq")
	deadX, deadQ := amqptest.UniqueName(t, "cronmesh.dead"), amqptest.UniqueName(t, "cronmesh.deadq")
	historyQ := amqptest.UniqueName(t, "cronmesh.historyq")
	alertExecQ, alertJobsQ := amqptest.UniqueName(t, "cronmesh.alertexecq"), amqptest.UniqueName(t, "cronmesh.alertjobsq")
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		queues := []string{jobsQ, deadQ, historyQ, alertExecQ, alertJobsQ}
		for _, b := range broker.DispatchQueues(dispatchX, dispatchQ) {
			queues = append(queues, b.Queue)
		}
		for _, b := range broker.RetryTiers(retryX, retryQ, dispatchX, []time.Duration{time.Second}) {
			queues = append(queues, b.Queue)
		}
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, x := range []string{jobsX, dispatchX, executionsX, retryX, deadX} {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
	common := []string{"--postgres-url", pgtest.URL(), "--amqp-url", amqptest.URL(), "--api-keys", apiKeys, "--log-level", "warn", "--shutdown-timeout", "5s"}

	s := &stack{}
	// The registry reads executions from the history (`rerun`), which
	// starts later on an address chosen now.
	historyAddr := freeAddr(t)
	s.registry = startProcess(t, "registry", append([]string{"serve", "--schema", regSchema, "--exchange", jobsX, "--outbox-lanes", "4",
		"--history-url", "http://" + historyAddr}, common...))
	// The other services fetch the managed API keys from this registry.
	common = append(common, "--registry-url", s.registry)
	s.trigger = startProcess(t, "trigger", append([]string{
		"--schema", trgSchema, "--node-id", "cli-test-node",
		"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--etcd-prefix", "/" + amqptest.UniqueName(t, "ring") + "/",
		"--partitions", "8", "--lease-ttl", "2s",
		"--jobs-exchange", jobsX, "--jobs-queue", jobsQ,
		"--dispatch-exchange", dispatchX, "--dispatch-queue", dispatchQ, "--executions-exchange", executionsX,
	}, common...))
	s.dispatcher = startProcess(t, "dispatcher", append([]string{
		"--schema", dspSchema,
		"--dispatch-exchange", dispatchX, "--dispatch-queue", dispatchQ,
		"--retry-exchange", retryX, "--retry-queue", retryQ, "--retry-tiers", "1s",
		"--dead-exchange", deadX, "--dead-queue", deadQ, "--executions-exchange", executionsX,
		"--allow-networks", "127.0.0.0/8",
	}, common...))
	s.history = startProcessAt(t, "history", historyAddr, append([]string{
		"serve", "--schema", hstSchema, "--executions-exchange", executionsX, "--queue", historyQ,
		"--trace-link-template", traceLinkTemplate,
	}, common...))
	s.alerting = startProcess(t, "alerting", append([]string{
		"serve", "--schema", alrSchema,
		"--executions-exchange", executionsX, "--executions-queue", alertExecQ,
		"--jobs-exchange", jobsX, "--jobs-queue", alertJobsQ,
		"--allow-networks", "127.0.0.0/8", "--notify-poll", "200ms", "--notify-backoff", "200ms",
	}, common...))
	return s
}

// startProcess runs a service binary on a free loopback port and waits for
// /readyz; its log is shown when the test fails.
func startProcess(t *testing.T, name string, args []string) string {
	t.Helper()
	return startProcessAt(t, name, freeAddr(t), args)
}

// startProcessAt is startProcess on addr.
func startProcessAt(t *testing.T, name, addr string, args []string) string {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(binaries[name], append(args, "--listen", addr)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s log:\n%s", name, log)
			}
		}
	})
	require.Eventually(t, func() bool {
		select {
		case <-done:
			return false
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "%s never became ready", name)
	return "http://" + addr
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
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
