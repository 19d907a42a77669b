package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cronmesh/cronmesh/libs/config"
)

// options are the flags every scenario takes.
type options struct {
	registryURL string
	apiKey      string
	protocol    string
	gzip        bool
	postgresURL string
	schema      string
	amqpURL     string
	exchange    string
	registryPID int
	out         string
	cpuProfile  string
	seed        uint64
	callTimeout time.Duration
	waitQuiet   time.Duration
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.registryURL, "registry-url", "http://127.0.0.1:8081", "base URL of the registry under test (h2c)")
	fs.StringVar(&o.apiKey, "api-key", "", "bearer API key of the namespace the jobs go to")
	fs.StringVar(&o.protocol, "protocol", "connect", "wire protocol: connect or grpc (both binary protobuf over h2c)")
	fs.BoolVar(&o.gzip, "gzip", true, "accept gzip-compressed responses, as connect-go clients do by default")
	fs.StringVar(&o.postgresURL, "postgres-url", config.DefaultPostgresURL, "database of the registry (to read the outbox and table sizes)")
	fs.StringVar(&o.schema, "schema", "registry", "PostgreSQL schema of the registry under test")
	fs.StringVar(&o.amqpURL, "amqp-url", config.DefaultAMQPURL, "RabbitMQ (its version; cleanup deletes the exchange)")
	fs.StringVar(&o.exchange, "exchange", "", "exchange of the registry under test (cleanup deletes it)")
	fs.IntVar(&o.registryPID, "registry-pid", 0, "process id of the registry, to attribute CPU and memory; 0: not attributed")
	fs.StringVar(&o.out, "out", "", "also append the Markdown report to this file")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of registry-bench itself (the client side) to this file")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the generated jobs: the same seed sends the same mix")
	fs.DurationVar(&o.callTimeout, "call-timeout", 60*time.Second, "deadline of each call")
	fs.DurationVar(&o.waitQuiet, "wait-quiet", 0, "before measuring, wait up to this long for the machine to be idle (other work skews a 2-core box); 0: do not wait")
}

// scenario is one subcommand: its own flags and what it runs.
type scenario struct {
	name     string
	summary  string
	register func(fs *flag.FlagSet)
	run      func(ctx context.Context, b *bench) error
}

type scenarioList []*scenario

func (l scenarioList) find(name string) (*scenario, bool) {
	for _, s := range l {
		if s.name == name {
			return s, true
		}
	}
	return nil, false
}

// allScenarios builds the subcommands; each owns its flag values.
func allScenarios() scenarioList {
	return scenarioList{
		machineScenario(),
		createScenario(),
		batchScenario(),
		loadScenario(),
		listScenario(),
		cleanupScenario(),
	}
}

// bench is what a scenario runs with: the parsed options, where the report
// goes, and the connections it needs, opened on first use.
type bench struct {
	opts    options
	out     io.Writer // the Markdown report
	log     io.Writer // progress, not part of the report
	cmdline string
	procs   *procSampler

	outFile *os.File
	db      *pgxpool.Pool
	profile *os.File
}

func newBench(ctx context.Context, sc *scenario, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) (*bench, error) {
	fs := flag.NewFlagSet("registry-bench "+sc.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := &bench{log: stderr, out: stdout}
	b.opts.register(fs)
	if sc.register != nil {
		sc.register(fs)
	}
	if err := config.Parse(fs, args[1:], lookupEnv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if b.opts.protocol != "connect" && b.opts.protocol != "grpc" {
		return nil, fmt.Errorf("--protocol must be connect or grpc, got %q", b.opts.protocol)
	}
	b.cmdline = commandLine(args)
	b.procs = newProcSampler(b.opts.registryPID, os.Getpid())
	if b.opts.out != "" {
		f, err := os.OpenFile(b.opts.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open report file: %w", err)
		}
		b.outFile = f
		b.out = io.MultiWriter(stdout, f)
	}
	if b.opts.cpuProfile != "" {
		f, err := os.Create(b.opts.cpuProfile)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("create CPU profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			b.close()
			return nil, fmt.Errorf("start CPU profile: %w", err)
		}
		b.profile = f
	}
	return b, nil
}

// database returns a small pool on the registry's database; it reads the
// outbox and sizes, it never writes jobs.
func (b *bench) database(ctx context.Context) (*pgxpool.Pool, error) {
	if b.db != nil {
		return b.db, nil
	}
	cfg, err := pgxpool.ParseConfig(b.opts.postgresURL)
	if err != nil {
		return nil, fmt.Errorf("parse --postgres-url: %w", err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	b.db = pool
	return pool, nil
}

func (b *bench) close() {
	if b.profile != nil {
		pprof.StopCPUProfile()
		b.profile.Close()
	}
	if b.db != nil {
		b.db.Close()
	}
	if b.outFile != nil {
		b.outFile.Close()
	}
}

// logf prints progress to stderr, never into the report.
func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "%s registry-bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// commandLine renders args as a shell command that reproduces the run. The
// value of --api-key is replaced by a variable: reports get shared.
func commandLine(args []string) string {
	parts := []string{"registry-bench"}
	redactNext := false
	for _, a := range args {
		switch {
		case redactNext:
			a, redactNext = "$CRONMESH_API_KEY", false
			parts = append(parts, a)
			continue
		case a == "--api-key" || a == "-api-key":
			redactNext = true
		case strings.HasPrefix(a, "--api-key=") || strings.HasPrefix(a, "-api-key="):
			a = a[:strings.Index(a, "=")+1] + "$CRONMESH_API_KEY"
			parts = append(parts, a)
			continue
		}
		if a == "" || strings.ContainsAny(a, " \t\n'\"$`\\*?&;|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// quietBusyPct is the machine-wide CPU use under which the machine counts as
// idle before a measurement.
const quietBusyPct = 15

// waitQuiet waits, up to --wait-quiet, until the machine's CPU use over a
// second is under quietBusyPct, so that builds and tests running beside the
// benchmark do not end up in its numbers. It never fails: a machine that
// stays busy is reported in the "other" column of the CPU tables.
func (b *bench) waitQuiet(ctx context.Context) {
	if b.opts.waitQuiet <= 0 {
		return
	}
	deadline := time.Now().Add(b.opts.waitQuiet)
	for {
		before := b.procs.snapshot()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		u := b.procs.usage(before, b.procs.snapshot())
		if u.Err != nil || u.busyPct() < quietBusyPct {
			return
		}
		if time.Now().After(deadline) {
			b.logf("the machine is still %.0f%% busy after waiting %s; measuring anyway", u.busyPct(), b.opts.waitQuiet)
			return
		}
		b.logf("waiting for the machine to be idle: %.0f%% busy (%s)", u.busyPct(), strings.Join(u.TopOther, ", "))
	}
}
