// Package meshbench is the end-to-end benchmark of issue 8: it starts the
// whole mesh as real processes (libs/meshrun: registry, 2-3 trigger nodes,
// dispatcher, history, alerting, each with --pprof) on the local PostgreSQL
// and RabbitMQ and an embedded etcd, measures the machine's ceiling
// (package ceiling), registers a workload (package workload) through
// BatchCreateJobs whose webhooks go to a target in this process (package
// target), and reports what the target received against what was due
// (package ledger), with every process's CPU and memory (package procstat)
// and CPU profiles of the services.
//
// Scenarios: Sustained (a mix at a target rate for a window), Burst (one-time
// jobs all due on one second) and Memory (millions of jobs in the trigger
// tier). A missed target is reported, not an error; a scenario fails only
// when it cannot run.
package meshbench
