package main

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"google.golang.org/protobuf/proto"

	"github.com/cronmesh/cronmesh/bench/internal/machine"
	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/ring"
)

// runMemory: millions of scheduled jobs that do not fire during the run
// (daily crons whose time is hours away), inserted with COPY, plus a few
// thousand every-second jobs projected from events; one node runs over them
// and its memory is sampled.
func runMemory(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("memory", flag.ContinueOnError)
	var c common
	c.register(fs)
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
	others := quietCheck(ctx, c.quietWait)
	e, err := newEnv(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	m := machine.Describe(ctx, e.db, e.amqp)

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
		if err := sleepUntil(ctx, from.Add(c.profileAfter)); err != nil {
			return err
		}
		waitProfile = profileNodes(ctx, e, "memory", c.profileSecs)
	}
	if err := sleepUntil(ctx, to); err != nil {
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
	if err := sleepCtx(ctx, 6*time.Second); err != nil {
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
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"}
	created := time.Now().UTC()
	type combo struct {
		cron, tz string
		next     time.Time
	}
	var combos []combo
	for _, tz := range zones {
		for minute := 0; minute < 24*60; minute += 1 {
			expr := fmt.Sprintf("%d %d * * *", minute%60, minute/60)
			sched, errs := jobspec.Schedule(cronSchedule(expr, tz), created)
			if errs != nil {
				return 0, fmt.Errorf("schedule %q %s: %v", expr, tz, errs[0])
			}
			next, ok := sched.Next(created)
			if !ok || next.Sub(created) < 2*time.Hour {
				continue // would fire during the run
			}
			combos = append(combos, combo{cron: expr, tz: tz, next: next.UTC().Truncate(time.Microsecond)})
		}
	}
	var done atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Second):
				logf("COPY: %d of %d rows", done.Load(), n)
			}
		}
	}()
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		lo, hi := w*chunk, min((w+1)*chunk, n)
		if lo >= hi {
			continue
		}
		wg.Go(func() {
			i := lo
			now := time.Now().UTC().Truncate(time.Microsecond)
			src := pgx.CopyFromFunc(func() ([]any, error) {
				if i >= hi {
					return nil, nil
				}
				co := combos[i%len(combos)]
				id := uuid.Must(uuid.NewV7())
				job := newJob(id.String(), i, cronSchedule(co.cron, co.tz), created)
				// store.encodeSpec: without etag, update time and description.
				job.Etag, job.UpdateTime, job.Description = "", nil, ""
				spec, err := proto.Marshal(job)
				if err != nil {
					return nil, err
				}
				i++
				if i%10_000 == 0 {
					done.Add(10_000)
				}
				return []any{
					pgtype.UUID{Bytes: id, Valid: true}, benchNamespace, int32(ring.Partition(id.String(), e.c.partitions)),
					int64(1), false, false, spec, co.next, now,
				}, nil
			})
			_, err := e.db.CopyFrom(ctx, pgx.Identifier{"jobs"},
				[]string{"job_id", "namespace", "partition", "version", "deleted", "paused", "spec", "next_fire_at", "update_time"}, src)
			if err != nil {
				errs <- fmt.Errorf("COPY rows %d-%d: %w", lo, hi, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return len(combos), nil
}
