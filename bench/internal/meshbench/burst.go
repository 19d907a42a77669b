package meshbench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/ledger"
	"github.com/cronmesh/cronmesh/bench/internal/pause"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	"github.com/cronmesh/cronmesh/bench/internal/report"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
)

// BurstOptions size the burst scenario.
type BurstOptions struct {
	Jobs int // one-time jobs, all due on the same second
	// Lead is the time from the first registration to the due second (0:
	// 40 s plus 1 s per 1,200 jobs, time for the registry's relay and the
	// trigger's projection).
	Lead time.Duration
}

// Burst registers Jobs one-time jobs due on one second and measures how
// long the mesh takes to deliver them all.
func Burst(ctx context.Context, cfg Config, o BurstOptions) error {
	if o.Jobs <= 0 {
		return fmt.Errorf("meshbench: jobs must be positive")
	}
	e, ceil, err := startMeasured(ctx, cfg, "burst")
	if err != nil {
		return err
	}
	defer e.close()
	lead := o.Lead
	if lead == 0 {
		lead = 40*time.Second + time.Duration(o.Jobs/1200)*time.Second
	}
	regStart := time.Now()
	due := regStart.Add(lead).Truncate(time.Second)
	plan := workload.Burst(o.Jobs, due)
	e.cfg.Log.Info("registering", "jobs", o.Jobs, "due", due.Format("15:04:05"))
	ids, regTime, err := e.register(ctx, plan)
	if err != nil {
		return err
	}
	projected, err := e.waitProjected(ctx, len(ids), due.Add(5*time.Minute))
	if err != nil {
		return err
	}
	e.cfg.Log.Info("projected", "after", projected.Sub(regStart).Round(time.Millisecond), "due_in", time.Until(due).Round(time.Second))
	if err := pause.Until(ctx, due.Add(-time.Second)); err != nil {
		return err
	}
	load0 := procstat.LoadAverage()
	w0, w0Err := e.readRowWrites(ctx)
	s0 := e.procs.Snapshot(e.tracked())
	var waitProfiles func() []profile
	if e.cfg.Profile {
		waitProfiles = e.startProfiles(ctx, "burst", min(e.cfg.ProfileSecs, 20))
	}
	deadline := due.Add(3 * time.Minute)
	for e.target.Count() < o.Jobs && time.Now().Before(deadline) {
		if err := e.checkAlive(); err != nil {
			return err
		}
		if err := pause.For(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	s1 := e.procs.Snapshot(e.tracked())
	load1 := procstat.LoadAverage()
	e.target.WaitQuiet(ctx, 5*time.Second, time.Now().Add(30*time.Second))
	end := e.procs.Snapshot(e.tracked())
	aliveErr := e.checkAlive()
	fired, firedErr := e.lastFired(ctx, due)
	if err := pause.For(ctx, statsFlush); err != nil {
		return err
	}
	w1, w1Err := e.readRowWrites(ctx)
	var profs []profile
	if waitProfiles != nil {
		profs = waitProfiles()
		summarise(ctx, profs)
	}
	res := ledger.Check(ledger.Input{Plan: plan, JobIDs: ids, From: due, To: due.Add(time.Second), SpanFrom: due, Deliveries: e.target.Deliveries()})

	var r report.Doc
	e.header(&r, fmt.Sprintf("End to end: burst of %s one-time slots on one second", report.Num(o.Jobs)))
	r.P("Load average 1 s before the due second: %s; when the last arrived: %s.", load0, load1)
	r.P("")
	r.P("%s jobs of kind `at`, all due at %s, registered through BatchCreateJobs (1,000 a call, %d callers) in %s (%.0f jobs/s) from %s; the trigger held them all %s after the first call, %s before the due second.",
		report.Num(o.Jobs), due.UTC().Format("15:04:05"), e.cfg.Callers, regTime.Round(time.Millisecond), float64(len(ids))/regTime.Seconds(),
		regStart.UTC().Format("15:04:05"), projected.Sub(regStart).Round(time.Millisecond), due.Sub(projected).Round(time.Millisecond))
	last := res.LastArrival.Sub(due)
	spanRate := "-"
	if res.Delivered > 1 {
		spanRate = fmt.Sprintf("%.0f/s", float64(res.Delivered)/res.LastArrival.Sub(res.FirstArrival).Seconds())
	}
	r.Table([]string{"measure", "value"}, [][]string{
		{"slots / delivered / **missed**", fmt.Sprintf("%s / %s / **%s**", report.Num(res.Expected), report.Num(res.Delivered), report.Num(res.Missed))},
		{"last slot fired (committed to the trigger's ledger and outbox) after the due second", firedText(fired, firedErr, due)},
		{"first arrival after the due second", res.FirstArrival.Sub(due).Round(time.Millisecond).String()},
		{"**last arrival after the due second**", fmt.Sprintf("**%s**", last.Round(time.Millisecond))},
		{"delivery rate, first to last arrival", spanRate},
		{"lateness p50 / p99", report.Ms(report.Quantile(res.Lateness, 0.5)) + " / " + report.Ms(report.Quantile(res.Lateness, 0.99))},
		{"slots fired twice (webhook-id delivered more than once) / extra deliveries", fmt.Sprintf("%s / %s", report.Num(res.DeliveredTwice), report.Num(res.ExtraDeliveries))},
		{"deliveries matching no slot", report.Num(res.Unresolved)},
	})
	r.H(3, "CPU")
	e.perExecution(&r, procstat.Between(s0, s1), res.Delivered, &end)
	r.H(3, "Row writes")
	if err := errors.Join(w0Err, w1Err); err != nil {
		r.P("The counters could not be read: %v.", err)
	} else {
		rowWritesTable(&r, w0, w1, res.Delivered)
	}
	ceilingTable(&r, ceil, float64(res.Delivered)/max(last.Seconds(), 1))
	r.H(3, "Targets")
	r.Table([]string{"target", "measured", "verdict"}, [][]string{
		{"a burst of 100,000 slots on one second all fired within 3 s", firedText(fired, firedErr, due),
			report.JudgeIf(o.Jobs >= targetBurstN && firedErr == nil, fired.Sub(due) <= targetBurstFired)},
		{"a burst of 100,000 slots on one second delivered within 15 s (aim 10 s)", fmt.Sprintf("%s of %s, the last %s after the second", report.Num(res.Delivered), report.Num(res.Expected), last.Round(time.Millisecond)),
			report.JudgeIf(o.Jobs >= targetBurstN, res.Missed == 0 && last <= targetBurst)},
		{"zero missed, zero double-fired", fmt.Sprintf("%s missed, %s twice", report.Num(res.Missed), report.Num(res.DeliveredTwice)), report.Judge(res.Missed == 0 && res.DeliveredTwice == 0 && res.Unresolved == 0)},
	})
	if len(profs) > 0 {
		r.H(3, "CPU profiles")
		r.P("From 1 s before the due second, %d s of each service (summarised after the last delivery):", min(e.cfg.ProfileSecs, 20))
		profiles(&r, profs)
	}
	if err := r.Emit(e.cfg.Out); err != nil {
		return err
	}
	return aliveErr
}

// lastFired is when the trigger committed the last slot due at due: the
// newest record time of its ledger rows for that nominal time (the slots
// are in the outbox then, and published at once).
func (e *env) lastFired(ctx context.Context, due time.Time) (time.Time, error) {
	var at *time.Time
	if err := e.trigger.QueryRow(ctx, `SELECT max(record_time) FROM ledger WHERE nominal_time = $1`, due).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("read the ledger: %w", err)
	}
	if at == nil {
		return time.Time{}, errors.New("no slot in the ledger")
	}
	return *at, nil
}

func firedText(fired time.Time, err error, due time.Time) string {
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	return fired.Sub(due).Round(time.Millisecond).String()
}
