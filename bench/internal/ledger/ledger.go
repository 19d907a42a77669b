// Package ledger checks the deliveries the benchmark's target received
// against the slots the plan says were due: which slots were missed, which
// arrived more than once, how late each arrived. A delivery names its job
// by its URL and its slot only by the webhook-id, which is the execution id
// derived from (job, nominal time) by libs/execid; the ledger inverts that
// by computing the ids of every slot of the job over the span of the run.
package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/cronmesh/cronmesh/bench/internal/target"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
	"github.com/cronmesh/cronmesh/libs/execid"
)

// Input is what a check needs.
type Input struct {
	Plan   *workload.Plan
	JobIDs []string // registry id of each planned job, by index
	// From and To bound the measured window: slots with a nominal time in
	// [From, To) are expected.
	From, To time.Time
	// SpanFrom is the earliest nominal time any delivery can be for (the
	// first registration): deliveries are resolved against slots from there
	// to the last arrival.
	SpanFrom   time.Time
	Deliveries []target.Delivery
}

// Result is the verdict of one check. Counts are of slots unless named
// deliveries.
type Result struct {
	Expected   int                   // slots due in the window
	ByKind     map[workload.Kind]int // expected, per kind
	Delivered  int                   // of those, delivered at least once
	Missed     int                   // of those, never delivered
	MissedKind map[workload.Kind]int
	// MissedSample names a few missed slots ("job 12 (kind) at 10:00:01").
	MissedSample []string
	// DeliveredTwice are slots (any nominal time, in the window or not)
	// whose webhook-id reached the target more than once: a slot fired
	// twice by the trigger or a request redelivered by the dispatcher; the
	// target cannot tell them apart, the count bounds both.
	DeliveredTwice int
	// ExtraDeliveries are the deliveries beyond the first of each
	// webhook-id (duplicate deliveries).
	ExtraDeliveries int
	// Unresolved deliveries carry an id that is no slot of their job over
	// the span: a slot fired at a time the schedule does not have, or a
	// malformed request.
	Unresolved int
	// Lateness of each delivered window slot (first arrival - nominal),
	// sorted ascending.
	Lateness   []time.Duration
	LateByKind map[workload.Kind][]time.Duration // sorted
	// LateByTenth is the lateness of the window's slots by tenth of the
	// window their nominal time falls in, each sorted, without the slots on
	// a top-of-minute second (second 0), which TopByTenth holds: every
	// minute's crons crowd onto that second, and its lateness would hide
	// the rest's.
	LateByTenth, TopByTenth [10][]time.Duration
	// LateTop and LateRest are the lateness of the slots on a
	// top-of-minute second and of the others, sorted.
	LateTop, LateRest []time.Duration
	// FirstArrival and LastArrival of the window's slots.
	FirstArrival, LastArrival time.Time
	// ArrivedInWindow are the deliveries (of any slot) that arrived in
	// [From, To): the rate the target saw.
	ArrivedInWindow int
}

