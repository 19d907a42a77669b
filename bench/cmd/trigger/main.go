// Command trigger-bench benchmarks the trigger tier against the targets of
// the trigger issue, on real processes: it starts an embedded etcd in this
// process, launches bin/trigger nodes on their own schema, etcd prefix and
// broker names, loads jobs (publishing CREATED job events to the jobs
// exchange, as the registry would, or with COPY for the memory scenario),
// consumes the dispatch queue as the dispatcher would, samples every
// process's CPU and memory from /proc, and prints a Markdown report.
//
//	trigger-bench sustained [flags]  J every-second jobs: slots/s, lateness, duplicates, missing
//	trigger-bench burst [flags]      B at-jobs due on one second: time until the last arrived
//	trigger-bench memory [flags]     5,000,000 scheduled jobs on one node: RSS and heap
//	trigger-bench failover [flags]   2 nodes, SIGKILL one: lateness of its partitions' slots
//	trigger-bench projection [flags] N CREATED job events: time until all are in the schema
//	trigger-bench cleanup [flags]    drop leftover bench schemas, queues and exchanges
//
// Everything runs on loopback, is bounded in count and time, and is removed
// at the end (schema, queues, exchanges, etcd data, processes), also when
// interrupted. A missed target is reported, not an error: the exit status is
// non-zero only when a scenario could not run.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func usage() {
	fmt.Fprint(os.Stderr, `usage: trigger-bench <scenario> [flags]

scenarios:
  sustained   every-second jobs: sustained slots/s and lateness (default 5,000 jobs, 60 s)
  burst       at-jobs all due on the same second (default 100,000)
  memory      5,000,000 scheduled jobs on one node: RSS and heap
  failover    2 nodes, SIGKILL one: lateness of the dead node's partitions
  projection  CREATED job events: time until all are projected (default 200,000)
  cleanup     drop leftover bench schemas (prefix tbench_), queues and exchanges

run "trigger-bench <scenario> -h" for its flags.
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "sustained":
		err = runSustained(ctx, os.Args[2:])
	case "burst":
		err = runBurst(ctx, os.Args[2:])
	case "memory":
		err = runMemory(ctx, os.Args[2:])
	case "failover":
		err = runFailover(ctx, os.Args[2:])
	case "projection":
		err = runProjection(ctx, os.Args[2:])
	case "cleanup":
		err = runCleanup(ctx, os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "trigger-bench: interrupted")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "trigger-bench:", err)
		os.Exit(1)
	}
}
