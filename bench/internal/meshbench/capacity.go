package meshbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/ledger"
	"github.com/cronmesh/cronmesh/bench/internal/pause"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	"github.com/cronmesh/cronmesh/bench/internal/report"
	"github.com/cronmesh/cronmesh/bench/internal/target"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
)

// CapacityOptions bound the ramp.
type CapacityOptions struct {
	From, Step, Max float64       // offered executions/s: the first step, the increase, the last
	StepDuration    time.Duration // each step's window (default 1 min: each holds one top-of-minute second)
	// Settle is how long after a step's window its slots may still arrive
	// before the step is judged (default 5 s); a slot not delivered by then
	// counts as later than any.
	Settle time.Duration
}

// capacityP99 is the lateness a step must hold at its p99.
const capacityP99 = time.Second

// step is one rate of the ramp and what it held.
type step struct {
	rate     float64
	from, to time.Time
	res      ledger.Result
	usage    procstat.Usage
	p99      time.Duration // from quickP99
	bounded  bool          // p99 exists: at most 1 % of the slots were not delivered
	held     bool
	arrived  int // deliveries arriving in the window, any slot
	end      procstat.Snapshot
}

// quickP99 is the p99 lateness of the slots due in [from, to) of the jobs
// in [jobs[0], jobs[1]) of plan, from the deliveries' nominal times,
// counting a slot not delivered by cut as later than any; false when more
// than 1 % were not.
func quickP99(ds []target.Delivery, plan *workload.Plan, jobs [2]int, from, to, cut time.Time) (time.Duration, bool) {
	type slot struct {
		job     int32
		nominal int64
	}
	first := map[slot]time.Duration{}
	for _, d := range ds {
		if int(d.Job) < jobs[0] || int(d.Job) >= jobs[1] || d.Nominal.Before(from) || !d.Nominal.Before(to) || d.At.After(cut) {
			continue
		}
		k := slot{d.Job, d.Nominal.UnixNano()}
		if late, ok := first[k]; !ok || d.At.Sub(d.Nominal) < late {
			first[k] = d.At.Sub(d.Nominal)
		}
	}
	expected := 0
	for _, j := range plan.Jobs[jobs[0]:jobs[1]] {
		expected += len(j.Slots(from, to))
	}
	lateness := make([]time.Duration, 0, len(first))
	for _, l := range first {
		lateness = append(lateness, l)
	}
	slices.Sort(lateness)
	return p99Held(ledger.Result{Delivered: len(lateness), Missed: max(expected-len(lateness), 0), Lateness: lateness})
}