// Check reconciles the deliveries with the plan.
func Check(in Input) Result {
	r := Result{ByKind: map[workload.Kind]int{}, MissedKind: map[workload.Kind]int{}, LateByKind: map[workload.Kind][]time.Duration{}}
	byJob := map[int32][]int{} // job -> indexes into in.Deliveries
	var last time.Time
	seen := make(map[uuid.UUID]int, len(in.Deliveries))
	for i, d := range in.Deliveries {
		if !d.At.Before(in.From) && d.At.Before(in.To) {
			r.ArrivedInWindow++
		}
		if d.At.After(last) {
			last = d.At
		}
		seen[d.WebhookID]++
		if d.Job < 0 || int(d.Job) >= len(in.Plan.Jobs) || d.WebhookID == uuid.Nil {
			r.Unresolved++
			continue
		}
		byJob[d.Job] = append(byJob[d.Job], i)
	}
	for id, n := range seen {
		if n > 1 && id != uuid.Nil {
			r.DeliveredTwice++
			r.ExtraDeliveries += n - 1
		}
	}
	spanTo := last.Add(time.Second)
	for i, job := range in.Plan.Jobs {
		expected := job.Slots(in.From, in.To)
		r.Expected += len(expected)
		r.ByKind[job.Kind] += len(expected)
		first := map[int64]time.Time{} // nominal -> first arrival
		if ds := byJob[int32(i)]; len(ds) > 0 {
			ids := map[uuid.UUID]int64{}
			for _, t := range job.Slots(in.SpanFrom, spanTo) {
				ids[uuid.MustParse(execid.For(in.JobIDs[i], t))] = t.UnixNano()
			}
			for _, di := range ds {
				d := in.Deliveries[di]
				nominal, ok := ids[d.WebhookID]
				if !ok {
					r.Unresolved++
					continue
				}
				if f, ok := first[nominal]; !ok || d.At.Before(f) {
					first[nominal] = d.At
				}
			}
		}
		for _, t := range expected {
			at, ok := first[t.UnixNano()]
			if !ok {
				r.Missed++
				r.MissedKind[job.Kind]++
				if len(r.MissedSample) < 5 {
					r.MissedSample = append(r.MissedSample, fmt.Sprintf("job %d (%s) at %s", i, job.Kind, t.Format("15:04:05.000")))
				}
				continue
			}
			r.Delivered++
			late := at.Sub(t)
			r.Lateness = append(r.Lateness, late)
			r.LateByKind[job.Kind] = append(r.LateByKind[job.Kind], late)
			tenth := min(int(10*t.Sub(in.From)/in.To.Sub(in.From)), 9)
			if t.Truncate(time.Minute).Equal(t.Truncate(time.Second)) {
				r.TopByTenth[tenth] = append(r.TopByTenth[tenth], late)
				r.LateTop = append(r.LateTop, late)
			} else {
				r.LateByTenth[tenth] = append(r.LateByTenth[tenth], late)
				r.LateRest = append(r.LateRest, late)
			}
			if r.FirstArrival.IsZero() || at.Before(r.FirstArrival) {
				r.FirstArrival = at
			}
			if at.After(r.LastArrival) {
				r.LastArrival = at
			}
		}
	}
	slices.Sort(r.Lateness)
	slices.Sort(r.LateTop)
	slices.Sort(r.LateRest)
	for k := range r.LateByKind {
		slices.Sort(r.LateByKind[k])
	}
	for i := range r.LateByTenth {
		slices.Sort(r.LateByTenth[i])
		slices.Sort(r.TopByTenth[i])
	}
	return r
}

// Window is the set of execution ids due in a window, to follow how many
// of them have arrived while a run drains (Check does the full accounting
// afterwards).
type Window struct {
	ids     map[uuid.UUID]int32
	arrived []bool
	count   int
	next    int // deliveries already looked at
}

// NewWindow computes the execution id of every slot of the plan in
// [from, to).
func NewWindow(plan *workload.Plan, jobIDs []string, from, to time.Time) *Window {
	w := &Window{ids: map[uuid.UUID]int32{}}
	for i, job := range plan.Jobs {
		for _, t := range job.Slots(from, to) {
			w.ids[uuid.MustParse(execid.For(jobIDs[i], t))] = int32(len(w.arrived))
			w.arrived = append(w.arrived, false)
		}
	}
	return w
}

// Expected is the number of slots in the window.
func (w *Window) Expected() int { return len(w.arrived) }

// Observe reads the target's deliveries since the previous call and
// returns how many of the window's slots have arrived.
func (w *Window) Observe(t *target.Server) int {
	ds := t.Since(w.next)
	for _, d := range ds {
		if i, ok := w.ids[d.WebhookID]; ok && !w.arrived[i] {
			w.arrived[i] = true
			w.count++
		}
	}
	w.next += len(ds)
	return w.count
}
