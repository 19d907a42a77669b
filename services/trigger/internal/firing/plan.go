package firing

import (
	"errors"
	"fmt"
	"time"

	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/schedule"
)

// Defaults of [Planner] (and so of [Plan] and the [Engine]).
const (
	// DefaultOnTimeTolerance is how late a slot may be committed and still
	// count as fired on time (KindScheduled): the product promises firing
	// within 5 s of the nominal time.
	DefaultOnTimeTolerance = 5 * time.Second
	// DefaultMaxSlots caps the slots of one Advance, so that a job with
	// many slots behind (an every-second job after a day of downtime: 86,400)
	// is recorded in bounded chunks, oldest first, instead of one huge
	// transaction.
	DefaultMaxSlots = 1000
	// DefaultCatchUpWindow applies to a stored job without catch_up_window.
	// The registry fills it in on every write, so this only covers rows
	// written before it did; it is the API's documented default.
	DefaultCatchUpWindow = time.Hour
)

// Planner decides what committing a due job does. The zero Planner uses the
// defaults; it is a value, safe for concurrent use.
type Planner struct {
	// OnTimeTolerance: a slot committed less than this after its firing
	// time (nominal + spread offset) is KindScheduled; later it is
	// KindCatchUp or KindMissed. Zero or negative means
	// DefaultOnTimeTolerance.
	OnTimeTolerance time.Duration
	// MaxSlots caps the slots of one Advance. Zero or negative means
	// DefaultMaxSlots.
	MaxSlots int
}

// Plan is Planner{}.Plan: what committing the due job d at time now does,
// with the default tolerance and slot cap.
func Plan(d Due, now time.Time) (Advance, error) {
	return Planner{}.Plan(d, now)
}

// Plan walks the job's slots from d.NextFire, oldest first, and returns the
// Advance that records every slot whose firing time (nominal + the job's
// [jobspec.SpreadOffset]) is at or before now, each exactly once:
//
//   - a paused job fires nothing: each slot is KindMissed, "the job is
//     paused" (the store should not return paused jobs; if it does, their
//     slots are still accounted for, never fired);
//   - a slot less than OnTimeTolerance late is KindScheduled, even when the
//     job's catch-up window is 0;
//   - a slot later than the job's catch-up window is KindMissed with the
//     reason (catch_up_window 0 means never catch up; unset means
//     DefaultCatchUpWindow);
//   - any other slot is KindCatchUp.
//
// A job with a limit (Job.max_runs) fires at most max_runs - d.RunsFired
// more slots: the walk stops at the slot that reaches the limit, and
// nothing after it is recorded, fired or missed. Missed slots do not count.
//
// To is the first slot not processed: the next future slot, or, when
// MaxSlots was reached, the next slot behind (in the past, so the engine
// continues with it at once in the next batch). To is zero when the
// schedule has no slot left (a one-time at/after job after its slot, or an
// end_time passed) or the advance reaches the job's limit: the job is
// done. A job not yet due at now gives an Advance without slots and To =
// d.NextFire: nothing to commit. A due job already at its limit (the store
// never returns one) gives an Advance without slots and a zero To, whose
// commit only completes it.
//
// d.NextFire is taken as a slot as it is (the store computed it from the
// same spec); the following slots come from jobspec.Schedule of the stored
// spec and the job's create time. Plan fails, and the job must be left as
// it is, when d has no Job, no NextFire or no create time, or when its
// stored schedule does not convert (a bad stored job, or a time zone this
// node's tz database lacks: recording its slots as missed would be wrong
// when another node, or this one after a fix, can fire them).
func (p Planner) Plan(d Due, now time.Time) (Advance, error) {
	sched, err := scheduleOf(nil, d)
	if err != nil {
		return Advance{}, err
	}
	return p.plan(d, sched, now, now), nil
}

// scheduleOf converts the stored schedule of d, resolving its time zone
// through locs (nil: no cache). The engine caches the result per loaded job:
// parsing the cron expression and loading the time zone cost far more than
// walking the slots.
func scheduleOf(locs *jobspec.Locations, d Due) (schedule.Schedule, error) {
	switch {
	case d.Job == nil:
		return schedule.Schedule{}, fmt.Errorf("firing: job %s: no job definition", d.JobID)
	case d.NextFire.IsZero():
		return schedule.Schedule{}, fmt.Errorf("firing: job %s: no next fire time", d.JobID)
	case d.Job.GetCreateTime() == nil || d.Job.GetCreateTime().CheckValid() != nil:
		// It anchors interval and after schedules: guessing would move slots.
		return schedule.Schedule{}, fmt.Errorf("firing: job %s: no valid create_time", d.JobID)
	}
	sched, errs := locs.Schedule(d.Job.GetSchedule(), d.Job.GetCreateTime().AsTime())
	if errs != nil {
		all := make([]error, len(errs))
		for i, e := range errs {
			all[i] = e
		}
		return schedule.Schedule{}, fmt.Errorf("firing: job %s: bad stored schedule: %w", d.JobID, errors.Join(all...))
	}
	return sched, nil
}

