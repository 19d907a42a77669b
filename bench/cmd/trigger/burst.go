package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/pause"
	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// runBurst: B one-time (`at`) jobs all due on the same second T; how long
// from T until the last one reached the consumer.
func runBurst(ctx context.Context, args []string) error {
	fs, c := flags("burst")
	jobs := fs.Int("jobs", 100_000, "at-jobs due on the same second")
	nodes := fs.Int("nodes", 1, "trigger nodes")
	lead := fs.Duration("lead", 0, "how far ahead of the publish the due second is (0: 20 s + jobs / --load-rate)")
	loadRate := fs.Float64("load-rate", 2000, "projection rate assumed (events/s) when --lead is 0")
	publishers := fs.Int("publishers", 8, "parallel AMQP channels publishing the job events")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up waiting for the last slot this long after the due second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	e, m, others, err := setUp(ctx, *c)
	if err != nil {
		return err
	}
	defer e.close()
	ceil := e.measureCeilings(ctx)
	if err := e.startNodes(ctx, *nodes); err != nil {
		return err
	}
	if *lead == 0 {
		*lead = 20*time.Second + time.Duration(float64(*jobs) / *loadRate * float64(time.Second))
	}
	created := time.Now()
	// A whole second: every slot's nominal time is exactly it.
	due := created.Truncate(time.Second).Add(lead.Round(time.Second))
	ids := newIDs(*jobs)
	rec := newRecorder(ids, due, 1)
	consumeCtx, stopConsume := context.WithCancel(ctx)
	defer stopConsume()
	waitConsumer, err := consume(consumeCtx, e.amqp, e.dispatchX, e.dispatchQ, rec)
	if err != nil {
		return err
	}
	js := make([]*registryv1.Job, len(ids))
	for i, id := range ids {
		js[i] = newJob(id, i, atSchedule(due), created)
	}
	logf("publishing %d CREATED events of at-jobs due at %s", len(js), due.Format("15:04:05"))
	var waitLoadProfile func()
	if secs := min(c.profileSecs, int(lead.Seconds())-10); c.profileDir != "" && secs > 0 {
		waitLoadProfile = profileNodes(ctx, e, fmt.Sprintf("burst-%d-load", *jobs), secs)
	}
	loadStart := time.Now()
	if err := publishCreated(ctx, e.amqp, e.jobsX, js, *publishers); err != nil {
		return err
	}
	published := time.Now()
	projected, err := e.waitProjected(ctx, len(js), time.Until(due)-3*time.Second)
	if err != nil {
		return fmt.Errorf("loading did not finish 3 s before the due second (raise --lead or lower --load-rate): %w", err)
	}
	loadTime := projected.Sub(loadStart)
	logf("%d jobs projected in %s (%.0f events/s); %s before the due second", len(js), loadTime.Round(time.Millisecond),
		float64(len(js))/loadTime.Seconds(), time.Until(due).Round(time.Millisecond))
	if waitLoadProfile != nil {
		waitLoadProfile()
	}
	if o := otherBenchmarks(); o != "" {
		others = joinOthers(others, o)
	}
	// Memory just before the due second: every job is loaded then (up to
	// the engine's load limit).
	if err := pause.Until(ctx, due.Add(-3*time.Second)); err != nil {
		return err
	}
	heapProfiles(ctx, e, fmt.Sprintf("burst-%d-before", *jobs))
	// Profile the firing from 2 s before the due second.
	if err := pause.Until(ctx, due.Add(-2*time.Second)); err != nil {
		return err
	}
	confirmed := readConfirms(ctx, e)
	var waitProfile func()
	if c.profileDir != "" {
		waitProfile = profileNodes(ctx, e, fmt.Sprintf("burst-%d-fire", *jobs), 15)
	}
	deadline := due.Add(*timeout)
	lastLog := time.Now()
	for {
		n, _ := rec.received()
		if n >= len(js) || time.Now().After(deadline) {
			break
		}
		if time.Since(lastLog) >= 2*time.Second {
			logf("received %d of %d", n, len(js))
			lastLog = time.Now()
		}
		if err := e.checkNodes(); err != nil {
			return err
		}
		if err := pause.For(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	rec.waitDrained(ctx, 2*time.Second, 10*time.Second)
	end := time.Now()
	confirmed.end(ctx, e)
	if waitProfile != nil {
		waitProfile()
	}
	heapProfiles(ctx, e, fmt.Sprintf("burst-%d", *jobs))
	nodeErr := e.checkNodes()
	stopConsume()
	waitConsumer()

	rec.mu.Lock()
	logf("received %d messages: %d first arrivals, %d duplicates, %d outside the due second, %d not ours",
		rec.total, len(rec.arrivals), rec.duplicate, rec.outside, rec.unknown)
	rec.mu.Unlock()
	arr := rec.selectArrivals(nil, due, due.Add(time.Second))
	chk := rec.check(ids, nil, due, due)
	arrive, commit := latenessDists(arr)
	var last, lastCommit, first time.Duration
	if len(arr) > 0 {
		first = arrive.min
		last, lastCommit = arrive.max, commit.max
	}
	// Arrivals per second after the due second.
	var timeline [][]string
	if len(arr) > 0 {
		buckets := map[int]int{}
		commits := map[int]int{}
		for _, a := range arr {
			buckets[int(a.lateness()/(500*time.Millisecond))]++
			commits[int(a.commitLateness()/(500*time.Millisecond))]++
		}
		var keys []int
		for k := range buckets {
			keys = append(keys, k)
		}
		for k := range commits {
			if _, ok := buckets[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		cumA, cumC := 0, 0
		for _, k := range keys {
			cumA += buckets[k]
			cumC += commits[k]
			timeline = append(timeline, []string{fmt.Sprintf("%.1f – %.1f s", float64(k)/2, float64(k+1)/2), benchreport.Num(commits[k]), benchreport.Num(cumC), benchreport.Num(buckets[k]), benchreport.Num(cumA)})
		}
	}

	var r report
	r.header(fmt.Sprintf("Trigger: burst of %s at-jobs due on the same second, %d node(s)", benchreport.Num(*jobs), *nodes), m, e, others)
	r.p("")
	r.p("%s jobs of kind `at`, all at %s (%s after the first publish), loaded by publishing CREATED job events (%d channels): published in %s (%.0f events/s), all projected after %s (**%.0f events/s through the projection**, with the binary's projection defaults: `bin/trigger --help`).",
		benchreport.Num(*jobs), due.Format("15:04:05"), lead.Round(time.Second), *publishers,
		published.Sub(loadStart).Round(time.Millisecond), float64(len(js))/published.Sub(loadStart).Seconds(),
		loadTime.Round(time.Millisecond), float64(len(js))/loadTime.Seconds())
	r.p("")
	rate := 0.0
	if last > 0 {
		rate = float64(len(arr)) / last.Seconds()
	}
	r.table([]string{"burst", "value"}, [][]string{
		{"slots due", benchreport.Num(*jobs)},
		{"slots arrived", benchreport.Num(len(arr))},
		{"first arrival after the due second", benchreport.Secs(first)},
		{"**last arrival after the due second**", "**" + benchreport.Secs(last) + "**"},
		{"last commit (fire_time) after the due second", benchreport.Secs(lastCommit)},
		{"last broker confirm after the due second (trigger's histogram, bucket bound)", confirmed.bound(1, benchreport.Secs)},
		{"rate (slots / time to the last arrival)", fmt.Sprintf("%.0f slots/s", rate)},
		{"missing / duplicated", fmt.Sprintf("%d / %d", chk.missing, chk.duplicated)},
	})
	r.latenessTable(arrive, commit, confirmed)
	r.p("Committed and arrived per half second after the due second:")
	r.p("")
	r.table([]string{"after the due second", "committed", "committed, cumulative", "arrived", "arrived, cumulative"}, timeline)
	r.usageTable(e, due.Add(-time.Second), due.Add(max(last, time.Second)+time.Second))
	r.h(3, "Machine ceiling (measured in this run, before the nodes started)")
	r.p("%s", ceil.Markdown(rate, "slots/s", "A slot costs the broker one such message (its dispatch request, consumed here with automatic acknowledgement) and PostgreSQL its ledger and outbox rows and the job's advance, on the same two cores as the trigger and this process: the ratios are upper bounds of what is left."))
	var mem [][]string
	for _, n := range e.nodes {
		before, _ := e.sampler.usageOf(due.Add(-5*time.Second), due)
		u := before["trigger "+n.id]
		mem = append(mem, []string{n.id, benchreport.MiB(u.rssMax), benchreport.MiB(u.heapMax), benchreport.MiB(e.sampler.vmHWM(n.pid()))})
	}
	r.p("")
	r.table([]string{"node", "RSS max, last 5 s before the due second", "Go heap in use, max, same", "peak RSS (VmHWM) of the run"}, mem)
	r.p("")
	r.nodeMetricsTable(e, due.Add(-time.Second), end)
	r.h(3, "Targets")
	r.table([]string{"target", "measured", "verdict"}, [][]string{
		{"100,000 jobs due on one second all enqueued within 10 s", fmt.Sprintf("%s of %s in %s", benchreport.Num(len(arr)), benchreport.Num(*jobs), benchreport.Secs(last)),
			judge(*jobs >= 100_000, len(arr) == *jobs && chk.missing == 0 && last <= targetBurst)},
		{"(aim) within 5 s", benchreport.Secs(last), judge(*jobs >= 100_000, len(arr) == *jobs && chk.missing == 0 && last <= targetBurstAim)},
	})
	if *jobs < 100_000 {
		r.p("(%s jobs is below the 100,000 of the target: this run does not judge it.)", benchreport.Num(*jobs))
	}
	if err := r.emit(c.out); err != nil {
		return err
	}
	return nodeErr
}
