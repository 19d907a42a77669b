// Package meshrun starts the whole cronmesh mesh — registry, trigger nodes,
// dispatcher, history and alerting — or any subset of it (Options.Only) as
// real processes on loopback, isolated from every other mesh on the same
// PostgreSQL, RabbitMQ and etcd by a name prefix. End-to-end tests (through
// libs/testkit/meshtest), the end-to-end benchmark and the fault-injection suite all
// start the mesh through it, so the way the services are wired together is
// written once.
//
// The services are processes rather than in-process servers on purpose: a
// SIGKILL, a SIGSTOP past a lease or a restart must hit a real process with
// its own broker connections, its own pools and its own exit path.
package meshrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
)

// Services returns the mesh's service binaries in the order Start starts
// them: each service's dependencies (the registry's events, the trigger's
// dispatch queues) exist before the next one needs them.
func Services() []string {
	return []string{"registry", "trigger", "dispatcher", "history", "alerting"}
}

// Build compiles every service binary into dir with `go build`. It runs from
// the caller's working directory, which must be inside the cronmesh module
// (tests and the repository's tools are).
func Build(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, svc := range Services() {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, svc), "github.com/cronmesh/cronmesh/services/"+svc+"/cmd/"+svc)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("meshrun: building %s: %w\n%s", svc, err, out)
		}
	}
	return nil
}

// Options configure one mesh. BinDir, PostgresURL, AMQPURL, EtcdEndpoints,
// Name, APIKeys and LogDir are required (the caller owns the logs: a test's
// temporary directory, a benchmark's work directory).
type Options struct {
	BinDir        string   // holds the binaries Build wrote
	PostgresURL   string   // the database every service's schema lives in
	AMQPURL       string   // RabbitMQ
	EtcdEndpoints []string // the trigger ring's etcd
	// Name prefixes every schema, exchange, queue and the etcd prefix, so
	// meshes on the same servers never see each other. Letters, digits and
	// '_' only (it is part of SQL identifiers).
	Name    string
	APIKeys map[string]string // namespace → key

	TriggerNodes  int             // trigger processes (default 2)
	Partitions    int             // ring partitions (default 16)
	LeaseTTL      time.Duration   // trigger etcd lease (default 2s)
	RetryTiers    []time.Duration // dispatcher delay tiers (default 1s, 2s, 4s)
	OTLPEndpoint  string          // OTLP/gRPC collector for every service; "" keeps tracing off
	AllowNetworks []string        // networks targets and alert webhooks may reach (default loopback)
	LogDir        string          // where each process logs (name.log)
	LogLevel      string          // default "info"
	// ExtraArgs adds flags per service name ("trigger" applies to every
	// node); a later flag overrides an earlier one, so these override
	// meshrun's own choices.
	ExtraArgs map[string][]string
	Env       []string // extra environment for every process
	// Only, when not empty, starts just these services (names of
	// Services), for a test of one service's process on its own; the
	// fields of the others stay nil.
	Only []string
	// AsDev starts every service with the flags `make dev`
	// (deploy/local/dev.sh) gives it and no others beyond the mesh's names,
	// keys and addresses: the binaries' own partitions, lease, retry tiers,
	// log level and shutdown timeout, and three trigger nodes unless
	// TriggerNodes says otherwise. The benchmarks measure the product this
	// way; tests keep meshrun's quicker choices. Partitions, LeaseTTL,
	// RetryTiers and LogLevel are ignored (RetryTiers becomes the
	// dispatcher's default, broker.DefaultRetryTiers).
	AsDev bool
}

// Names are the broker objects of one mesh.
type Names struct {
	Jobs, Executions, Dispatch, Retry, Dead string // exchanges
	DispatchQueue, RetryQueue, DeadQueue    string // the dispatcher's queue prefixes and dead-letter queue
	TriggerJobs, AlertingJobs               string // job-event queues
	HistoryExecutions, AlertingExecutions   string // execution-event queues
	RegistryExecutions                      string
	EtcdPrefix                              string
}

func namesFor(prefix string) Names {
	n := func(s string) string { return prefix + "." + s }
	return Names{
		Jobs: n("jobs"), Executions: n("executions"), Dispatch: n("dispatch"), Retry: n("retry"), Dead: n("dead"),
		DispatchQueue: n("dispatch"), RetryQueue: n("retry"), DeadQueue: n("dead"),
		TriggerJobs: n("trigger.jobs"), AlertingJobs: n("alerting.jobs"),
		HistoryExecutions: n("history"), AlertingExecutions: n("alerting.executions"),
		RegistryExecutions: n("registry.executions"),
		EtcdPrefix:         "/" + prefix + "/",
	}
}

