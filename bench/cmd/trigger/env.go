package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/cronmesh/cronmesh/bench/internal/ceiling"
	"github.com/cronmesh/cronmesh/bench/internal/machine"
	"github.com/cronmesh/cronmesh/bench/internal/pause"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
)

// schemaPrefix starts every schema (and broker name) a bench run creates, so
// that `cleanup` finds leftovers of a run that was killed.
const schemaPrefix = "tbench_"

// benchAPIKey is the API key the nodes accept; the bench never calls the
// API with it, it exists because a node refuses to start without one.
const benchAPIKey = "tbench=tbench-key-0123456789abcdef"

// common are the flags every scenario shares.
type common struct {
	bin          string
	postgresURL  string
	amqpURL      string
	partitions   int
	leaseTTL     time.Duration
	lookahead    time.Duration
	outboxLanes  int
	out          string
	logDir       string
	profileDir   string
	profileAfter time.Duration
	profileSecs  int
	extraArgs    string
	quietWait    time.Duration
	tag          string
	ceiling      time.Duration
}

// flags begins a scenario's flag set with the flags every scenario has.
func flags(name string) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	c := &common{}
	c.register(fs)
	return fs, c
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.bin, "bin", "bin/trigger", "the trigger binary")
	fs.StringVar(&c.postgresURL, "postgres-url", envOr("CRONMESH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable"), "PostgreSQL")
	fs.StringVar(&c.amqpURL, "amqp-url", envOr("CRONMESH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ")
	fs.IntVar(&c.partitions, "partitions", 256, "ring partitions (--partitions of the nodes)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 2*time.Second, "etcd lease TTL of the nodes")
	fs.DurationVar(&c.lookahead, "lookahead", 0, "--lookahead of the nodes (0: the node's default)")
	fs.IntVar(&c.outboxLanes, "outbox-lanes", 0, "--outbox-lanes of the nodes (0: the node's default)")
	fs.StringVar(&c.out, "out", "", "append the Markdown report to this file as well as stdout")
	fs.StringVar(&c.logDir, "log-dir", "", "directory for the nodes' logs (default: a temporary directory, removed at the end)")
	fs.StringVar(&c.profileDir, "profile-dir", "", "save CPU and heap profiles of every node here (needs --pprof on the nodes, always on)")
	fs.DurationVar(&c.profileAfter, "profile-after", 10*time.Second, "start the CPU profile this long into the measured window")
	fs.IntVar(&c.profileSecs, "profile-seconds", 20, "length of the CPU profile")
	fs.StringVar(&c.extraArgs, "node-args", "", "extra flags for every node, space-separated")
	fs.StringVar(&c.tag, "tag", "", "put this tag in every name the run creates (tbench_<tag>_...), so `cleanup --tag` removes exactly its leftovers")
	fs.DurationVar(&c.ceiling, "ceiling-duration", 15*time.Second, "sustained and burst: how long each machine ceiling is measured before the nodes start (negative: skip)")
	fs.DurationVar(&c.quietWait, "wait-quiet", 0, "before measuring, wait up to this long for no other benchmark (registry-bench, trigger-bench, go test) to run")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// env is one bench run: the names it created, the etcd it runs, the nodes
// it launched, and how to remove them all.
type env struct {
	c          common
	run        string // unique suffix
	schema     string
	prefix     string // etcd
	jobsX      string
	jobsQ      string
	dispatchX  string
	dispatchQ  string
	executionX string

	tmp     string
	logDir  string
	etcd    *embed.Etcd
	etcdURL string
	etcdCli *clientv3.Client
	db      *pgxpool.Pool // the run's schema
	amqp    *amqp091.Connection
	nodes   []*node
	sampler *sampler
	cleanup []func()
}

type node struct {
	id      string
	addr    string
	cmd     *exec.Cmd
	log     string
	done    chan struct{}
	killed  bool
	started time.Time
}

func (n *node) pid() int { return n.cmd.Process.Pid }

func (n *node) alive() bool {
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// setUp begins a scenario: it notes what else runs on the machine (waiting
// up to c.quietWait for it to be quiet), creates the run's environment and
// describes the machine. The caller closes the env.
func setUp(ctx context.Context, c common) (*env, machine.Machine, string, error) {
	others := quietCheck(ctx, c.quietWait)
	e, err := newEnv(ctx, c)
	if err != nil {
		return nil, machine.Machine{}, "", err
	}
	return e, machine.Describe(ctx, e.db, e.amqp), others, nil
}

// startNodes starts the nodes n1 to nN.
func (e *env) startNodes(ctx context.Context, n int) error {
	for i := range n {
		if _, err := e.startNode(ctx, fmt.Sprintf("n%d", i+1)); err != nil {
			return err
		}
	}
	return nil
}

// newEnv creates the run's names, starts etcd and connects to PostgreSQL and
// RabbitMQ. The caller defers e.close().
func newEnv(ctx context.Context, c common) (_ *env, err error) {
	if _, err := os.Stat(c.bin); err != nil {
		return nil, fmt.Errorf("trigger binary: %w (build it: go build -o bin/trigger ./services/trigger/cmd/trigger)", err)
	}
	run := fmt.Sprintf("%s_%d", time.Now().UTC().Format("0102150405"), os.Getpid())
	if c.tag != "" {
		run = c.tag + "_" + run
	}
	e := &env{
		c:          c,
		run:        run,
		schema:     schemaPrefix + run,
		prefix:     "/" + schemaPrefix + run + "/",
		jobsX:      schemaPrefix + run + ".jobs",
		jobsQ:      schemaPrefix + run + ".jobs.trigger",
		dispatchX:  schemaPrefix + run + ".dispatch",
		dispatchQ:  schemaPrefix + run + ".dispatchq",
		executionX: schemaPrefix + run + ".executions",
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.tmp, err = os.MkdirTemp("", "trigger-bench-")
	if err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, func() { _ = os.RemoveAll(e.tmp) })
	e.logDir = c.logDir
	if e.logDir == "" {
		e.logDir = filepath.Join(e.tmp, "logs")
	}
	if err := os.MkdirAll(e.logDir, 0o755); err != nil {
		return nil, err
	}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return nil, err
		}
	}

	etcdAddr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	e.etcdURL = "http://" + etcdAddr
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e.etcd, err = etcdtest.Start(filepath.Join(e.tmp, "etcd"), e.etcdURL, quiet)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	e.etcdCli, err = clientv3.New(clientv3.Config{Endpoints: []string{e.etcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}

	e.db, err = postgres.Connect(ctx, postgres.Options{URL: c.postgresURL, Schema: e.schema, MaxConns: 8})
	if err != nil {
		return nil, err
	}
	e.amqp, err = amqp091.Dial(c.amqpURL)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	e.sampler = newSampler()
	return e, nil
}

// close stops the nodes and removes everything the run created.
func (e *env) close() {
	if e.sampler != nil {
		e.sampler.stop()
	}
	for _, n := range e.nodes {
		e.stopNode(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if e.amqp != nil {
		if ch, err := e.amqp.Channel(); err == nil {
			for _, b := range broker.DispatchQueues(e.dispatchX, e.dispatchQ) {
				_, _ = ch.QueueDelete(b.Queue, false, false, false)
			}
			_, _ = ch.QueueDelete(e.jobsQ, false, false, false)
			for _, x := range []string{e.jobsX, e.dispatchX, e.executionX} {
				_ = ch.ExchangeDelete(x, false, false)
			}
			_ = ch.Close()
		}
		_ = e.amqp.Close()
	}
	if e.db != nil {
		if _, err := e.db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" CASCADE"); err != nil {
			logf("could not drop schema %s: %v", e.schema, err)
		}
		e.db.Close()
	}
	if e.etcdCli != nil {
		_ = e.etcdCli.Close()
	}
	if e.etcd != nil {
		e.etcd.Close()
	}
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
}

// nodeArgs are the flags of node id.
func (e *env) nodeArgs(id, addr string) []string {
	args := []string{
		"--listen", addr, "--node-id", id, "--schema", e.schema,
		"--postgres-url", e.c.postgresURL, "--amqp-url", e.c.amqpURL,
		"--etcd-endpoints", e.etcdURL, "--etcd-prefix", e.prefix,
		"--partitions", strconv.Itoa(e.c.partitions), "--lease-ttl", e.c.leaseTTL.String(),
		"--jobs-exchange", e.jobsX, "--jobs-queue", e.jobsQ,
		"--dispatch-exchange", e.dispatchX, "--dispatch-queue", e.dispatchQ,
		"--executions-exchange", e.executionX,
		"--api-keys", benchAPIKey, "--rate-limit", "off", "--registry-url", "", "--pprof", "--log-level", "warn", "--shutdown-timeout", "10s",
	}
	if e.c.lookahead > 0 {
		args = append(args, "--lookahead", e.c.lookahead.String())
	}
	if e.c.outboxLanes > 0 {
		args = append(args, "--outbox-lanes", strconv.Itoa(e.c.outboxLanes))
	}
	if e.c.extraArgs != "" {
		args = append(args, strings.Fields(e.c.extraArgs)...)
	}
	return args
}

// commandLine is how a node is started, for the report (no secrets: the API
// key is a fixed bench key).
func (e *env) commandLine(id string) string {
	return e.c.bin + " " + strings.Join(e.nodeArgs(id, "127.0.0.1:<port>"), " ")
}

// startNode launches a node and waits until it is ready (it holds its
// partitions and its projection is subscribed).
func (e *env) startNode(ctx context.Context, id string) (*node, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	n := &node{id: id, addr: addr, log: filepath.Join(e.logDir, id+".log"), done: make(chan struct{})}
	f, err := os.Create(n.log)
	if err != nil {
		return nil, err
	}
	n.cmd = exec.Command(e.c.bin, e.nodeArgs(id, addr)...)
	n.cmd.Stdout, n.cmd.Stderr = f, f
	// The node dies with the bench, however the bench ends.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	n.started = time.Now()
	if err := n.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start node %s: %w", id, err)
	}
	go func() {
		_ = n.cmd.Wait()
		f.Close()
		close(n.done)
	}()
	e.nodes = append(e.nodes, n)
	e.sampler.add("trigger "+id, n.cmd.Process.Pid, "http://"+addr+"/metrics")
	deadline := time.Now().Add(90 * time.Second)
	for {
		if !n.alive() {
			return nil, fmt.Errorf("node %s exited while starting; its log %s:\n%s", id, n.log, tail(n.log, 30))
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				logf("node %s ready on %s (pid %d) after %s", id, addr, n.pid(), time.Since(n.started).Round(time.Millisecond))
				return n, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node %s not ready after 90s; its log %s:\n%s", id, n.log, tail(n.log, 30))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopNode stops a node gracefully (SIGTERM, then SIGKILL after 20 s).
func (e *env) stopNode(n *node) {
	if !n.alive() {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGCONT)
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
		logf("node %s did not stop within 20s of SIGTERM; killing it", n.id)
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// killNode SIGKILLs a node and returns the moment of the kill.
func (e *env) killNode(n *node) (time.Time, error) {
	at := time.Now()
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return at, err
	}
	n.killed = true
	<-n.done
	return at, nil
}

// checkNodes fails when a node that was not killed on purpose has exited.
func (e *env) checkNodes() error {
	var errs []error
	for _, n := range e.nodes {
		if !n.killed && !n.alive() {
			errs = append(errs, fmt.Errorf("node %s exited unexpectedly; its log %s:\n%s", n.id, n.log, tail(n.log, 30)))
		}
	}
	return errors.Join(errs...)
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "trigger-bench: %s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// countProjected is the number of jobs the trigger holds with a next slot.
func (e *env) countProjected(ctx context.Context) (int, error) {
	var n int
	err := e.db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE next_fire_at IS NOT NULL`).Scan(&n)
	return n, err
}

// waitProjected waits until n jobs have a next slot, up to timeout, and
// returns when it happened.
func (e *env) waitProjected(ctx context.Context, n int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	last, lastLog := -1, time.Now()
	for {
		got, err := e.countProjected(ctx)
		if err == nil && got >= n {
			return time.Now(), nil
		}
		if err := e.checkNodes(); err != nil {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("only %d of %d jobs projected after %s", got, n, timeout)
		}
		if time.Since(lastLog) > 5*time.Second && got != last {
			logf("projected %d of %d jobs", got, n)
			last, lastLog = got, time.Now()
		}
		if err := pause.For(ctx, 100*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// waitQuiet waits until no other benchmark runs, up to max (0: no wait),
// and returns what was running when it gave up (empty when quiet).
func waitQuiet(ctx context.Context, max time.Duration) string {
	deadline := time.Now().Add(max)
	for {
		others := otherBenchmarks()
		if others == "" || max <= 0 || time.Now().After(deadline) {
			return others
		}
		logf("waiting for other benchmarks to finish: %s", others)
		if pause.For(ctx, 30*time.Second) != nil {
			return others
		}
	}
}

// measureCeilings measures the machine's ceilings (bench/internal/ceiling) with
// messages the size of the bench jobs' dispatch requests, before any node
// starts, so that the run's slots/s reads as a share of what the host
// allows: the hosts differ twofold from one day to the next.
func (e *env) measureCeilings(ctx context.Context) ceiling.Machine {
	size := ceiling.DispatchRequestSize(newJob(uuid.NewString(), 0, cronSchedule("* * * * * *", "UTC"), time.Now()))
	if e.c.ceiling >= 0 {
		logf("measuring the machine's ceilings (RabbitMQ, then PostgreSQL), %s each", e.c.ceiling)
	}
	return ceiling.Measure(ctx, ceiling.Options{AMQPURL: e.c.amqpURL, Pool: e.db, Name: e.schema, MessageSize: size, Duration: e.c.ceiling})
}
