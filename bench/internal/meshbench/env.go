package meshbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/cronmesh/cronmesh/bench/internal/machine"
	"github.com/cronmesh/cronmesh/bench/internal/pause"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	"github.com/cronmesh/cronmesh/bench/internal/target"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// namespace is the tenant every benchmark job belongs to.
const namespace = "bench"

// Config is what every scenario shares.
type Config struct {
	BinDir       string // the service binaries (make build)
	PostgresURL  string
	AMQPURL      string
	Tag          string // unique per run; prefixes every schema and broker name
	TriggerNodes int    // default 2
	Partitions   int    // ring partitions (default ring.DefaultPartitions, the product's)
	Out          string // append the Markdown report here as well as to stdout
	WorkDir      string // logs, etcd data and profiles (default a temporary directory)
	Profile      bool   // take CPU profiles of every service
	ProfileSecs  int    // length of each CPU profile (default 30)
	// ExtraArgs add flags per service (meshrun.Options.ExtraArgs), for an
	// experiment; the report says the mesh then differs from `make dev`.
	ExtraArgs map[string][]string
	Callers   int // concurrent BatchCreateJobs callers (default 2)
	// Ceiling is how long each ceiling is measured (0: default 15 s;
	// negative: skipped).
	Ceiling time.Duration
	// Command is the command line that ran the benchmark, for the report.
	Command string
	Log     *slog.Logger
}

// env is one running mesh and what the benchmark attached to it.
type env struct {
	cfg       Config
	name      string
	key       string
	dir       string
	db        *pgxpool.Pool // public schema: ceilings, machine description
	amqp      *amqp091.Connection
	etcd      *exec.Cmd // bin/devetcd, as `make dev` runs it
	etcdDone  chan struct{}
	mesh      *meshrun.Mesh
	trigger   *pgxpool.Pool // the trigger's schema, to count projected jobs
	target    *target.Server
	registry  registryv1connect.JobServiceClient
	procs     *procstat.Sampler
	machine   machine.Machine
	loadStart string
	started   time.Time
}

func (c *Config) defaults() {
	c.ProfileSecs = cmp.Or(c.ProfileSecs, 30)
	c.Callers = cmp.Or(c.Callers, 2)
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

// newEnv connects to the servers, describes the machine and starts the
// target; the mesh itself starts with startMesh, after the ceilings.
func newEnv(ctx context.Context, cfg Config, scenario string) (_ *env, err error) {
	cfg.defaults()
	if strings.Trim(cfg.Tag, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" || cfg.Tag == "" {
		return nil, fmt.Errorf("meshbench: tag %q: lower-case letters, digits and '_' only", cfg.Tag)
	}
	e := &env{cfg: cfg, name: "mb_" + cfg.Tag + "_" + scenario, key: "bench-key-" + cfg.Tag + "-0123456789abcdef", procs: procstat.New()}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.loadStart, e.started = procstat.LoadAverage(), time.Now()
	e.dir = cfg.WorkDir
	if e.dir == "" {
		if e.dir, err = os.MkdirTemp("", "mesh-bench-"); err != nil {
			return nil, err
		}
	}
	e.dir = filepath.Join(e.dir, scenario)
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return nil, err
	}
	if e.db, err = postgres.Connect(ctx, postgres.Options{URL: cfg.PostgresURL, Schema: "public", MaxConns: 8}); err != nil {
		return nil, err
	}
	if e.amqp, err = amqp091.Dial(cfg.AMQPURL); err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	e.machine = machine.Describe(ctx, e.db, e.amqp)
	if e.target, err = target.Start(); err != nil {
		return nil, err
	}
	return e, nil
}

// startMesh starts etcd and the mesh, and connects a registry client and
// the trigger schema.
func (e *env) startMesh(ctx context.Context) error {
	addr, err := freeport.Addr()
	if err != nil {
		return err
	}
	logDir := filepath.Join(e.dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	binDir, err := filepath.Abs(e.cfg.BinDir)
	if err != nil {
		return err
	}
	if err := e.startEtcd(ctx, filepath.Join(binDir, "devetcd"), addr, logDir); err != nil {
		return err
	}
	extra := map[string][]string{}
	for _, svc := range meshrun.Services() {
		extra[svc] = append([]string{"--pprof"}, e.cfg.ExtraArgs[svc]...)
	}
	e.cfg.Log.Info("starting the mesh as make dev runs it", "name", e.name, "logs", logDir)
	e.mesh, err = meshrun.Start(ctx, meshrun.Options{
		BinDir: binDir, PostgresURL: e.cfg.PostgresURL, AMQPURL: e.cfg.AMQPURL,
		EtcdEndpoints: []string{"http://" + addr}, Name: e.name,
		APIKeys: map[string]string{namespace: e.key}, AsDev: true,
		TriggerNodes: e.cfg.TriggerNodes, LogDir: logDir, ExtraArgs: extra,
	})
	if err != nil {
		return err
	}
	if e.trigger, err = postgres.Connect(ctx, postgres.Options{URL: e.cfg.PostgresURL, Schema: e.mesh.Schemas["trigger"], MaxConns: 2}); err != nil {
		return err
	}
	httpClient, err := rpcclient.NewHTTPClient(tlsconfig.Client{})
	if err != nil {
		return err
	}
	e.registry = registryv1connect.NewJobServiceClient(httpClient, e.mesh.Registry.URL,
		connect.WithInterceptors(bearer(e.key)))
	return nil
}

// startEtcd runs bin/devetcd on addr, as `make dev` does (a process of its
// own, so that its CPU is the product's, not the bench's), and waits until
// it accepts connections.
func (e *env) startEtcd(ctx context.Context, bin, addr, logDir string) error {
	logFile, err := os.Create(filepath.Join(logDir, "etcd.log"))
	if err != nil {
		return err
	}
	e.etcd = exec.Command(bin, "--listen", addr, "--data-dir", filepath.Join(e.dir, "etcd"))
	e.etcd.Stdout, e.etcd.Stderr = logFile, logFile
	// etcd dies with the bench, however the bench ends.
	e.etcd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := e.etcd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("devetcd (make build): %w", err)
	}
	e.etcdDone = make(chan struct{})
	go func() {
		_ = e.etcd.Wait()
		logFile.Close()
		close(e.etcdDone)
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			return c.Close()
		}
		select {
		case <-e.etcdDone:
			return fmt.Errorf("devetcd exited; see %s", logFile.Name())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("devetcd not listening on %s after 30 s", addr)
		}
		if err := pause.For(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func bearer(key string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+key)
			return next(ctx, req)
		}
	}
}

