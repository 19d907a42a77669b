// Package meshbench is the end-to-end benchmark: it starts the whole mesh
// as real processes configured as `make dev` runs it (libs/meshrun with
// AsDev: registry, three trigger nodes, dispatcher, history, alerting and
// bin/devetcd, each with --pprof) on the local PostgreSQL and RabbitMQ,
// measures the machine's ceilings (package ceiling), registers a workload
// (package workload) through BatchCreateJobs whose webhooks go to a target
// in this process (package target), and reports what the target received
// against what was due (package ledger), with the CPU of the machine and of
// every process (package procstat) per execution.
//
// Scenarios: Capacity (a ramp of rates: the highest held with a p99 under a
// second), Sustained (a mix at a target rate for a window), Burst (one-time
// jobs all due on one second) and Memory (millions of jobs in the trigger
// tier). Nothing heavy runs in a measured window: CPU profiles are fetched
// there and summarised after it, and the ledger runs after the window. A
// missed target is reported, not an error; a scenario fails only when it
// cannot run.
package meshbench
