package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/machine"
	"github.com/cronmesh/cronmesh/bench/internal/pprofsave"
	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
)

// report is one scenario's Markdown output (bench/internal/report), with
// the trigger benchmark's sections.
type report struct{ benchreport.Doc }

func (r *report) h(level int, format string, args ...any) { r.H(level, fmt.Sprintf(format, args...)) }

func (r *report) p(format string, args ...any) { r.P(format, args...) }

func (r *report) table(header []string, rows [][]string) { r.Table(header, rows) }

// emit prints the report and appends it to the --out file.
func (r *report) emit(out string) error { return r.Emit(out) }

// header writes the scenario's title, command, machine and the other
// benchmarks seen.
func (r *report) header(title string, m machine.Machine, e *env, others string) {
	r.h(2, "%s", title)
	r.p("Run %s, %s.", e.run, time.Now().UTC().Format(time.RFC3339))
	r.p("")
	r.p("```sh")
	r.p("%s", benchreport.ShellQuote(os.Args))
	r.p("```")
	r.p("")
	r.p("Each node: `%s`", e.commandLine("<id>"))
	r.p("")
	r.Machine(m)
	r.p("")
	if others == "" {
		r.p("No other benchmark (registry-bench, trigger-bench, go test) was running when measuring started.")
	} else {
		r.p("**Other benchmarks were running when measuring started:** %s", others)
	}
	if seen := e.sampler.othersSeen(time.Time{}); seen != "" {
		r.p("")
		r.p("**Seen during the run (sampled every 5 s):** %s", seen)
	}
}

// judge is the verdict of a target that this run's size can judge.
func judge(judged, ok bool) string {
	if !judged {
		return "not judged (smaller than the target's size)"
	}
	return met(ok)
}

func met(ok bool) string {
	if ok {
		return "**MET**"
	}
	return "**MISSED**"
}

// latenessTable writes the arrival and commit lateness distributions and,
// unless confirmed is nil, the nodes' own nominal → broker confirm with
// its note.
func (r *report) latenessTable(arrive, commit dist, confirmed *confirms) {
	rows := [][]string{
		{"arrival at the consumer − nominal", benchreport.Num(arrive.n), benchreport.Ms(arrive.p50), benchreport.Ms(arrive.p90), benchreport.Ms(arrive.p99), benchreport.Ms(arrive.p999), benchreport.Ms(arrive.max)},
		{"commit (fire_time) − nominal", benchreport.Num(commit.n), benchreport.Ms(commit.p50), benchreport.Ms(commit.p90), benchreport.Ms(commit.p99), benchreport.Ms(commit.p999), benchreport.Ms(commit.max)},
	}
	if c := confirmed; c != nil {
		rows = append(rows, []string{"nominal → broker confirm (trigger's histogram, bucket bound)", benchreport.Num(c.count()),
			c.bound(.5, benchreport.Ms), c.bound(.9, benchreport.Ms), c.bound(.99, benchreport.Ms), c.bound(.999, benchreport.Ms), c.bound(1, benchreport.Ms)})
	}
	r.table([]string{"lateness", "slots", "p50", "p90", "p99", "p99.9", "max"}, rows)
	if confirmed != nil {
		r.confirmsNote(confirmed)
	}
}

