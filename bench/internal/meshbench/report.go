package meshbench

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/ceiling"
	"github.com/cronmesh/cronmesh/bench/internal/ledger"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
)

// report is a Markdown document built up by a scenario.
type report struct{ b strings.Builder }

func (r *report) p(format string, args ...any) { fmt.Fprintf(&r.b, format+"\n", args...) }

func (r *report) h(level int, title string) {
	r.p("\n%s %s\n", strings.Repeat("#", level), title)
}

func (r *report) table(head []string, rows [][]string) {
	r.p("")
	r.p("| %s |", strings.Join(head, " | "))
	seps := make([]string, len(head))
	for i := range seps {
		seps[i] = "---"
	}
	r.p("| %s |", strings.Join(seps, " | "))
	for _, row := range rows {
		r.p("| %s |", strings.Join(row, " | "))
	}
	r.p("")
}

// emit prints the report and appends it to path (when set).
func (r *report) emit(path string) error {
	fmt.Print(r.b.String())
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(r.b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// header is the scenario's title, the command, the machine and the load.
func (r *report) header(title string, e *env) {
	r.h(2, title)
	r.p("Started %s. Command: `%s`. Mesh `%s`: registry, %d trigger nodes (%d ring partitions), dispatcher, history, alerting (bin/ of `make build`, every service with `--pprof`, log level warn), embedded etcd in the bench process; load average (1, 5, 15 min) at the start: %s.",
		e.started.UTC().Format("2006-01-02 15:04 UTC"), e.cfg.Command, e.name, e.cfg.TriggerNodes, e.cfg.Partitions, e.loadStart)
	r.p("")
	r.p("%s", e.machine.Markdown())
}

// ceilingTable reports the ceilings and the measured rate as a ratio.
func (r *report) ceilingTable(c ceiling.Machine, rate float64) {
	r.h(3, "Machine ceiling (measured in this run, before the mesh started)")
	r.p("%s", c.Markdown(rate, "executions/s", "An execution costs the mesh at least one such message (trigger → dispatcher) plus execution events to history and alerting (more messages), and several rows (ledger, outbox, jobs, the dispatcher's completion, history's executions and attempts), all on the same two cores: the ratios are upper bounds of what is left."))
}

// usageTable lists CPU seconds over [from, to] and peak RSS of every
// service, the servers and the bench process.
func (r *report) usageTable(e *env, from, to, end procstat.Snapshot) {
	secs := to.At.Sub(from.At).Seconds()
	var names []string
	for _, p := range e.services() {
		names = append(names, p.Name)
	}
	names = append(names, benchProcess, procstat.Postgres, procstat.RabbitMQ)
	rows := [][]string{}
	var total time.Duration
	for _, n := range names {
		cpu := procstat.CPU(from, to, n)
		total += cpu
		hwm := "-"
		if n != procstat.Postgres && n != procstat.RabbitMQ {
			hwm = mib(procstat.HWM(end, n))
		} else {
			hwm = mib(procstat.RSS(end, n)) + " (sum of RSS, shared pages counted per process)"
		}
		rows = append(rows, []string{n, fmt.Sprintf("%.1f s", cpu.Seconds()), fmt.Sprintf("%.0f %%", 100*cpu.Seconds()/secs), hwm})
	}
	rows = append(rows, []string{"**all of the above**", fmt.Sprintf("%.1f s", total.Seconds()), fmt.Sprintf("%.0f %% of 200 %%", 100*total.Seconds()/secs), ""})
	r.p("CPU over the measured window (%s) from /proc/PID/stat; peak RSS (VmHWM of /proc/PID/status, the whole life of the process) read at the end:", (to.At.Sub(from.At)).Round(time.Second))
	r.table([]string{"process", "CPU", "of one core", "peak RSS"}, rows)
}

// latenessRows are p50/p99/max rows per kind and overall.
func latenessRows(res ledger.Result) [][]string {
	row := func(name string, d []time.Duration) []string {
		if len(d) == 0 {
			return []string{name, "0", "-", "-", "-", "-"}
		}
		return []string{name, num(len(d)), ms(ledger.Quantile(d, 0.5)), ms(ledger.Quantile(d, 0.99)), ms(ledger.Quantile(d, 0.999)), ms(d[len(d)-1])}
	}
	rows := [][]string{row("**all**", res.Lateness)}
	for _, k := range workload.Kinds() {
		if d, ok := res.LateByKind[k]; ok {
			rows = append(rows, row(k.String(), d))
		}
	}
	return rows
}

func (r *report) profiles(ps []profile) {
	if len(ps) == 0 {
		return
	}
	for _, p := range ps {
		r.p("")
		if p.err != nil {
			r.p("**%s**: no profile (%v)", p.service, p.err)
			continue
		}
		r.p("**%s** (`%s`):", p.service, p.path)
		r.p("")
		r.p("```")
		r.p("%s", p.top)
		r.p("```")
	}
}

func judge(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// num formats n with thousands separators.
func num(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + num(-n)
	}
	var parts []string
	for len(s) > 3 {
		parts = append(parts, s[len(s)-3:])
		s = s[:len(s)-3]
	}
	parts = append(parts, s)
	slices.Reverse(parts)
	return strings.Join(parts, ",")
}
