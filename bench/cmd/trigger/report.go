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
)

// report is one scenario's Markdown output.
type report struct {
	b strings.Builder
}

func (r *report) h(level int, format string, args ...any) {
	fmt.Fprintf(&r.b, "\n%s %s\n\n", strings.Repeat("#", level), fmt.Sprintf(format, args...))
}

func (r *report) p(format string, args ...any) {
	fmt.Fprintf(&r.b, format+"\n", args...)
}

func (r *report) table(header []string, rows [][]string) {
	r.b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for i := range header {
		if i == 0 {
			r.b.WriteString(" --- |")
		} else {
			r.b.WriteString(" ---: |")
		}
	}
	r.b.WriteString("\n")
	for _, row := range rows {
		r.b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	r.b.WriteString("\n")
}

// emit prints the report and appends it to the --out file.
func (r *report) emit(out string) error {
	text := r.b.String()
	fmt.Print(text)
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(text)
	return err
}

// header writes the scenario's title, command, machine and the other
// benchmarks seen.
func (r *report) header(title string, m machine.Machine, e *env, others string) {
	r.h(2, "%s", title)
	r.p("Run %s, %s.", e.run, time.Now().UTC().Format(time.RFC3339))
	r.p("")
	r.p("```sh")
	r.p("%s", shellQuote(os.Args))
	r.p("```")
	r.p("")
	r.p("Each node: `%s`", e.commandLine("<id>"))
	r.p("")
	r.b.WriteString(m.Markdown())
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

func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$*?") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func secs(d time.Duration) string {
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func mibf(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func num(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var parts []string
	for len(s) > 3 {
		parts = append([]string{s[len(s)-3:]}, parts...)
		s = s[:len(s)-3]
	}
	parts = append([]string{s}, parts...)
	out := strings.Join(parts, ",")
	if neg {
		out = "-" + out
	}
	return out
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
		{"arrival at the consumer − nominal", num(arrive.n), ms(arrive.p50), ms(arrive.p90), ms(arrive.p99), ms(arrive.p999), ms(arrive.max)},
		{"commit (fire_time) − nominal", num(commit.n), ms(commit.p50), ms(commit.p90), ms(commit.p99), ms(commit.p999), ms(commit.max)},
	}
	if c := confirmed; c != nil {
		rows = append(rows, []string{"nominal → broker confirm (trigger's histogram, bucket bound)", num(c.count()),
			c.bound(.5, ms), c.bound(.9, ms), c.bound(.99, ms), c.bound(.999, ms), c.bound(1, ms)})
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
			heap = mibf(u.heapMax)
		}
		rssMed, rssMax := mib(u.rssMedian), mib(u.rssMax)
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
			mean = ms(time.Duration(sum / cnt * float64(time.Second)))
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