// Mesh is a running mesh. Its fields are read-only to callers; use the
// methods to change which processes run.
type Mesh struct {
	opts    Options
	Names   Names
	Schemas map[string]string // service → PostgreSQL schema

	Registry, Dispatcher, History, Alerting *Process
	Triggers                                []*Process

	// historyAddr is where the history serves, chosen before the
	// registry starts so that the registry can be told it (--history-url);
	// empty when the mesh runs no history.
	historyAddr string

	mu    sync.Mutex
	procs []*Process // every process started, in start order
}

// Start runs the mesh and returns when every process reports ready on
// /readyz (a trigger node is ready once it holds its partitions). On error
// the processes already started are stopped.
func Start(ctx context.Context, opts Options) (*Mesh, error) {
	if opts.BinDir == "" || opts.PostgresURL == "" || opts.AMQPURL == "" || len(opts.EtcdEndpoints) == 0 || opts.Name == "" || len(opts.APIKeys) == 0 || opts.LogDir == "" {
		return nil, errors.New("meshrun: BinDir, PostgresURL, AMQPURL, EtcdEndpoints, Name, APIKeys and LogDir are required")
	}
	for _, svc := range opts.Only {
		if !slices.Contains(Services(), svc) {
			return nil, fmt.Errorf("meshrun: Only names %q, not a service", svc)
		}
	}
	if strings.Trim(opts.Name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		return nil, fmt.Errorf("meshrun: Name %q: only lower-case letters, digits and '_'", opts.Name)
	}
	if opts.AsDev {
		opts.TriggerNodes = cmp.Or(opts.TriggerNodes, 3)
		// Not passed to the dispatcher, which declares its own default
		// tiers: Cleanup deletes their queues.
		opts.RetryTiers = broker.DefaultRetryTiers()
	}
	opts.TriggerNodes = cmp.Or(opts.TriggerNodes, 2)
	opts.Partitions = cmp.Or(opts.Partitions, 16)
	opts.LeaseTTL = cmp.Or(opts.LeaseTTL, 2*time.Second)
	if len(opts.RetryTiers) == 0 {
		opts.RetryTiers = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
	}
	if len(opts.AllowNetworks) == 0 {
		opts.AllowNetworks = []string{"127.0.0.0/8", "::1/128"}
	}
	opts.LogLevel = cmp.Or(opts.LogLevel, "info")
	m := &Mesh{opts: opts, Names: namesFor(opts.Name), Schemas: map[string]string{}}
	for _, svc := range Services() {
		m.Schemas[svc] = opts.Name + "_" + svc
	}

	starts := func(svc string) bool { return len(opts.Only) == 0 || slices.Contains(opts.Only, svc) }
	var err error
	if starts("history") {
		// The registry, started first, reads executions from the history
		// (RerunExecution).
		if m.historyAddr, err = freeport.Addr(); err != nil {
			return nil, fmt.Errorf("meshrun: %w", err)
		}
	}
	if starts("registry") {
		if m.Registry, err = m.start(ctx, "registry", "registry", m.registryArgs()); err != nil {
			return nil, m.abort(err)
		}
	}
	if starts("trigger") {
		for i := range opts.TriggerNodes {
			if _, err = m.AddTrigger(ctx, fmt.Sprintf("trigger-%d", i+1)); err != nil {
				return nil, m.abort(err)
			}
		}
	}
	if starts("dispatcher") {
		if m.Dispatcher, err = m.start(ctx, "dispatcher", "dispatcher", m.dispatcherArgs()); err != nil {
			return nil, m.abort(err)
		}
	}
	if starts("history") {
		if m.History, err = m.run(ctx, "history", "history", m.historyArgs(), m.historyAddr); err != nil {
			return nil, m.abort(err)
		}
	}
	if starts("alerting") {
		if m.Alerting, err = m.start(ctx, "alerting", "alerting", m.alertingArgs()); err != nil {
			return nil, m.abort(err)
		}
	}
	return m, nil
}

func (m *Mesh) abort(err error) error {
	_ = m.Close()
	return err
}

// LogDir is where every process writes its log (name.log).
func (m *Mesh) LogDir() string { return m.opts.LogDir }

