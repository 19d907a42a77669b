package main

import (
	"fmt"
	"strings"

	"github.com/cronmesh/cronmesh/bench/internal/report"
)

// The speed targets of the registry (from the issue that asked for them).
// They are judged here, by a benchmark, never by timed test assertions.
const (
	targetCreateRate     = 500   // requests/s
	targetCreateP99Milli = 10    // ms
	targetBatchJobsPerS  = 20000 // jobs/s, with their events in the outbox
	targetListJobs       = 1_000_000
	targetListP99Milli   = 20 // ms
	targetLoadJobs       = 5_000_000
)

// verdict is how a measurement compares with a target.
type verdict string

const (
	met       verdict = "MET"
	missed    verdict = "MISSED"
	notJudged verdict = "NOT JUDGED"
)

func judge(ok bool) verdict {
	if ok {
		return met
	}
	return missed
}

// targetLine renders a verdict as the Markdown bullet that bench.sh greps
// for its summary: "- **MET** — <target>: <measured>".
func targetLine(v verdict, target, measured string) string {
	return fmt.Sprintf("- **%s** — %s: %s\n", v, target, measured)
}

// section starts a scenario's part of the report with the command that
// reproduces it.
func section(title, cmdline string) string {
	return fmt.Sprintf("\n### %s\n\n```sh\n%s\n```\n\n", title, cmdline)
}

// kvTable renders pairs as a two-column Markdown table.
func kvTable(pairs ...[2]string) string {
	rows := make([][]string, len(pairs))
	for i, p := range pairs {
		rows[i] = p[:]
	}
	return strings.TrimPrefix(report.Table([]string{"metric", "value"}, rows), "\n")
}

func kv(k, v string) [2]string { return [2]string{k, v} }

// latencyHeader and latencyRow render latency summaries as table rows.
func latencyHeader(first string) string {
	return fmt.Sprintf("| %s | calls | p50 | p90 | p99 | p99.9 | max | mean |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n", first)
}

func latencyRow(name string, s summary) string {
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s |\n",
		name, report.Num(int64(s.count)), report.Ms(s.p50), report.Ms(s.p90), report.Ms(s.p99), report.Ms(s.p999), report.Ms(s.mx), report.Ms(s.mean))
}