// services are the mesh's processes by name, in start order.
func (e *env) services() []*meshrun.Process {
	m := e.mesh
	out := []*meshrun.Process{m.Registry}
	out = append(out, m.Triggers...)
	return append(out, m.Dispatcher, m.History, m.Alerting)
}

// tracked maps every process the report lists to its pid (the benchmark
// process itself holds the load generator, the target and the ledger).
func (e *env) tracked() map[string]int {
	out := map[string]int{benchProcess: os.Getpid()}
	if e.etcd != nil && e.etcd.Process != nil {
		out[etcdProcess] = e.etcd.Process.Pid
	}
	if e.mesh != nil {
		for _, p := range e.services() {
			out[p.Name] = p.PID()
		}
	}
	return out
}

// benchProcess names this process in the report; etcdProcess the etcd.
const (
	benchProcess = "mesh-bench (load, target, ledger)"
	etcdProcess  = "etcd (devetcd)"
)

// checkAlive fails when a service process has exited.
func (e *env) checkAlive() error {
	var errs []error
	for _, p := range e.services() {
		select {
		case <-p.Done():
			errs = append(errs, fmt.Errorf("%s exited (%v); log %s", p.Name, p.ExitErr(), p.LogPath))
		default:
		}
	}
	return errors.Join(errs...)
}

// register creates the plan's jobs through BatchCreateJobs, 1,000 a call,
// Callers at a time, and returns their ids by plan index.
func (e *env) register(ctx context.Context, plan *workload.Plan) ([]string, time.Duration, error) {
	ids := make([]string, len(plan.Jobs))
	const batch = 1000
	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, e.cfg.Callers)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range e.cfg.Callers {
		wg.Go(func() {
			for lo := range next {
				hi := min(lo+batch, len(plan.Jobs))
				req := &registryv1.BatchCreateJobsRequest{}
				for i := lo; i < hi; i++ {
					req.Requests = append(req.Requests, plan.Request(i, e.target.URL))
				}
				resp, err := e.registry.BatchCreateJobs(ctx, connect.NewRequest(req))
				if err != nil {
					errs <- fmt.Errorf("BatchCreateJobs of jobs %d-%d: %w", lo, hi, err)
					cancel()
					return
				}
				for i, j := range resp.Msg.GetJobs() {
					ids[lo+i] = j.GetId()
				}
			}
		})
	}
	lastLog := time.Now()
loop:
	for lo := 0; lo < len(plan.Jobs); lo += batch {
		select {
		case next <- lo:
		case <-ctx.Done():
			break loop
		}
		if time.Since(lastLog) > 10*time.Second {
			e.cfg.Log.Info("registering", "done", lo, "of", len(plan.Jobs))
			lastLog = time.Now()
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, 0, err
	default:
	}
	return ids, time.Since(start), ctx.Err()
}

// waitProjected waits until the trigger holds n jobs (its projection of the
// registry's events has caught up) or deadline, and returns when.
func (e *env) waitProjected(ctx context.Context, n int, deadline time.Time) (time.Time, error) {
	lastLog := time.Now()
	for {
		var got int
		if err := e.trigger.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE NOT deleted`).Scan(&got); err != nil {
			return time.Time{}, err
		}
		if got >= n {
			return time.Now(), nil
		}
		if err := e.checkAlive(); err != nil {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("only %d of %d jobs projected into the trigger by %s", got, n, deadline.Format("15:04:05"))
		}
		if time.Since(lastLog) > 10*time.Second {
			e.cfg.Log.Info("waiting for the trigger's projection", "projected", got, "of", n)
			lastLog = time.Now()
		}
		if err := pause.For(ctx, 250*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// close stops the mesh and removes everything the run created.
func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if e.trigger != nil {
		e.trigger.Close()
	}
	if e.mesh != nil {
		if err := e.mesh.Close(); err != nil {
			e.cfg.Log.Warn("stopping the mesh", "err", err)
		}
		if err := e.mesh.Cleanup(ctx); err != nil {
			e.cfg.Log.Warn("cleaning up the mesh", "err", err)
		}
	}
	if e.etcd != nil && e.etcdDone != nil {
		_ = e.etcd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.etcdDone:
		case <-time.After(10 * time.Second):
			_ = e.etcd.Process.Kill()
			<-e.etcdDone
		}
	}
	if e.target != nil {
		_ = e.target.Close()
	}
	if e.amqp != nil {
		_ = e.amqp.Close()
	}
	if e.db != nil {
		e.db.Close()
	}
	if e.cfg.WorkDir == "" && e.dir != "" {
		_ = os.RemoveAll(filepath.Dir(e.dir))
	}
}
