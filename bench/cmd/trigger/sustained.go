package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cronmesh/cronmesh/bench/internal/pause"
	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/jobspec"
)

// Targets of the trigger issue.
const (
	targetSlotsPerSecond = 5000
	targetP99            = 100 * time.Millisecond
	targetBurst          = 10 * time.Second
	targetBurstAim       = 5 * time.Second
	targetMemory         = 300 << 20
	targetFailover       = 5 * time.Second
)

// runSustained: J every-second jobs, so J slots are due every second; after
// a warm-up, every slot of a window of D seconds is checked at the consumer.
func runSustained(ctx context.Context, args []string) error {
	fs, c := flags("sustained")
	jobs := fs.Int("jobs", 5000, "every-second jobs (slots due per second)")
	nodes := fs.Int("nodes", 1, "trigger nodes")
	duration := fs.Duration("duration", 60*time.Second, "measured window")
	warmup := fs.Duration("warmup", 15*time.Second, "firing before the window starts (after every job is projected)")
	tz := fs.String("tz", "UTC", "time zone of the jobs' cron schedule")
	spread := fs.Duration("spread", 0, "spread window of every job (0: all fire on the second)")
	publishers := fs.Int("publishers", 4, "parallel AMQP channels publishing the job events")
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
	ids := newIDs(*jobs)
	// Track nominal seconds from now to well past the window.
	trackFrom := time.Now().Truncate(time.Second)
	rec := newRecorder(ids, trackFrom, int((5*time.Minute+*warmup+*duration)/time.Second))
	consumeCtx, stopConsume := context.WithCancel(ctx)
	defer stopConsume()
	waitConsumer, err := consume(consumeCtx, e.amqp, e.dispatchX, e.dispatchQ, rec)
	if err != nil {
		return err
	}

	created := time.Now()
	js := make([]*registryv1.Job, len(ids))
	for i, id := range ids {
		js[i] = newJob(id, i, cronSchedule("* * * * * *", *tz), created)
		if *spread > 0 {
			js[i].SpreadWindow = durationpb.New(*spread)
		}
	}
	if *spread > 0 {
		// Lateness counts from the slot's firing time: nominal + the job's
		// deterministic spread offset (what the engine aims at).
		rec.offsets = make([]time.Duration, len(ids))
		for i, id := range ids {
			rec.offsets[i] = jobspec.SpreadOffset(id, *spread)
		}
	}
	logf("publishing %d CREATED job events", len(js))
	loadStart := time.Now()
	if err := publishCreated(ctx, e.amqp, e.jobsX, js, *publishers); err != nil {
		return err
	}
	published := time.Now()
	projected, err := e.waitProjected(ctx, len(js), 5*time.Minute)
	if err != nil {
		return err
	}
	loadTime := projected.Sub(loadStart)
	logf("%d jobs projected in %s (%.0f events/s)", len(js), loadTime.Round(time.Millisecond), float64(len(js))/loadTime.Seconds())

	from := projected.Truncate(time.Second).Add(*warmup)
	to := from.Add(*duration)
	if to.Sub(trackFrom) > time.Duration(rec.secs)*time.Second {
		return fmt.Errorf("projection too slow: the window leaves the tracked range")
	}
	logf("warming up; measuring slots %s – %s", from.Format("15:04:05"), to.Format("15:04:05"))
	if err := pause.Until(ctx, from); err != nil {
		return err
	}
	confirmed := readConfirms(ctx, e)
	othersAtStart := otherBenchmarks()
	var waitProfile func()
	if c.profileDir != "" {
		if err := pause.For(ctx, c.profileAfter); err != nil {
			return err
		}
		waitProfile = profileNodes(ctx, e, fmt.Sprintf("sustained-%d", *jobs), c.profileSecs)
	}
	if err := pause.Until(ctx, to); err != nil {
		return err
	}
	confirmed.end(ctx, e)
	othersAtEnd := otherBenchmarks()
	// Slots of the window's last seconds still arrive: give them 10 s.
	if err := pause.For(ctx, 10*time.Second); err != nil {
		return err
	}
	if waitProfile != nil {
		waitProfile()
	}
	heapProfiles(ctx, e, fmt.Sprintf("sustained-%d", *jobs))
	nodeErr := e.checkNodes()
	stopConsume()
	waitConsumer()

	// Verdict.
	arr := rec.selectArrivals(nil, from, to)
	arrive, commit := latenessDists(arr)
	chk := rec.check(ids, nil, from, to.Add(-time.Second))
	expected := len(ids) * int(*duration/time.Second)
	rate := float64(len(arr)) / duration.Seconds()
	// Received per wall-clock second over the window.
	var perSec []int
	rec.mu.Lock()
	for s := from.Unix(); s < to.Unix(); s++ {
		perSec = append(perSec, rec.perSecond[s])
	}
	problems := slices.Clone(rec.problems)
	outside, unknown := rec.outside, rec.unknown
	rec.mu.Unlock()
	slices.Sort(perSec)

	var r report
	r.header(fmt.Sprintf("Trigger: sustained firing, %s every-second jobs on %d node(s)", benchreport.Num(*jobs), *nodes), m, e, joinOthers(others, othersAtStart, othersAtEnd))
	r.p("")
	r.p("%s jobs with cron `* * * * * *` (time zone %s, spread %s), loaded by publishing CREATED job events to the jobs exchange (%d channels): published in %s, all projected after %s (%.0f events/s through the projection). Warm-up %s, then every slot with a nominal time in the %s window is checked at the consumer of the dispatch queues (auto-ack, decoding each DispatchRequest). With a spread window, lateness counts from nominal + the job's spread offset (jobspec.SpreadOffset).",
		benchreport.Num(*jobs), *tz, *spread, *publishers, published.Sub(loadStart).Round(time.Millisecond), loadTime.Round(time.Millisecond),
		float64(len(js))/loadTime.Seconds(), *warmup, *duration)
	r.p("")
	rows := [][]string{
		{"slots due in the window", benchreport.Num(expected)},
		{"slots arrived (first arrival)", benchreport.Num(len(arr))},
		{"sustained rate (arrived slots / window)", fmt.Sprintf("%.0f slots/s", rate)},
	}
	if len(perSec) > 0 {
		rows = append(rows, []string{"received per wall-clock second: min / median / max", fmt.Sprintf("%s / %s / %s", benchreport.Num(perSec[0]), benchreport.Num(perSec[len(perSec)/2]), benchreport.Num(perSec[len(perSec)-1]))})
	}
	rows = append(rows,
		[]string{"missing slots (never arrived)", benchreport.Num(chk.missing)},
		[]string{"duplicated slots (arrived twice or more)", benchreport.Num(chk.duplicated)},
		[]string{"messages outside the tracked range / not ours", fmt.Sprintf("%d / %d", outside, unknown)},
	)
	r.table([]string{"sustained", "value"}, rows)
	r.latenessTable(arrive, commit, confirmed)
	r.latenessTimeline(arr, from, to, max(10*time.Second, (*duration/30).Truncate(time.Second)))
	r.usageTable(e, from, to)
	r.h(3, "Machine ceiling (measured in this run, before the nodes started)")
	r.p("%s", ceil.Markdown(rate, "slots/s", "A slot costs the broker one such message (its dispatch request, consumed here with automatic acknowledgement) and PostgreSQL its ledger and outbox rows and the job's advance, on the same two cores as the trigger and this process: the ratios are upper bounds of what is left."))
	r.p("")
	r.nodeMetricsTable(e, from, to)
	r.h(3, "Targets")
	r.table([]string{"target", "measured", "verdict"}, [][]string{
		{"≥ 5,000 slots/s sustained, nominal → broker-confirmed", fmt.Sprintf("%.0f slots/s of %s due, %d missing", rate, benchreport.Num(*jobs), chk.missing),
			judge(*jobs >= targetSlotsPerSecond, rate >= targetSlotsPerSecond && chk.missing == 0)},
		// Judged on the issue's own measure, nominal → broker-confirmed:
		// the share of the trigger's histogram within the 100 ms bucket is
		// exact, while arrival at the bench's consumer comes later and is
		// shown as the upper bound it is.
		{"p99 lateness < 100 ms in steady state, nominal → broker-confirmed", "broker confirm: " + confirmed.withinText() + ", p99 " + confirmed.bound(.99, benchreport.Ms) +
			" (trigger's histogram); upper bound, arrival at the consumer: p99 " + benchreport.Ms(arrive.p99) + "; commit p99 " + benchreport.Ms(commit.p99), met(confirmed.within() >= .99)},
		{"no duplicate", benchreport.Num(chk.duplicated), met(chk.duplicated == 0)},
	})
	if *jobs < targetSlotsPerSecond {
		r.p("(%s jobs is below the 5,000 slots/s of the target: this run does not judge it.)", benchreport.Num(*jobs))
	}
	if len(chk.firstMissing) > 0 {
		r.p("First missing: %v", chk.firstMissing)
	}
	if len(problems) > 0 {
		r.p("Problems: %v", problems)
	}
	if err := r.emit(c.out); err != nil {
		return err
	}
	return nodeErr
}

