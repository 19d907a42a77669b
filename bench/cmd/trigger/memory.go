package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/heldjobs"
	"github.com/cronmesh/cronmesh/bench/internal/pause"
	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// runMemory: millions of scheduled jobs that do not fire during the run
// (daily crons whose time is hours away), inserted with COPY, plus a few
// thousand every-second jobs projected from events; one node runs over them
// and its memory is sampled.
func runMemory(ctx context.Context, args []string) error {
	fs, c := flags("memory")
	total := fs.Int("jobs", 5_000_000, "scheduled jobs in the trigger's table (including --firing)")
	firing := fs.Int("firing", 2000, "of those, every-second jobs created through job events, firing during the run")
	duration := fs.Duration("duration", 60*time.Second, "how long the node runs once every job is in")
	copyWorkers := fs.Int("copy-workers", 2, "parallel COPY streams")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *firing > *total {
		return fmt.Errorf("--firing %d exceeds --jobs %d", *firing, *total)
	}
	e, m, others, err := setUp(ctx, *c)
	if err != nil {
		return err
	}
	defer e.close()

	// The node migrates its schema when it starts: started once and
	// stopped, it leaves the tables the COPY below fills.
	n0, err := e.startNode(ctx, "migrate")
	if err != nil {
		return err
	}
	e.stopNode(n0)
	n0.killed = true
	bulk := *total - *firing
	logf("inserting %d scheduled jobs with COPY (%d streams)", bulk, *copyWorkers)
	copyStart := time.Now()
	spread, err := copyJobs(ctx, e, bulk, *copyWorkers)
	if err != nil {
		return err
	}
	copyTime := time.Since(copyStart)
	logf("inserted %d rows in %s (%.0f rows/s); ANALYZE", bulk, copyTime.Round(time.Second), float64(bulk)/copyTime.Seconds())
	analyzeStart := time.Now()
	if _, err := e.db.Exec(ctx, `ANALYZE jobs`); err != nil {
		return err
	}
	analyzeTime := time.Since(analyzeStart)
	var tableSize, indexSize int64
	_ = e.db.QueryRow(ctx, `SELECT pg_table_size('jobs'), pg_indexes_size('jobs')`).Scan(&tableSize, &indexSize)

	n1, err := e.startNode(ctx, "n1")
	if err != nil {
		return err
	}
	startup := time.Since(n1.started)
	ids := newIDs(*firing)
	rec := newRecorder(ids, time.Now().Truncate(time.Second), int((10*time.Minute+*duration)/time.Second))
	consumeCtx, stopConsume := context.WithCancel(ctx)
	defer stopConsume()
	waitConsumer, err := consume(consumeCtx, e.amqp, e.dispatchX, e.dispatchQ, rec)
	if err != nil {
		return err
	}
	created := time.Now()
	js := make([]*registryv1.Job, len(ids))
	for i, id := range ids {
		js[i] = newJob(id, i, cronSchedule("* * * * * *", "UTC"), created)
	}
	loadStart := time.Now()
	if err := publishCreated(ctx, e.amqp, e.jobsX, js, 4); err != nil {
		return err
	}
	projected, err := e.waitProjected(ctx, *total, 5*time.Minute)
	if err != nil {
		return err
	}
	logf("%d firing jobs projected in %s; running %s", *firing, projected.Sub(loadStart).Round(time.Millisecond), *duration)
	from := projected.Truncate(time.Second).Add(5 * time.Second)
	to := projected.Add(*duration)
	var waitProfile func()
	if c.profileDir != "" {
		if err := pause.Until(ctx, from.Add(c.profileAfter)); err != nil {
			return err
		}
		waitProfile = profileNodes(ctx, e, "memory", c.profileSecs)
	}
	if err := pause.Until(ctx, to); err != nil {
		return err
	}
	if waitProfile != nil {
		waitProfile()
	}
	heapProfiles(ctx, e, "memory")
	hwm := e.sampler.vmHWM(n1.pid())
	usAll, _ := e.sampler.usageOf(n1.started, to)
	usSteady, _ := e.sampler.usageOf(to.Add(-*duration/2), to)
	sysMem, _ := e.sampler.lastMetric("trigger n1", "go_memstats_sys_bytes")
	heapAlloc, _ := e.sampler.lastMetric("trigger n1", "go_memstats_heap_alloc_bytes")
	nodeErr := e.checkNodes()
	if err := pause.For(ctx, 6*time.Second); err != nil {
		return err
	}
	stopConsume()
	waitConsumer()
	arr := rec.selectArrivals(nil, from, to.Add(-time.Second))
	arrive, commit := latenessDists(arr)
	chk := rec.check(ids, nil, from, to.Add(-2*time.Second))

	g := "trigger n1"
	all, steady := usAll[g], usSteady[g]
	var r report
	r.header(fmt.Sprintf("Trigger: memory with %s scheduled jobs, one node", benchreport.Num(*total)), m, e, others)
	r.p("")
	r.p("**Benchmark shortcut:** %s of the jobs were inserted directly into the trigger schema's `jobs` table with COPY (%d streams, %s, %.0f rows/s; ANALYZE %s), not through the projection: the rows are what `store.Apply` writes for a CREATED event (partition = ring.Partition(id, %d), spec = the registryv1.Job protobuf without etag/update_time/description, next_fire_at = jobspec.Schedule(...).Next(create_time)). The schedules are daily crons `M H * * *` over %d distinct (minute of day, time zone) pairs among UTC, Europe/Berlin, America/New_York and Asia/Tokyo, none due within 2 h of the run. Table %s, indexes %s.",
		benchreport.Num(bulk), *copyWorkers, copyTime.Round(time.Second), float64(bulk)/copyTime.Seconds(), analyzeTime.Round(time.Second), c.partitions, spread,
		benchreport.MiB(uint64(tableSize)), benchreport.MiB(uint64(indexSize)))
	r.p("")
	r.p("The node then started on that table (ready after %s), %s every-second jobs were created through job events, and it ran for %s.",
		startup.Round(time.Millisecond), benchreport.Num(*firing), *duration)
	r.p("")
	r.table([]string{"node memory", "value"}, [][]string{
		{"peak RSS (VmHWM), whole life of the process", benchreport.MiB(hwm)},
		{"RSS max / median, whole run (sampled every second)", benchreport.MiB(all.rssMax) + " / " + benchreport.MiB(all.rssMedian)},
		{"RSS median, last half of the run (steady)", benchreport.MiB(steady.rssMedian)},
		{"Go heap in use: max / at the end", benchreport.MiB(all.heapMax) + " / " + benchreport.MiB(all.heapLast)},
		{"Go heap allocated at the end (live + not yet swept)", benchreport.MiB(heapAlloc)},
		{"Go runtime memory from the OS (go_memstats_sys_bytes)", benchreport.MiB(sysMem)},
		{"CPU of the node, whole run", fmt.Sprintf("%.0f %%", all.cpuPercent)},
	})
	r.p("Firing meanwhile (%s every-second jobs, nominal %s – %s): %s slots arrived, missing %d, duplicated %d.",
		benchreport.Num(*firing), from.Format("15:04:05"), to.Format("15:04:05"), benchreport.Num(len(arr)), chk.missing, chk.duplicated)
	r.p("")
	r.latenessTable(arrive, commit, nil)
	r.usageTable(e, from, to)
	r.h(3, "Targets")
	r.table([]string{"target", "measured", "verdict"}, [][]string{
		{"with 5,000,000 scheduled jobs the trigger's memory stays under 300 MB", "peak RSS " + benchreport.MiB(hwm), judge(*total >= 5_000_000, hwm < targetMemory)},
	})
	if *total < 5_000_000 {
		r.p("(%s jobs is below the 5,000,000 of the target: this run does not judge it.)", benchreport.Num(*total))
	}
	if err := r.emit(c.out); err != nil {
		return err
	}
	return nodeErr
}

// copyJobs inserts n daily-cron jobs into the jobs table as Apply would
// store their CREATED events, and returns how many distinct schedules they
// use.
func copyJobs(ctx context.Context, e *env, n, workers int) (int, error) {
	return heldjobs.Copy(ctx, e.db, heldjobs.Options{
		Jobs: n, Streams: workers, Namespace: benchNamespace, Partitions: e.c.partitions,
		Job: func(id string, i int, schedule *registryv1.Schedule, created time.Time) *registryv1.Job {
			job := newJob(id, i, schedule, created)
			// store.encodeSpec: without etag, update time and description.
			job.Etag, job.UpdateTime, job.Description = "", nil, ""
			return job
		},
		Progress: func(done, total int) { logf("COPY: %d of %d rows", done, total) },
	})
}
