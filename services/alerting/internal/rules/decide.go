package rules

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
)

// Outcome is what an execution event means to the rules.
type Outcome int

// The outcomes the rules tell apart; every other event is OutcomeNone.
const (
	OutcomeNone Outcome = iota
	// OutcomeSuccess: the execution succeeded (resolves failure, dead and
	// no-success incidents; resets the failure count).
	OutcomeSuccess
	// OutcomeFailure: FAILED with no retry left.
	OutcomeFailure
	// OutcomeDead: the execution reached the dead-letter queue (also a
	// terminal failure for the count).
	OutcomeDead
	// OutcomeMissed: the trigger recorded the slot missed.
	OutcomeMissed
	// OutcomeFired: the first attempt of a scheduled slot started.
	OutcomeFired
	// OutcomeSkipped: the execution's overlap policy skipped it; a failure
	// for the consecutive-failure rules that count skipped executions,
	// nothing for the others.
	OutcomeSkipped
)

// Classify tells what an execution event means to the rules. A FAILED
// event with a retry scheduled, a retry's start and a manual run's or a
// backfill's start mean nothing: they neither open nor resolve. An
// attempt's outcome may also tell that its slot fired (see Fired), which
// Relevant adds.
func Classify(ev *eventsv1.ExecutionEvent) Outcome {
	switch ev.GetKind() {
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED:
		return OutcomeSuccess
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED:
		if !ev.GetRetryScheduled() {
			return OutcomeFailure
		}
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD:
		return OutcomeDead
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED:
		return OutcomeMissed
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SKIPPED:
		return OutcomeSkipped
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED:
		if Fired(ev) {
			return OutcomeFired
		}
	}
	return OutcomeNone
}

// Fired reports an event that shows the first attempt of a scheduled slot
// started: its STARTED, or its outcome (SUCCEEDED, FAILED, DEAD or
// CANCELLED carrying the attempt's start time). The dispatcher emits
// STARTED only for an attempt still running after a threshold, so most
// slots are seen to fire by their outcome alone; a slot seen by both
// counts once (Event.Key). A DEAD or CANCELLED without a start time made
// no attempt: it does not tell that the slot fired.
func Fired(ev *eventsv1.ExecutionEvent) bool {
	if ev.GetAttempt() > 1 || !Scheduled(ev) {
		return false
	}
	switch ev.GetKind() {
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED:
		return true
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED:
		return ev.GetStartTime().IsValid()
	}
	return false
}

// Scheduled reports slots of the schedule, fired on time or caught up
// late (not manual runs or backfills, whose timing says nothing about the
// trigger).
func Scheduled(ev *eventsv1.ExecutionEvent) bool {
	switch ev.GetTriggerKind() {
	case dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP, dispatchv1.TriggerKind_TRIGGER_KIND_UNSPECIFIED:
		return true
	}
	return false
}

// Lateness is how long after its nominal time a slot fired; 0 when unknown.
func Lateness(ev *eventsv1.ExecutionEvent) time.Duration {
	if !ev.GetFireTime().IsValid() || !ev.GetNominalTime().IsValid() {
		return 0
	}
	return ev.GetFireTime().AsTime().Sub(ev.GetNominalTime().AsTime())
}

// Event is an execution event some rule watches.
type Event struct {
	Ev      *eventsv1.ExecutionEvent
	Outcome Outcome
	// Rules are the rules that watch the event's job.
	Rules   []*Rule
	Nominal time.Time
	// Opens: the event may open an incident, so it must count once; the
	// store records it (see EventKey) and Dedupe drops it when it was
	// recorded before.
	Opens bool
}

// Key is the event's identity for counting it once. A slot's firing has
// the key of its STARTED whichever event told it (STARTED or the
// outcome), so that a slot seen by both opens once.
func (e Event) Key() EventKey {
	kind := e.Ev.GetKind()
	if e.Outcome == OutcomeFired {
		kind = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED
	}
	return EventKey{e.Ev.GetExecutionId(), e.Ev.GetAttempt(), int16(kind)}
}

// EventKey identifies an execution event across redeliveries.
type EventKey struct {
	ExecutionID string
	Attempt     int32
	Kind        int16
}