// latenessTimeline writes p50/p99/max arrival lateness per bucket of
// nominal time, to show whether the window was steady.
func (r *report) latenessTimeline(arr []arrival, from, to time.Time, bucket time.Duration) {
	var rows [][]string
	for b := from; b.Before(to); b = b.Add(bucket) {
		end := b.Add(bucket)
		if end.After(to) {
			end = to
		}
		var ds, cs []time.Duration
		for _, a := range arr {
			if a.nominal >= b.UnixNano() && a.nominal < end.UnixNano() {
				ds = append(ds, a.lateness())
				cs = append(cs, a.commitLateness())
			}
		}
		d, c := distOf(ds), distOf(cs)
		rows = append(rows, []string{b.Format("15:04:05"), benchreport.Num(d.n), fmt.Sprintf("%.0f", float64(d.n)/end.Sub(b).Seconds()), benchreport.Ms(d.p50), benchreport.Ms(d.p99), benchreport.Ms(d.max), benchreport.Ms(c.p99)})
	}
	if len(rows) > 30 {
		// Long runs: keep the report readable.
		step := (len(rows) + 29) / 30
		var kept [][]string
		for i := 0; i < len(rows); i += step {
			kept = append(kept, rows[i])
		}
		rows = kept
	}
	r.table([]string{"nominal from", "slots", "slots/s", "arrival p50", "arrival p99", "arrival max", "commit p99"}, rows)
}

func joinOthers(all ...string) string {
	var out []string
	for _, o := range all {
		if o != "" && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprint(out)
}