// usageTable writes every process group's CPU and memory over [from, to].
func (r *report) usageTable(e *env, from, to time.Time) {
	us, machineBusy := e.sampler.usageOf(from, to)
	var names []string
	for g := range us {
		names = append(names, g)
	}
	slices.SortFunc(names, func(a, b string) int {
		ta, tb := strings.HasPrefix(a, "trigger "), strings.HasPrefix(b, "trigger ")
		if ta != tb {
			if ta {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var rows [][]string
	var sum float64
	for _, g := range names {
		u := us[g]
		sum += u.cpuPercent
		heap := ""
		if u.heapMax > 0 {
			heap = benchreport.MiB(u.heapMax)
		}
		rssMed, rssMax := benchreport.MiB(u.rssMedian), benchreport.MiB(u.rssMax)
		if g == groupPostgres || g == groupRabbit {
			// Summed RSS of processes sharing memory means little.
			rssMed, rssMax = fmt.Sprintf("(%d processes)", u.procs), ""
		}
		rows = append(rows, []string{g, fmt.Sprintf("%.0f %%", u.cpuPercent), rssMed, rssMax, heap})
	}
	rows = append(rows, []string{"everything else on the machine", fmt.Sprintf("%.0f %%", max(0, machineBusy-sum)), "", "", ""})
	rows = append(rows, []string{"**machine total**", fmt.Sprintf("**%.0f %%** of %d00 %%", machineBusy, runtime.NumCPU()), "", "", ""})
	r.table([]string{"process (group)", "CPU (100 % = one core)", "RSS median", "RSS max", "Go heap in use, max"}, rows)
	r.p("CPU from /proc/<pid>/stat (utime+stime) and RSS from the same, sampled every second over %s – %s (%s); PostgreSQL and RabbitMQ are every process named postgres / beam.smp (and its helpers), summed.",
		from.Format("15:04:05"), to.Format("15:04:05"), to.Sub(from).Round(time.Second))
}

// nodeMetricsTable writes commit and relay figures of each node over the window.
func (r *report) nodeMetricsTable(e *env, from, to time.Time) {
	var rows [][]string
	for _, n := range e.nodes {
		g := "trigger " + n.id
		cnt, ok := e.sampler.metricDelta(g, "trigger_commit_duration_seconds_count", from, to)
		if !ok {
			continue
		}
		sum, _ := e.sampler.metricDelta(g, "trigger_commit_duration_seconds_sum", from, to)
		slots, _ := e.sampler.metricDelta(g, "trigger_slots_total", from, to)
		pub, _ := e.sampler.metricDelta(g, "outbox_published_total", from, to)
		owned, _ := e.sampler.lastMetric(g, "ring_owned_partitions")
		mean := ""
		if cnt > 0 {
			mean = benchreport.Ms(time.Duration(sum / cnt * float64(time.Second)))
		}
		d := to.Sub(from).Seconds()
		rows = append(rows, []string{n.id, fmt.Sprintf("%.0f", owned), fmt.Sprintf("%.1f", cnt/d), mean,
			fmt.Sprintf("%.0f", slots/d), fmt.Sprintf("%.0f", pub/d)})
	}
	if len(rows) == 0 {
		return
	}
	r.table([]string{"node", "partitions owned", "commits/s", "mean commit", "slots committed/s", "relay published/s"}, rows)
}

// profile saves a CPU profile of every live node (in the background) and
// returns a wait function.
func profileNodes(ctx context.Context, e *env, name string, seconds int) func() {
	if e.c.profileDir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, n := range e.nodes {
		if !n.alive() {
			continue
		}
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", n.addr, seconds)
		path := filepath.Join(e.c.profileDir, fmt.Sprintf("%s-%s-cpu.pprof", name, n.id))
		wg.Go(func() {
			if err := pprofsave.Save(ctx, url, path, time.Duration(seconds+30)*time.Second); err != nil {
				logf("cpu profile of %s: %v", n.id, err)
			} else {
				logf("saved %s", path)
			}
		})
	}
	return wg.Wait
}

// heapProfiles saves a heap profile of every live node.
func heapProfiles(ctx context.Context, e *env, name string) {
	if e.c.profileDir == "" {
		return
	}
	for _, n := range e.nodes {
		if !n.alive() {
			continue
		}
		path := filepath.Join(e.c.profileDir, fmt.Sprintf("%s-%s-heap.pprof", name, n.id))
		if err := pprofsave.Save(ctx, "http://"+n.addr+"/debug/pprof/heap", path, 30*time.Second); err != nil {
			logf("heap profile of %s: %v", n.id, err)
		} else {
			logf("saved %s", path)
		}
	}
}