// Relevant returns, in order, the events of a batch some rule of the set
// watches. A skipped execution is relevant only to a job watched by a
// consecutive-failure rule that counts skipped executions; an on-time
// slot's start can resolve but not open, so it is not counted once. The
// outcome of a slot's first attempt gives two events when a
// missed-schedule rule watches the job: the slot fired (OutcomeFired,
// first), then the outcome itself.
func Relevant(events []*eventsv1.ExecutionEvent, set *Set) []Event {
	var out []Event
	for _, ev := range events {
		o := Classify(ev)
		firedToo := o != OutcomeFired && Fired(ev)
		if o == OutcomeNone && !firedToo {
			continue
		}
		matched := set.Matching(ev.GetNamespace(), ev.GetJobId(), ev.GetJobLabels())
		if len(matched) == 0 {
			continue
		}
		nominal := ev.GetNominalTime().AsTime()
		if firedToo && slices.ContainsFunc(matched, isMissedSchedule) {
			out = append(out, Event{Ev: ev, Outcome: OutcomeFired, Rules: matched, Nominal: nominal, Opens: lateByAny(matched, Lateness(ev))})
		}
		if o == OutcomeNone || (o == OutcomeSkipped && !slices.ContainsFunc(matched, countsSkipped)) {
			continue
		}
		e := Event{Ev: ev, Outcome: o, Rules: matched, Nominal: nominal}
		switch o {
		case OutcomeFailure, OutcomeDead, OutcomeMissed, OutcomeSkipped:
			e.Opens = true
		case OutcomeFired:
			e.Opens = lateByAny(matched, Lateness(ev))
		}
		out = append(out, e)
	}
	return out
}

// Dedupe drops the opening events counted before: those whose key is not
// in fresh (the keys the store recorded for the first time now) and the
// repeats of a key within the batch. Events that cannot open are kept,
// since resolving is idempotent by itself. The events keep their order.
func Dedupe(events []Event, fresh map[EventKey]bool) (kept []Event, duplicates int) {
	counted := map[EventKey]bool{}
	for _, e := range events {
		if e.Opens {
			k := e.Key()
			if !fresh[k] || counted[k] {
				duplicates++
				continue
			}
			counted[k] = true
		}
		kept = append(kept, e)
	}
	return kept, duplicates
}

// IncidentKey is a (rule, job) pair; at most one incident of it is open.
type IncidentKey struct{ Rule, Job string }

// Streak is a job's consecutive failures, as the store counts them from
// every recorded event (this batch's included): the distinct nominal times
// of terminal failures after the job's latest success, and of failures and
// skipped executions together. It is counted from the record rather than
// carried forward because messages arrive in any order and are redelivered:
// a count of distinct slots after the latest success does not depend on
// either. Both stop at StreakQuery's limit.
type Streak struct {
	Failed, FailedOrSkipped int
}

// StreakQuery says which streaks Decide needs: the jobs with a failure or
// a skipped execution in the batch, sorted, the largest threshold of the
// batch's rules (a count may stop there, which keeps it bounded however
// long a job keeps failing), and whether any rule counts skipped
// executions (else FailedOrSkipped is not needed).
func StreakQuery(events []Event) (jobs []string, limit int, withSkipped bool) {
	limit = 1
	for _, e := range events {
		switch e.Outcome {
		case OutcomeFailure, OutcomeDead, OutcomeSkipped:
			if !slices.Contains(jobs, e.Ev.GetJobId()) {
				jobs = append(jobs, e.Ev.GetJobId())
			}
		}
		for _, r := range e.Rules {
			limit = max(limit, r.Count)
		}
		withSkipped = withSkipped || slices.ContainsFunc(e.Rules, countsSkipped)
	}
	slices.Sort(jobs)
	return jobs, limit, withSkipped
}

// State is what the store knows before deciding on a batch.
type State struct {
	// Open maps the open incidents of the batch's jobs to their slot
	// times (nil: the incident has none, so any later event resolves it).
	Open map[IncidentKey]*time.Time
	// Streaks has the streak of every job StreakQuery named.
	Streaks map[string]Streak
	// Manual has the last manual resolution of the keys the decision
	// opens, where a person resolved an incident of the key by hand.
	// It only ever drops an opening or rewrites its summary, so the store
	// decides once without it, reads the manual resolutions of the keys
	// that decision opens (one look-up each, none in the usual batch that
	// opens nothing), and decides again with them.
	Manual map[IncidentKey]Manual
}