// AMQPURL is the RabbitMQ the mesh runs on.
func (m *Mesh) AMQPURL() string { return m.opts.AMQPURL }

// AddTrigger starts one more trigger node and waits until it holds its
// partitions.
func (m *Mesh) AddTrigger(ctx context.Context, nodeID string) (*Process, error) {
	return m.AddTriggerWith(ctx, nodeID)
}

// AddTriggerWith is AddTrigger with flags for this node only, after every
// other flag (the fault-injection suite gives one node a skewed clock this
// way); a restart of the node keeps them.
func (m *Mesh) AddTriggerWith(ctx context.Context, nodeID string, extraArgs ...string) (*Process, error) {
	p, err := m.start(ctx, nodeID, "trigger", append(m.triggerArgs(nodeID), extraArgs...))
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.Triggers = append(m.Triggers, p)
	m.mu.Unlock()
	return p, nil
}

// Restart stops p (SIGTERM, or nothing when it already exited) and starts
// the same service with the same flags on the same address, replacing p in
// the mesh's fields.
func (m *Mesh) Restart(ctx context.Context, p *Process) (*Process, error) {
	if err := p.Stop(30 * time.Second); err != nil {
		return nil, err
	}
	q, err := m.run(ctx, p.Name, p.binary, p.args, p.Addr)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, field := range []**Process{&m.Registry, &m.Dispatcher, &m.History, &m.Alerting} {
		if *field == p {
			*field = q
		}
	}
	for i, t := range m.Triggers {
		if t == p {
			m.Triggers[i] = q
		}
	}
	return q, nil
}

// Close stops every process with SIGTERM, the most recently started first
// (consumers before the producers they drain), waiting for each to exit.
func (m *Mesh) Close() error {
	m.mu.Lock()
	procs := slices.Clone(m.procs)
	m.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].Stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Mesh) common() []string {
	keys := make([]string, 0, len(m.opts.APIKeys))
	for ns, key := range m.opts.APIKeys {
		keys = append(keys, ns+"="+key)
	}
	slices.Sort(keys)
	args := []string{
		"--postgres-url", m.opts.PostgresURL, "--amqp-url", m.opts.AMQPURL,
		"--api-keys", strings.Join(keys, ","),
		// The mesh's tests and benchmarks drive load through a few keys:
		// the rate limit would measure itself (ExtraArgs can set one). It
		// guards the API only, not the path of an execution.
		"--rate-limit", "off",
	}
	if !m.opts.AsDev {
		args = append(args, "--log-level", m.opts.LogLevel, "--shutdown-timeout", "10s")
	}
	if m.opts.OTLPEndpoint != "" {
		args = append(args, "--otlp-endpoint", m.opts.OTLPEndpoint)
	}
	return args
}

func (m *Mesh) registryArgs() []string {
	// The burst scenario creates more jobs in one namespace than the
	// default quota allows.
	args := []string{"serve", "--schema", m.Schemas["registry"], "--exchange", m.Names.Jobs, "--max-jobs", "0",
		"--executions-exchange", m.Names.Executions, "--executions-queue", m.Names.RegistryExecutions}
	if m.historyAddr != "" {
		args = append(args, "--history-url", "http://"+m.historyAddr)
	}
	return m.with("registry", args...)
}

func (m *Mesh) triggerArgs(nodeID string) []string {
	args := []string{"--node-id", nodeID, "--schema", m.Schemas["trigger"],
		"--etcd-endpoints", strings.Join(m.opts.EtcdEndpoints, ","), "--etcd-prefix", m.Names.EtcdPrefix,
		"--jobs-exchange", m.Names.Jobs, "--jobs-queue", m.Names.TriggerJobs,
		"--dispatch-exchange", m.Names.Dispatch, "--dispatch-queue", m.Names.DispatchQueue,
		"--executions-exchange", m.Names.Executions}
	if !m.opts.AsDev {
		args = append(args, "--partitions", fmt.Sprint(m.opts.Partitions), "--lease-ttl", m.opts.LeaseTTL.String())
	}
	return m.with("trigger", args...)
}