// catchUpWindow is the job's window; unset means the default, negative
// (never written by the registry) means none.
func catchUpWindow(d Due) time.Duration {
	w := d.Job.GetCatchUpWindow()
	if w == nil {
		return DefaultCatchUpWindow
	}
	return max(w.AsDuration(), 0)
}

// spreadOf is the job's spread offset; the engine's firing time and Plan's
// walk must use the same one.
func spreadOf(d Due) time.Duration {
	return jobspec.SpreadOffset(d.JobID, d.Job.GetSpreadWindow().AsDuration())
}

// FiringTime is when d's slot at nominal is due to fire: nominal plus the
// job's spread offset, the instant the engine aims at and
// trigger_fire_lateness_seconds measures from. The store stamps it on the
// slot's dispatch message, so that the relay's confirm lateness measures
// from the same instant.
func (d Due) FiringTime(nominal time.Time) time.Time {
	return nominal.Add(spreadOf(d))
}

// plan is Plan with the schedule already converted, and the slots due up to
// the firing time due rather than now: the engine commits slots ahead of
// their time (its Lead, Gather and crowds). Lateness still counts from now,
// so a slot committed ahead is on time.
func (p Planner) plan(d Due, sched schedule.Schedule, now, due time.Time) Advance {
	tolerance, maxSlots := p.OnTimeTolerance, p.MaxSlots
	if tolerance <= 0 {
		tolerance = DefaultOnTimeTolerance
	}
	if maxSlots <= 0 {
		maxSlots = DefaultMaxSlots
	}
	catchUp := catchUpWindow(d)
	spread := spreadOf(d)
	paused := d.Job.GetPaused()

	adv := Advance{Due: d}
	// remaining is the runs the job may still fire; -1 without a limit.
	remaining := int64(-1)
	if limit := d.Job.GetMaxRuns(); limit > 0 {
		remaining = max(limit-d.RunsFired, 0)
		if remaining == 0 {
			return adv // To zero: completed, nothing fired
		}
	}
	// The reason is the same for every missed slot of one job: build it once,
	// and only if needed (an every-second job a day behind misses 86,400).
	var missedReason string
	nominal := d.NextFire
	for {
		fireAt := nominal.Add(spread)
		if fireAt.After(due) || len(adv.Slots) == maxSlots {
			adv.To = nominal
			break
		}
		slot := Slot{Nominal: nominal}
		late := now.Sub(fireAt)
		switch {
		case paused:
			slot.Kind, slot.Reason = KindMissed, "the job is paused"
		case late < tolerance:
			slot.Kind = KindScheduled
		case late > catchUp:
			if missedReason == "" {
				missedReason = missedBecause(catchUp, tolerance)
			}
			slot.Kind, slot.Reason = KindMissed, missedReason
		default:
			slot.Kind = KindCatchUp
		}
		if adv.Slots == nil {
			// Most due jobs have one slot: do not let append over-allocate.
			adv.Slots = make([]Slot, 0, 1)
		}
		adv.Slots = append(adv.Slots, slot)
		if remaining > 0 && (slot.Kind == KindScheduled || slot.Kind == KindCatchUp) {
			if remaining--; remaining == 0 {
				adv.To = time.Time{} // the limit is reached: the job completes
				break
			}
		}
		next, ok := sched.Next(nominal)
		if !ok {
			adv.To = time.Time{}
			break
		}
		nominal = next
	}
	return adv
}

// missedBecause is the ledger's reason for a slot older than the catch-up
// window.
func missedBecause(catchUp, tolerance time.Duration) string {
	if catchUp == 0 {
		return fmt.Sprintf("more than %s late when the trigger could fire it, and the job does not catch up (catch-up window 0s)", tolerance)
	}
	return fmt.Sprintf("older than the catch-up window of %s when the trigger could fire it", catchUp)
}