// Manual is the last manual resolution of an incident of a (rule, job).
// The slots at or before it count no more towards the rule, so the
// resolution is not undone by the very failures it dismissed; compared
// with the slots' nominal times, so that a retry of an old slot failing
// after the resolution does not count either.
type Manual struct {
	// At is when the incident was resolved by hand.
	At time.Time
	// Streak is, for a consecutive-failure rule, the job's streak as the
	// rule counts it (skipped executions too when it counts them), up to
	// its count, of the slots after both At and the job's latest success.
	Streak int
}

// Dismissed reports a slot that a manual resolution at cut (nil: none)
// dismissed: one at or before it. Such a slot opens no incident of the
// resolved key; the watchdog's missed slots are judged by it too.
func Dismissed(slot time.Time, cut *time.Time) bool {
	return cut != nil && !slot.After(*cut)
}

// afterManual is what the last manual resolution m of its key leaves of
// an opening: a consecutive-failure rule opens only when the streak since
// the resolution reaches its count again (and says so), and no incident
// opens on a dismissed slot.
func afterManual(o Open, m Manual) (Open, bool) {
	if o.Rule.Kind == ConsecutiveFailures {
		if m.Streak < o.Rule.Count {
			return o, false
		}
		what := "failed"
		if o.Rule.CountSkipped {
			what = "failed or were skipped"
		}
		o.Summary = fmt.Sprintf("%d executions in a row %s since the last incident was resolved by hand", m.Streak, what)
	}
	if Dismissed(o.Slot, &m.At) {
		return o, false
	}
	return o, true
}

// Resolve is an open incident to resolve.
type Resolve struct {
	Key    IncidentKey
	Reason string
}

// Open is an incident to open; the store opens it unless another
// evaluator opened one of the key meanwhile.
type Open struct {
	Rule *Rule
	// Ev is the event that opens it (namespace, job, display name).
	Ev      *eventsv1.ExecutionEvent
	Slot    time.Time
	Summary string
}

// Decision is what a batch changes: the incidents to resolve, then the
// incidents to open. A key is resolved and opened again in one batch when
// the batch holds both the recovery and a new breach after it.
type Decision struct {
	Resolve []Resolve
	Open    []Open
}

