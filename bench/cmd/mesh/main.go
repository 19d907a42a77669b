// Command mesh-bench is the end-to-end benchmark of the whole mesh: it
// starts the mesh from bin/ as `make dev` runs it (registry, three trigger
// nodes, dispatcher, history, alerting, devetcd) on the local PostgreSQL
// and RabbitMQ, measures the machine's ceilings, drives a workload through
// the registry to a target in this process and prints a Markdown report.
//
//	mesh-bench capacity [flags]   a ramp of every-second crons: the highest rate held with p99 < 1 s
//	mesh-bench sustained [flags]  a realistic mix at --rate executions/s for --duration
//	mesh-bench burst [flags]      --jobs one-time jobs all due on one second
//	mesh-bench memory [flags]     --jobs jobs in the trigger tier: its RSS
//	mesh-bench compare [--changed p,q] A.md B.md
//	                              two runs' CPU per execution, process by process
//
// The logic lives in bench/internal/meshbench; this is wiring.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/meshbench"
)

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: mesh-bench capacity|sustained|burst|memory|compare [flags] (-h for the flags)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "mesh-bench: interrupted")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "mesh-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, scenario string, args []string) error {
	if scenario == "compare" {
		return compare(args)
	}
	fs := flag.NewFlagSet(scenario, flag.ContinueOnError)
	var cfg meshbench.Config
	fs.StringVar(&cfg.BinDir, "bin-dir", "bin", "the service binaries (make build)")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", envOr("CRONMESH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable"), "PostgreSQL")
	fs.StringVar(&cfg.AMQPURL, "amqp-url", envOr("CRONMESH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ")
	fs.StringVar(&cfg.Tag, "tag", fmt.Sprintf("p%d", os.Getpid()), "names the run's schemas and broker objects (mb_<tag>_<scenario>...)")
	fs.IntVar(&cfg.TriggerNodes, "trigger-nodes", 0, "trigger processes (0: three, as make dev)")
	fs.StringVar(&cfg.Out, "out", "", "append the Markdown report to this file as well as stdout")
	fs.StringVar(&cfg.WorkDir, "work-dir", "", "logs, etcd data and profiles (default: a temporary directory, removed at the end)")
	fs.BoolVar(&cfg.Profile, "profile", true, "take a CPU profile of every service in the window and summarise it with go tool pprof -top after it (sustained, burst)")
	fs.IntVar(&cfg.ProfileSecs, "profile-seconds", 30, "length of the CPU profiles")
	fs.IntVar(&cfg.Callers, "callers", 2, "concurrent BatchCreateJobs callers")
	fs.DurationVar(&cfg.Ceiling, "ceiling-duration", 15*time.Second, "how long each machine ceiling is measured (negative: skip)")
	extra := fs.String("service-args", "", "extra flags per service, for an experiment (the mesh then differs from make dev): 'dispatcher=--workers-normal 128;trigger=--group-wait 5ms'")
	var err error
	switch scenario {
	case "capacity":
		var o meshbench.CapacityOptions
		fs.Float64Var(&o.From, "from", 1000, "offered executions/s of the first step")
		fs.Float64Var(&o.Step, "step", 1000, "increase from one step to the next")
		fs.Float64Var(&o.Max, "max", 10000, "offered executions/s of the last step")
		fs.DurationVar(&o.StepDuration, "step-duration", time.Minute, "each step's window")
		fs.DurationVar(&o.Settle, "settle", 5*time.Second, "how long after its window a step's slots may arrive")
		if err = parse(fs, args, &cfg, extra); err == nil {
			err = meshbench.Capacity(ctx, cfg, o)
		}
	case "sustained":
		var o meshbench.SustainedOptions
		fs.Float64Var(&o.Rate, "rate", 3000, "executions per second, on average over the window")
		fs.DurationVar(&o.Duration, "duration", 10*time.Minute, "the measured window")
		fs.DurationVar(&o.Setup, "setup", 0, "from the first registration to the window (0: estimated from the job count)")
		fs.DurationVar(&o.Warmup, "warmup", 30*time.Second, "recurring jobs start firing this long before the window (their start_time)")
		fs.DurationVar(&o.Grace, "grace", 2*time.Minute, "how long deliveries are awaited after the window")
		if err = parse(fs, args, &cfg, extra); err == nil {
			err = meshbench.Sustained(ctx, cfg, o)
		}
	case "burst":
		var o meshbench.BurstOptions
		fs.IntVar(&o.Jobs, "jobs", 100_000, "one-time jobs, all due on the same second")
		fs.DurationVar(&o.Lead, "lead", 0, "from the first registration to the due second (0: estimated from the job count)")
		if err = parse(fs, args, &cfg, extra); err == nil {
			err = meshbench.Burst(ctx, cfg, o)
		}
	case "memory":
		var o meshbench.MemoryOptions
		fs.IntVar(&o.Jobs, "jobs", 5_000_000, "jobs in the trigger tier (including --firing)")
		fs.IntVar(&o.Firing, "firing", 2000, "of those, every-second jobs registered through the registry, firing during the run")
		fs.DurationVar(&o.Duration, "duration", 60*time.Second, "how long the mesh runs once every job is in")
		if err = parse(fs, args, &cfg, extra); err == nil {
			err = meshbench.Memory(ctx, cfg, o)
		}
	default:
		return fmt.Errorf("unknown scenario %q (capacity, sustained, burst, memory, compare)", scenario)
	}
	return err
}

// compare prints the CPU per execution of two reports of one run each
// (--out of sustained or burst), process by process.
func compare(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	changed := fs.String("changed", "", "comma-separated processes the change touched, as the reports name them (registry, dispatcher, postgresql, trigger-1...); the others are the drift")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mesh-bench compare [--changed p,q] A.md B.md (A before the change, B after)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errors.New("compare takes two reports")
	}
	var runs [2]meshbench.CPUPerExecution
	for i, path := range fs.Args() {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		runs[i], err = meshbench.ParseCPUPerExecution(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	c := meshbench.Comparison{A: runs[0], B: runs[1]}
	if *changed != "" {
		c.Changed = strings.Split(*changed, ",")
	}
	return c.Write(os.Stdout)
}

// parse parses the flags and fills what Config derives from them.
func parse(fs *flag.FlagSet, args []string, cfg *meshbench.Config, extra *string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Command = "mesh-bench " + fs.Name() + " " + strings.Join(args, " ")
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg.ExtraArgs = map[string][]string{}
	for part := range strings.SplitSeq(*extra, ";") {
		svc, flags, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			if part != "" {
				return fmt.Errorf("--service-args: %q is not service=flags", part)
			}
			continue
		}
		cfg.ExtraArgs[svc] = append(cfg.ExtraArgs[svc], strings.Fields(flags)...)
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
