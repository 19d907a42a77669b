package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/report"
)

type loadOptions struct {
	jobs         int
	callers      int
	batchSize    int
	requestIDs   bool
	waitDrain    bool
	drainTimeout time.Duration
}

func loadScenario() *scenario {
	o := &loadOptions{}
	return &scenario{
		name:    "load",
		summary: "bulk-load the jobs table to a total through BatchCreateJobs; report jobs/s and table and index sizes",
		register: func(fs *flag.FlagSet) {
			fs.IntVar(&o.jobs, "jobs", 1_000_000, "total jobs the schema should hold at the end (jobs already there count)")
			fs.IntVar(&o.callers, "callers", 2, "concurrent BatchCreateJobs callers")
			fs.IntVar(&o.batchSize, "batch-size", 1000, "jobs per call")
			fs.BoolVar(&o.requestIDs, "request-ids", false, "send a request_id with each job")
			fs.BoolVar(&o.waitDrain, "wait-drain", true, "wait for the outbox relay to publish every event before reporting (so later scenarios run on a quiet system)")
			fs.DurationVar(&o.drainTimeout, "drain-timeout", 60*time.Minute, "how long to wait for the relay")
		},
		run: func(ctx context.Context, b *bench) error { return runLoad(ctx, b, o) },
	}
}

func runLoad(ctx context.Context, b *bench, o *loadOptions) error {
	db, err := b.database(ctx)
	if err != nil {
		return err
	}
	existing, err := jobCount(ctx, b, db)
	if err != nil {
		return err
	}
	var out strings.Builder
	out.WriteString(section(fmt.Sprintf("load — %s jobs through BatchCreateJobs", report.Num(int64(o.jobs))), b.cmdline))
	toLoad := o.jobs - int(existing)
	var usages []cpuUsage
	var cpuRows strings.Builder
	var run *batchRun
	var runErr error
	if toLoad > 0 {
		b.logf("load: %s jobs present, loading %s more with %d callers", report.Num(existing), report.Num(int64(toLoad)), o.callers)
		b.waitQuiet(ctx)
		before := b.procs.snapshot()
		run, runErr = createBatches(ctx, b, o.callers, toLoad, o.batchSize, o.requestIDs, 10*time.Second)
		if run == nil {
			return runErr
		}
		mid := b.procs.snapshot()
		u := b.procs.usage(before, mid)
		usages = append(usages, u)
		cpuRows.WriteString(u.row("load"))
		var drainDone time.Time
		if o.waitDrain && runErr == nil {
			d, err := measureDrain(ctx, b, db, run, o.drainTimeout)
			if err != nil {
				return err
			}
			drainDone = d.done
			u := b.procs.usage(mid, b.procs.snapshot())
			usages = append(usages, u)
			cpuRows.WriteString(u.row("relay drain after the load"))
		}
		calls := summarize(run.perCall)
		first, last := windowMeans(run.windows)
		pairs := [][2]string{
			kv("jobs before / loaded / target", fmt.Sprintf("%s / %s / %s", report.Num(existing), report.Num(int64(run.jobs)), report.Num(int64(o.jobs)))),
			kv("callers × jobs per call", fmt.Sprintf("%d × %d", o.callers, o.batchSize)),
			kv("wall time", run.end.Sub(run.start).Round(100*time.Millisecond).String()),
			kv("jobs/s (whole load)", report.Rate(run.jobsPerSecond())),
			kv("jobs/s, first and last tenth of the load (10 s windows)", fmt.Sprintf("%s → %s", report.Rate(first), report.Rate(last))),
			kv("call latency p50 / p99 / max", fmt.Sprintf("%s / %s / %s", report.Ms(calls.p50), report.Ms(calls.p99), report.Ms(calls.mx))),
			kv("errors", run.errors.String()),
		}
		if !drainDone.IsZero() {
			pairs = append(pairs,
				kv("relay: outbox drained after the last commit", drainDone.Sub(run.end).Round(100*time.Millisecond).String()),
				kv("relay events/s (first write → drained)", report.Rate(float64(run.jobs)/drainDone.Sub(run.start).Seconds())))
		}
		out.WriteString(kvTable(pairs...))
	} else {
		fmt.Fprintf(&out, "The schema already holds %s jobs: nothing to load.\n", report.Num(existing))
	}

	if runErr == nil {
		note, err := standInForAutovacuum(ctx, b, db)
		if err != nil {
			return err
		}
		out.WriteString("\n" + note)
	}
	total, err := jobCount(ctx, b, db)
	if err != nil {
		return err
	}
	sizes, err := relationSizes(ctx, b, db)
	if err != nil {
		return err
	}
	fmt.Fprintf(&out, "\nSizes with %s jobs (pg_table_size per table, pg_relation_size per index, pg_total_relation_size for the totals):\n\n", report.Num(total))
	out.WriteString("| relation | kind | size | bytes per job |\n| --- | --- | ---: | ---: |\n")
	for _, s := range sizes {
		if s.bytes < 1<<20 && !strings.Contains(s.name, "jobs") {
			continue // the migrations table and an empty outbox
		}
		perJob := "-"
		if total > 0 {
			perJob = fmt.Sprintf("%.0f", float64(s.bytes)/float64(total))
		}
		fmt.Fprintf(&out, "| %s | %s | %s | %s |\n", s.name, s.kind, report.MiB(s.bytes), perJob)
	}
	if len(usages) > 0 {
		out.WriteString("\n")
		out.WriteString(cpuTableHeader())
		out.WriteString(cpuRows.String())
		out.WriteString(cpuNote(usages))
	}
	out.WriteString(b.registryMemory())
	out.WriteString("\n")
	if o.jobs >= targetLoadJobs {
		measured := fmt.Sprintf("%s jobs in the table", report.Num(total))
		if run != nil {
			measured += fmt.Sprintf(", loaded at %s jobs/s", report.Rate(run.jobsPerSecond()))
		}
		out.WriteString(targetLine(judge(total >= targetLoadJobs && runErr == nil),
			fmt.Sprintf("%s jobs can be loaded", report.Num(targetLoadJobs)), measured))
	} else {
		out.WriteString(targetLine(notJudged, fmt.Sprintf("%s jobs can be loaded", report.Num(targetLoadJobs)),
			fmt.Sprintf("this run loads %s (BENCH_JOBS=5000000 judges it)", report.Num(int64(o.jobs)))))
	}
	fmt.Fprint(b.out, out.String())
	return runErr
}

// windowMeans averages the first and the last tenth (at least one) of the
// progress windows, leaving out the partial last window.
func windowMeans(w []float64) (first, last float64) {
	if len(w) == 0 {
		return 0, 0
	}
	k := max(1, len(w)/10)
	mean := func(s []float64) float64 {
		t := 0.0
		for _, v := range s {
			t += v
		}
		return t / float64(len(s))
	}
	return mean(w[:k]), mean(w[len(w)-k:])
}