// Decide is the rules' verdict on a batch of (deduplicated) events, given
// the open incidents and the streaks:
//   - a success resolves the job's consecutive-failure, dead-letter and
//     no-success incidents opened by slots no later than the batch's latest
//     success (so a late success does not hide a newer breach);
//   - a dead-lettered execution opens a dead-letter incident;
//   - a consecutive-failure rule opens when the job's streak (with skipped
//     executions when the rule counts them) reaches its count, on the
//     batch's latest failing slot;
//   - for a missed-schedule rule only the batch's latest slot of the job
//     counts: missed or fired later than the tolerance opens, fired on
//     time resolves an incident of that slot or earlier.
//
// Last, an opening of a key a person resolved by hand (st.Manual) must
// survive that resolution: it opens nothing on a slot at or before it,
// and a consecutive-failure rule counts only the failures after it.
//
// It opens at most one incident per key and none for a key that stays
// open, and resolves each open key at most once. The order is fixed
// (resolves and missed-schedule opens by key, dead-letter opens in event
// order, consecutive-failure opens by job, then in the rules' order) so a
// batch always yields the same decision.
func Decide(events []Event, st State) Decision {
	lastSuccess := map[string]time.Time{}
	failing := map[string]Event{} // job -> its latest failing event
	type slot struct {
		e    Event
		rule *Rule
	}
	missedLatest := map[IncidentKey]slot{}
	var deadOpens []Open
	for _, e := range events {
		job := e.Ev.GetJobId()
		switch e.Outcome {
		case OutcomeSuccess:
			if cur, ok := lastSuccess[job]; !ok || e.Nominal.After(cur) {
				lastSuccess[job] = e.Nominal
			}
		case OutcomeFailure, OutcomeDead, OutcomeSkipped:
			if cur, ok := failing[job]; !ok || e.Nominal.After(cur.Nominal) {
				failing[job] = e
			}
			if e.Outcome == OutcomeDead {
				for _, r := range e.Rules {
					if r.Kind == DeadLettered {
						deadOpens = append(deadOpens, Open{r, e.Ev, e.Nominal, "an execution was dead-lettered: " + truncate(e.Ev.GetReason(), 200)})
					}
				}
			}
		case OutcomeMissed, OutcomeFired:
			for _, r := range e.Rules {
				if r.Kind != MissedSchedule {
					continue
				}
				k := IncidentKey{r.ID, job}
				if cur, ok := missedLatest[k]; !ok || !e.Nominal.Before(cur.e.Nominal) {
					missedLatest[k] = slot{e, r}
				}
			}
		}
	}

	type resolveReq struct {
		Resolve
		nominal time.Time
	}
	var resolves []resolveReq
	var missedOpens []Open
	for _, k := range slices.SortedFunc(maps.Keys(missedLatest), compareKeys) {
		s := missedLatest[k]
		late := Lateness(s.e.Ev)
		switch {
		case s.e.Outcome == OutcomeMissed:
			missedOpens = append(missedOpens, Open{s.rule, s.e.Ev, s.e.Nominal, "a scheduled slot was missed: " + truncate(s.e.Ev.GetReason(), 200)})
		case late > s.rule.Tolerance:
			missedOpens = append(missedOpens, Open{s.rule, s.e.Ev, s.e.Nominal, fmt.Sprintf("a scheduled slot fired %s late (tolerance %s)", late.Round(time.Millisecond), s.rule.Tolerance)})
		default:
			resolves = append(resolves, resolveReq{Resolve{k, "a slot fired on time"}, s.e.Nominal})
		}
	}
	for job, nominal := range lastSuccess {
		for _, r := range rulesOf(events, job) {
			if r.Kind == ConsecutiveFailures || r.Kind == DeadLettered || r.Kind == NoSuccess {
				resolves = append(resolves, resolveReq{Resolve{IncidentKey{r.ID, job}, "the job succeeded"}, nominal})
			}
		}
	}
	var streakOpens []Open
	for _, job := range slices.Sorted(maps.Keys(failing)) {
		e := failing[job]
		streak := st.Streaks[job]
		for _, r := range rulesOf(events, job) {
			if r.Kind != ConsecutiveFailures {
				continue
			}
			n, what := streak.Failed, "failed"
			if r.CountSkipped {
				n, what = streak.FailedOrSkipped, "failed or were skipped"
			}
			if n >= r.Count {
				streakOpens = append(streakOpens, Open{r, e.Ev, e.Nominal, fmt.Sprintf("%d executions in a row %s", n, what)})
			}
		}
	}

	var d Decision
	open := make(map[IncidentKey]bool, len(st.Open))
	for k := range st.Open {
		open[k] = true
	}
	slices.SortFunc(resolves, func(a, b resolveReq) int { return compareKeys(a.Key, b.Key) })
	for _, rr := range resolves {
		slotTime, ok := st.Open[rr.Key]
		if !ok || !open[rr.Key] || (slotTime != nil && slotTime.After(rr.nominal)) {
			continue
		}
		d.Resolve = append(d.Resolve, rr.Resolve)
		delete(open, rr.Key)
	}
	for _, o := range slices.Concat(deadOpens, missedOpens, streakOpens) {
		k := IncidentKey{o.Rule.ID, o.Ev.GetJobId()}
		if open[k] {
			continue
		}
		// The key's first opening of the batch is the one judged against
		// its manual resolution: a later one of the key does not stand in
		// for it when it is dropped.
		open[k] = true
		if m, ok := st.Manual[k]; ok {
			var keep bool
			if o, keep = afterManual(o, m); !keep {
				continue
			}
		}
		d.Open = append(d.Open, o)
	}
	return d
}

// isMissedSchedule reports a missed-schedule rule.
func isMissedSchedule(r *Rule) bool { return r.Kind == MissedSchedule }

// countsSkipped reports a consecutive-failure rule that counts skipped
// executions as failures.
func countsSkipped(r *Rule) bool { return r.Kind == ConsecutiveFailures && r.CountSkipped }

func lateByAny(rs []*Rule, late time.Duration) bool {
	for _, r := range rs {
		if r.Kind == MissedSchedule && late > r.Tolerance {
			return true
		}
	}
	return false
}

// rulesOf returns the rules that watch the job, as its first event of the
// batch found them.
func rulesOf(events []Event, job string) []*Rule {
	for _, e := range events {
		if e.Ev.GetJobId() == job {
			return e.Rules
		}
	}
	return nil
}

func compareKeys(a, b IncidentKey) int {
	return cmp.Or(strings.Compare(a.Job, b.Job), strings.Compare(a.Rule, b.Rule))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
