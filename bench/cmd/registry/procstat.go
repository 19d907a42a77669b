package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/procstat"
)

// The process groups CPU time is attributed to, besides procstat's
// PostgreSQL, RabbitMQ and other processes.
const (
	groupRegistry = "registry"
	groupBench    = "registry-bench"
)

func groupOrder() []string {
	return []string{groupRegistry, procstat.Postgres, procstat.RabbitMQ, groupBench, procstat.Other}
}

// procSampler attributes CPU time to the processes a benchmark involves by
// reading /proc before and after a measured window (bench/internal/procstat).
// It needs no profiler and no privileges, and it shows what the registry's
// own numbers cannot: how much of the machine PostgreSQL, RabbitMQ and the
// load generator took, on a box where all of them share two cores.
type procSampler struct {
	s       *procstat.Sampler
	tracked map[string]int
}

func newProcSampler(registryPID, selfPID int) *procSampler {
	tracked := map[string]int{groupBench: selfPID}
	if registryPID != 0 {
		tracked[groupRegistry] = registryPID
	}
	return &procSampler{s: procstat.New(), tracked: tracked}
}

func (p *procSampler) snapshot() procstat.Snapshot { return p.s.Snapshot(p.tracked) }

// cpuUsage is where the CPU went between two snapshots.
type cpuUsage struct{ procstat.Usage }

func (p *procSampler) usage(before, after procstat.Snapshot) cpuUsage {
	return cpuUsage{procstat.Between(before, after)}
}

// busyPct is the machine's busy share of all its cores.
func (u cpuUsage) busyPct() float64 {
	return 100 * u.Of(u.Busy) / float64(max(u.Cores, 1))
}

// cpuTableHeader and row render usages as one Markdown table.
func cpuTableHeader() string {
	return "| phase | wall | registry | postgres | rabbitmq | registry-bench | other | machine busy | iowait |\n" +
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
}

func (u cpuUsage) row(phase string) string {
	if u.Err != nil {
		return fmt.Sprintf("| %s | %s | CPU not sampled: %v | | | | | | |\n", phase, u.Wall.Round(time.Millisecond), u.Err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| %s | %.1f s ", phase, u.Wall.Seconds())
	for _, g := range groupOrder() {
		fmt.Fprintf(&b, "| %.2f ", u.Of(u.CPU[g]))
	}
	fmt.Fprintf(&b, "| %.0f %% of %d cores | %.0f %% |\n", u.busyPct(), u.Cores, 100*u.Of(u.IOWait)/float64(max(u.Cores, 1)))
	return b.String()
}

// cpuNote explains the table and names what "other" was.
func cpuNote(usages []cpuUsage) string {
	seen := map[string]bool{}
	var names []string
	for _, u := range usages {
		for _, o := range u.TopOther {
			name := strings.Fields(o)[0]
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	note := "CPU in cores (CPU seconds per wall second, from /proc/<pid>/stat); machine busy and iowait from /proc/stat; " +
		"\"other\" is machine busy minus the named processes, so it includes processes that came and went."
	if len(names) > 0 {
		note += " Running beside it: " + strings.Join(names, ", ") + "."
	}
	return note + "\n" + disturbance(usages)
}

// disturbedAbove is how much CPU other processes may take during a
// measurement before the report flags it.
const disturbedAbove = 0.15

// disturbance is a report line when other processes took a noticeable share
// of the machine during any of usages, "" otherwise.
func disturbance(usages []cpuUsage) string {
	worst := 0.0
	for _, u := range usages {
		worst = max(worst, u.Of(u.CPU[procstat.Other]))
	}
	if worst <= disturbedAbove {
		return ""
	}
	return fmt.Sprintf("\n**Disturbed:** processes outside the benchmark used up to %.2f cores during a measurement; "+
		"on a 2-core machine that moves the numbers, so treat them with care or rerun when the machine is idle (--wait-quiet).\n", worst)
}
