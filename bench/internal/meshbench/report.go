package meshbench

import (
	"fmt"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/ceiling"
	"github.com/cronmesh/cronmesh/bench/internal/ledger"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	"github.com/cronmesh/cronmesh/bench/internal/report"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
)

// header is the scenario's title, the command, the mesh, the machine and
// the load.
func (e *env) header(d *report.Doc, title string) {
	d.H(2, title)
	extra := "none"
	if len(e.cfg.ExtraArgs) > 0 {
		extra = fmt.Sprintf("`%v` (**not as `make dev` runs**)", e.cfg.ExtraArgs)
	}
	d.P("Started %s. Command: `%s`. Mesh `%s` as `make dev` runs it (libs/meshrun AsDev: the binaries' defaults, bin/ of `make build`): registry, %d trigger nodes, dispatcher, history, alerting, devetcd; besides the mesh's names, keys and addresses each service has `--rate-limit off` (the API's limit; registration is setup, not measured) and `--pprof` (endpoints only; a profile runs only where the report says), the registry `--max-jobs 0`. Extra flags: %s. Load average (1, 5, 15 min) at the start: %s.",
		e.started.UTC().Format("2006-01-02 15:04 UTC"), e.cfg.Command, e.name, len(e.mesh.Triggers), extra, e.loadStart)
	d.Machine(e.machine)
}

// groups are the report's processes in order: the services, etcd, the
// bench process, then the servers.
func (e *env) groups() []string {
	var out []string
	for _, p := range e.services() {
		out = append(out, p.Name)
	}
	return append(out, etcdProcess, benchProcess, procstat.Postgres, procstat.RabbitMQ)
}

// product is the CPU the product spent: every group but the bench process
// and other processes.
func product(u procstat.Usage) time.Duration {
	return u.Named() - u.CPU[benchProcess]
}

// perExecution reports the CPU of a window per execution delivered in it:
// the whole machine's (what a capacity figure divides), the product's
// (services, etcd, PostgreSQL and RabbitMQ) and each process's.
func (e *env) perExecution(d *report.Doc, u procstat.Usage, executions int, end *procstat.Snapshot) {
	writePerExecution(d, u, executions, e.groups(), end)
}

// writePerExecution is perExecution's text for the processes groups, in
// their order; ParseCPUPerExecution reads it back.
func writePerExecution(d *report.Doc, u procstat.Usage, executions int, groups []string, end *procstat.Snapshot) {
	if executions <= 0 || u.Err != nil {
		d.P("No CPU per execution: %d executions, %v.", executions, u.Err)
		return
	}
	per := func(cpu time.Duration) string {
		return fmt.Sprintf("%.3f ms", float64(cpu)/float64(time.Millisecond)/float64(executions))
	}
	d.P("CPU per execution, over the %s executions delivered in the window: **machine %s** (busy %.2f of %d cores), the product's processes %s (the services, etcd, PostgreSQL, RabbitMQ), the bench process %s (load, target, ledger), other processes %s.",
		report.Num(executions), per(u.Busy), u.Of(u.Busy), u.Cores, per(product(u)), per(u.CPU[benchProcess]), per(u.CPU[procstat.Other]))
	d.Usage(u, groups, end)
	rows := [][]string{}
	for _, g := range groups {
		rows = append(rows, []string{g, per(u.CPU[g])})
	}
	d.Table([]string{"process", "CPU per execution"}, rows)
}

// ceilingTable reports the ceilings and the measured rate as a ratio.
func ceilingTable(d *report.Doc, c ceiling.Machine, rate float64) {
	d.H(3, "Machine ceiling (measured in this run, before the mesh started)")
	d.P("%s", c.Markdown(rate, "executions/s", "An execution costs the mesh at least one such message (trigger → dispatcher) plus execution events to history and alerting (more messages), and several rows (ledger, outbox, jobs, the dispatcher's completion, history's execution row), all on the same two cores: the ratios are upper bounds of what is left."))
}

// lateRow is a name, a count and p50/p99/max of sorted lateness.
func lateRow(name string, sorted []time.Duration) []string {
	if len(sorted) == 0 {
		return []string{name, "0", "-", "-", "-"}
	}
	return []string{name, report.Num(len(sorted)), report.Ms(report.Quantile(sorted, 0.5)), report.Ms(report.Quantile(sorted, 0.99)), report.Ms(sorted[len(sorted)-1])}
}

// latenessTables report the lateness overall, by kind, the top-of-minute
// seconds apart, and by tenth of the window.
func latenessTables(d *report.Doc, res ledger.Result, from time.Time, window time.Duration) {
	head := []string{"slots", "count", "p50", "p99", "max"}
	rows := [][]string{lateRow("**all**", res.Lateness), lateRow("on a top-of-minute second", res.LateTop), lateRow("on the other seconds", res.LateRest)}
	for _, k := range workload.Kinds() {
		if l, ok := res.LateByKind[k]; ok {
			rows = append(rows, lateRow(k.String(), l))
		}
	}
	d.P("Lateness = arrival at the target − nominal time, first delivery of each slot of the window:")
	d.Table(head, rows)
	rows = nil
	for i := range res.LateByTenth {
		at := from.Add(time.Duration(i) * window / 10).UTC().Format("15:04:05")
		rest, top := lateRow(at, res.LateByTenth[i]), lateRow("", res.TopByTenth[i])
		rows = append(rows, append(rest, top[1:]...))
	}
	d.P("By tenth of the window (nominal time), the other seconds, then the top-of-minute seconds apart:")
	d.Table([]string{"from", "slots", "p50", "p99", "max", "top-of-minute slots", "p50", "p99", "max"}, rows)
}

// p99Held is the p99 lateness of a window's slots counting the slots not
// delivered as later than any, and whether it exists (false: more than 1 %
// were not delivered).
func p99Held(res ledger.Result) (time.Duration, bool) {
	n := res.Delivered + res.Missed
	if n == 0 {
		return 0, false
	}
	rank := int(float64(n)*0.99 + 0.999999)
	if rank > len(res.Lateness) {
		return 0, false
	}
	return res.Lateness[max(rank-1, 0)], true
}

// profiles lists the profiles and their summaries, taken after the window.
func profiles(d *report.Doc, ps []profile) {
	for _, p := range ps {
		if p.err != nil {
			d.P("**%s**: no profile (%v)", p.service, p.err)
			continue
		}
		d.P("**%s** (`%s`):", p.service, p.path)
		d.Code("", p.top)
	}
}