func (m *Mesh) dispatcherArgs() []string {
	args := []string{"--schema", m.Schemas["dispatcher"],
		"--dispatch-exchange", m.Names.Dispatch, "--dispatch-queue", m.Names.DispatchQueue,
		"--retry-exchange", m.Names.Retry, "--retry-queue", m.Names.RetryQueue,
		"--dead-exchange", m.Names.Dead, "--dead-queue", m.Names.DeadQueue,
		"--executions-exchange", m.Names.Executions,
		"--allow-networks", strings.Join(m.opts.AllowNetworks, ",")}
	if !m.opts.AsDev {
		tiers := make([]string, len(m.opts.RetryTiers))
		for i, d := range m.opts.RetryTiers {
			tiers[i] = d.String()
		}
		args = append(args, "--retry-tiers", strings.Join(tiers, ","))
	}
	return m.with("dispatcher", args...)
}

func (m *Mesh) historyArgs() []string {
	return m.with("history", "serve", "--schema", m.Schemas["history"],
		"--executions-exchange", m.Names.Executions, "--queue", m.Names.HistoryExecutions)
}

func (m *Mesh) alertingArgs() []string {
	return m.with("alerting", "serve", "--schema", m.Schemas["alerting"],
		"--executions-exchange", m.Names.Executions, "--executions-queue", m.Names.AlertingExecutions,
		"--jobs-exchange", m.Names.Jobs, "--jobs-queue", m.Names.AlertingJobs,
		"--allow-networks", strings.Join(m.opts.AllowNetworks, ","))
}

// with is a service's own flags, then the common ones, then the caller's
// ExtraArgs, so that the caller has the last word.
func (m *Mesh) with(service string, args ...string) []string {
	args = append(args, m.common()...)
	switch {
	case service == "registry":
	case m.Registry != nil:
		// The managed API keys come from this mesh's registry (started
		// first, and restarted on the same address).
		args = append(args, "--registry-url", "http://"+m.Registry.Addr)
	default:
		// A mesh without a registry (Only) checks the configured keys
		// alone; the binaries' default would fetch keys from whatever
		// registry `make dev` runs on this machine.
		args = append(args, "--registry-url", "")
	}
	return append(args, m.opts.ExtraArgs[service]...)
}

func (m *Mesh) start(ctx context.Context, name, binary string, args []string) (*Process, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, fmt.Errorf("meshrun: %w", err)
	}
	return m.run(ctx, name, binary, args, addr)
}

// readyTimeout bounds a process's start, to its first ready answer. A
// service is ready once it has subscribed to its queues, a few round trips
// to the broker for each subscription (the dispatcher holds 768), and
// RabbitMQ registers every consumer of a quorum queue through its log. With
// several meshes starting at once on a 2-core host (the test suites run in
// parallel), that took over a minute.
const readyTimeout = 3 * time.Minute

func (m *Mesh) run(ctx context.Context, name, binary string, args []string, addr string) (*Process, error) {
	p, err := startProcess(name, filepath.Join(m.opts.BinDir, binary), binary, args, addr, filepath.Join(m.opts.LogDir, name+".log"), m.opts.Env)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.procs = append(m.procs, p)
	m.mu.Unlock()
	if err := p.waitReady(ctx, readyTimeout); err != nil {
		_ = p.Stop(10 * time.Second)
		return nil, err
	}
	return p, nil
}

// Process is one running service binary.
type Process struct {
	Name    string // "registry", "trigger-1", ...
	Addr    string // 127.0.0.1:port it serves on
	URL     string // http://Addr
	LogPath string

	binary string
	args   []string
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // the exit, set before done is closed
}

func startProcess(name, path, binary string, args []string, addr, logPath string, env []string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p := &Process{Name: name, Addr: addr, URL: "http://" + addr, LogPath: logPath, binary: binary, args: args, done: make(chan struct{})}
	p.cmd = exec.Command(path, append(slices.Clone(args), "--listen", addr)...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("meshrun: starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id, for signals and /proc sampling.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitErr is how the process exited (nil for status 0); valid after Done.
func (p *Process) ExitErr() error {
	<-p.done
	return p.err
}

// Signal sends sig (SIGKILL, SIGSTOP, SIGCONT, ...) to the process.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM (and SIGCONT, in case it is stopped) and waits up to
// timeout for a graceful exit, then kills it and says so.
func (p *Process) Stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("meshrun: %s did not stop within %s of SIGTERM; killed", p.Name, timeout)
	}
}

// waitReady polls /readyz until it answers 200, the process exits or the
// timeout passes.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("meshrun: %s exited before it was ready (%v); log: %s", p.Name, p.err, p.LogPath)
		case <-ctx.Done():
			return fmt.Errorf("meshrun: %s not ready within %s; log: %s", p.Name, timeout, p.LogPath)
		case <-tick.C:
		}
	}
}