// Capacity finds the highest offered rate the mesh holds with a p99
// lateness under a second: every-second crons, From executions/s in the
// first step and Step more in each next one, up to Max, each step's jobs
// bounded by their schedules' start and end times to its window. The steps
// follow each other with no pause (the backlog a step leaves is the next
// one's to carry, as in production), all jobs are registered before the
// first, and the ramp stops at the first step not held.
func Capacity(ctx context.Context, cfg Config, o CapacityOptions) error {
	if o.From <= 0 || o.Step <= 0 || o.Max < o.From {
		return errors.New("meshbench: need 0 < from <= max and a positive step")
	}
	if o.StepDuration <= 0 {
		o.StepDuration = time.Minute
	}
	if o.Settle <= 0 {
		o.Settle = 5 * time.Second
	}
	e, ceil, err := startMeasured(ctx, cfg, "capacity")
	if err != nil {
		return err
	}
	defer e.close()
	var rates []float64
	var jobs int
	for r := o.From; r <= o.Max; r += o.Step {
		rates = append(rates, r)
		jobs += int(r)
	}
	regStart := time.Now()
	// 30 s plus 1 s per 1,000 jobs for the registry and the trigger's
	// projection.
	first := regStart.Add(30*time.Second + time.Duration(jobs/1000)*time.Second).Truncate(time.Second)
	plan := &workload.Plan{}
	steps := make([]step, len(rates))
	stepJobs := make([][2]int, len(rates)) // the plan's job indexes of each step
	for i, r := range rates {
		from := first.Add(time.Duration(i) * o.StepDuration)
		steps[i] = step{rate: r, from: from, to: from.Add(o.StepDuration)}
		p, err := workload.New(workload.Options{Rate: r, Start: from, Window: o.StepDuration,
			Shares: workload.Shares{workload.EverySecond: 1}, FiringFrom: from, FiringUntil: steps[i].to.Add(-time.Millisecond)})
		if err != nil {
			return err
		}
		stepJobs[i] = [2]int{len(plan.Jobs), len(plan.Jobs) + len(p.Jobs)}
		plan.Append(p)
	}
	e.cfg.Log.Info("registering", "jobs", len(plan.Jobs), "steps", len(steps), "first", first.Format("15:04:05"))
	ids, regTime, err := e.register(ctx, plan)
	if err != nil {
		return err
	}
	projected, err := e.waitProjected(ctx, len(ids), first)
	if err != nil {
		return err
	}
	e.cfg.Log.Info("projected", "after", projected.Sub(regStart).Round(time.Millisecond), "ramp_in", time.Until(first).Round(time.Second))
	if err := pause.Until(ctx, first); err != nil {
		return err
	}
	load0 := procstat.LoadAverage()
	prev := e.procs.Snapshot(e.tracked())
	// No step's slot arrives before its window: from the count at its
	// start on, the target's deliveries hold all of the step's.
	seen, done := e.target.Count(), 0
	for i := range steps {
		st := &steps[i]
		if err := pause.Until(ctx, st.to); err != nil {
			return err
		}
		st.end = e.procs.Snapshot(e.tracked())
		fromIndex := seen
		seen = e.target.Count()
		st.usage = procstat.Between(prev, st.end)
		prev = st.end
		if err := e.checkAlive(); err != nil {
			return err
		}
		// Judged once its slots had Settle to arrive, while the next step
		// runs: from the nominal times the deliveries carry, a pass over
		// the step's new deliveries, not the ledger's inversion of
		// execution ids (run after the ramp).
		if err := pause.Until(ctx, st.to.Add(o.Settle)); err != nil {
			return err
		}
		st.p99, st.bounded = quickP99(e.target.Since(fromIndex), plan, stepJobs[i], st.from, st.to, st.to.Add(o.Settle))
		st.held = st.bounded && st.p99 < capacityP99
		done = i + 1
		e.cfg.Log.Info("step", "rate", st.rate, "p99", st.p99, "bounded", st.bounded, "held", st.held)
		if !st.held {
			break
		}
	}
	steps = steps[:done]
	load1 := procstat.LoadAverage()
	// The ledger's account of each step, with the same settle cut, over
	// the step's own jobs (their start and end times keep their slots in
	// its window).
	deliveries := e.target.Deliveries()
	for i := range steps {
		st := &steps[i]
		var cut []target.Delivery
		for _, d := range deliveries {
			if int(d.Job) >= stepJobs[i][0] && int(d.Job) < stepJobs[i][1] && !d.At.After(st.to.Add(o.Settle)) {
				cut = append(cut, d)
			}
			if !d.At.Before(st.from) && d.At.Before(st.to) {
				st.arrived++
			}
		}
		st.res = ledger.Check(ledger.Input{Plan: plan, JobIDs: ids, From: st.from, To: st.to, SpanFrom: st.from, Deliveries: cut})
	}
	capacity, best := 0.0, -1
	for i, st := range steps {
		if st.held {
			capacity, best = st.rate, i
		}
	}

	var r report.Doc
	e.header(&r, fmt.Sprintf("End to end: capacity, a ramp from %.0f to at most %.0f executions/s", o.From, o.Max))
	r.P("Every-second crons (`* * * * * *`), %s jobs in all, registered through BatchCreateJobs in %s and held by the trigger %s after the first call; step k's jobs have start and end times bounding them to its %s window. The steps follow each other without a pause; a step is **held** when the p99 lateness of its slots (arrival at the target − nominal time; a slot not delivered %s after the window counts as later than any) is under %s with none fired twice. The ramp stops at the first step not held. No profile runs. Load average at the ramp's start: %s; at its end: %s.",
		report.Num(len(ids)), regTime.Round(time.Millisecond), projected.Sub(regStart).Round(time.Millisecond), o.StepDuration, o.Settle, capacityP99, load0, load1)
	rows := [][]string{}
	for _, st := range steps {
		p99 := "> all (more than 1 % not delivered)"
		if st.bounded {
			p99 = report.Ms(st.p99)
		}
		perExec := "-"
		if st.arrived > 0 && st.usage.Err == nil {
			perExec = fmt.Sprintf("%.3f / %.3f ms", float64(st.usage.Busy)/float64(time.Millisecond)/float64(st.arrived),
				float64(product(st.usage))/float64(time.Millisecond)/float64(st.arrived))
		}
		rows = append(rows, []string{fmt.Sprintf("%.0f/s", st.rate), st.from.UTC().Format("15:04:05"),
			fmt.Sprintf("%.0f/s", float64(st.arrived)/o.StepDuration.Seconds()),
			report.Ms(report.Quantile(st.res.Lateness, 0.5)), p99, report.Num(st.res.Missed), report.Num(st.res.DeliveredTwice),
			fmt.Sprintf("%.2f", st.usage.Of(st.usage.Busy)), perExec, fmt.Sprint(st.held)})
	}
	r.Table([]string{"offered", "from (UTC)", "arrived", "p50", "p99", "not delivered after settle", "fired twice", "machine busy (cores)", "CPU per execution: machine / product", "held"}, rows)
	if best < 0 {
		r.P("**Capacity: below %.0f executions/s** (the first step was not held).", o.From)
	} else {
		top := ""
		if best == len(rates)-1 {
			top = " (the ramp's last step: the capacity may be higher; raise --max)"
		}
		r.P("**Capacity: %.0f executions/s**%s, the highest offered rate held with a p99 under %s.", capacity, top, capacityP99)
		st := steps[best]
		r.H(3, fmt.Sprintf("CPU at %.0f executions/s", st.rate))
		e.perExecution(&r, st.usage, st.arrived, &st.end)
	}
	ceilingTable(&r, ceil, capacity)
	if err := r.Emit(e.cfg.Out); err != nil {
		return err
	}
	return e.checkAlive()
}
