// Command registry-bench drives a running registry over its public API (the
// generated Connect client, h2c) and prints what it measured as Markdown:
// the exact command line, the numbers, where the CPU went and whether the
// registry's speed targets were met. It never starts the registry itself:
// deploy/local/bench.sh does that, so the benchmark measures the same binary
// and configuration that `make dev` runs.
//
//	registry-bench machine  [flags]   machine, Go, PostgreSQL and RabbitMQ versions
//	registry-bench create   [flags]   CreateJob at a constant (open-loop) rate
//	registry-bench batch    [flags]   BatchCreateJobs throughput and outbox drain
//	registry-bench load     [flags]   bulk-load the jobs table to a size
//	registry-bench list     [flags]   ListJobs latency on the loaded table
//	registry-bench cleanup  [flags]   drop the schema and delete the exchange
//
// Every flag also reads CRONMESH_<FLAG> from the environment (--api-key from
// CRONMESH_API_KEY); a flag given on the command line wins.
//
// Exit status: 0 when every scenario ran (even if a speed target was
// missed: that is reported, not failed), 1 when a call failed or a scenario
// could not run, 2 for a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	scenarios := allScenarios()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, scenarios)
		return 2
	}
	sc, ok := scenarios.find(args[0])
	if !ok {
		fmt.Fprintf(stderr, "registry-bench: unknown scenario %q\n", args[0])
		usage(stderr, scenarios)
		return 2
	}
	b, err := newBench(ctx, sc, args, lookupEnv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "registry-bench:", err)
		return 2
	}
	defer b.close()
	if err := sc.run(ctx, b); err != nil {
		fmt.Fprintf(stderr, "registry-bench %s: %v\n", sc.name, err)
		return 1
	}
	return 0
}

func usage(w io.Writer, scenarios scenarioList) {
	fmt.Fprintln(w, "usage: registry-bench <scenario> [flags]   (registry-bench <scenario> -h lists the flags)")
	for _, s := range scenarios {
		fmt.Fprintf(w, "  %-8s %s\n", s.name, s.summary)
	}
}
