// Package ledger is the end-to-end suites' independent record of what
// happened to every (job, nominal second) slot of every-second jobs: what
// the broker was given (read from a queue on the dispatch exchange) and
// what the target received. It trusts nothing the services report about
// themselves, so a service that loses, doubles or misnames a slot cannot
// hide it. The fault-injection suite (services/devstack/chaos) records both
// sides and judges them with Check; the trigger's suite
// (services/trigger/e2e), which runs no dispatcher, records the broker side
// only and judges it with CheckQueue.
//
// The rules Check enforces (Verdict.Err):
//   - every expected slot was delivered to the target at least once;
//   - no slot was fired twice: its first attempt reached the dispatch
//     exchange from one outbox message only (the relay's
//     outbox.RowIDHeader, the row and the message's place in it; the
//     message id, derived from the slot, cannot tell). The trigger's
//     outbox relay publishes at least once, so a crash or a freeze between
//     the broker's confirm and the relay's delete publishes the same row
//     again: that republish is counted (Verdict.Republished) and reported,
//     not failed, since the dispatcher is where it must be absorbed;
//   - every message and every delivery of a slot carries the slot's own
//     execution id (libs/execid), so duplicates at the target are only ever
//     duplicates with the same webhook-id;
//   - nothing was delivered before its nominal time by the real clock,
//     and nothing enqueued before it unless its request says to be held
//     until then (not_before, the trigger's --lead).
package ledger

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
)

// OnTime is the lateness (first delivery minus nominal time) up to which a
// delivery counts as on time when the recovery time is measured.
const OnTime = time.Second

// Slot is one (job, nominal time) slot of an every-second job.
type Slot struct {
	Job     string
	Nominal int64 // unix seconds
}

func (s Slot) String() string {
	return fmt.Sprintf("%s@%s", s.Job, time.Unix(s.Nominal, 0).UTC().Format(time.TimeOnly))
}

// enqueue is one first attempt seen at the tap.
type enqueue struct {
	rowID string // the outbox row it was published from
	at    time.Time
	// notBefore is the request's not_before (zero: none): a slot fired
	// ahead of its time is held by the dispatcher until then.
	notBefore time.Time
}

// early says whether e arrived before nominal without asking to be held
// until it.
func (e enqueue) early(nominal time.Time) bool {
	return e.at.Before(nominal) && (e.notBefore.IsZero() || e.notBefore.Before(nominal))
}

type delivery struct {
	job, webhookID string
	at             time.Time
}

// Ledger records enqueues and deliveries; it is safe for concurrent use.
type Ledger struct {
	mu         sync.Mutex
	firsts     map[Slot][]enqueue // arrivals at the tap of attempt 1
	retries    map[Slot]int       // messages of later attempts
	ids        map[string]Slot    // execution id → slot, of every message seen
	deliveries []delivery
	problems   []string
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{firsts: map[Slot][]enqueue{}, retries: map[Slot]int{}, ids: map[string]Slot{}}
}

// Enqueued records a dispatch request read from the tap at at (the real
// clock of the test), published from the outbox row rowID (the message's
// outbox.RowIDHeader). A first attempt counts towards "fired once", and
// must come from an outbox row; a retry (attempt > 1) only counts towards
// the retry count.
func (l *Ledger) Enqueued(req *dispatchv1.DispatchRequest, rowID string, at time.Time) {
	nominal := req.GetNominalTime().AsTime()
	s := Slot{Job: req.GetJobId(), Nominal: nominal.Unix()}
	l.mu.Lock()
	defer l.mu.Unlock()
	if want := execid.For(s.Job, nominal); req.GetExecutionId() != want {
		l.problems = append(l.problems, fmt.Sprintf("%s attempt %d: execution id %s, want %s", s, req.GetAttempt(), req.GetExecutionId(), want))
	}
	l.ids[req.GetExecutionId()] = s
	if req.GetAttempt() <= 1 {
		if rowID == "" {
			l.problems = append(l.problems, fmt.Sprintf("%s: first attempt published without an outbox row id", s))
		}
		e := enqueue{rowID: rowID, at: at}
		if nb := req.GetNotBefore(); nb != nil {
			e.notBefore = nb.AsTime()
		}
		l.firsts[s] = append(l.firsts[s], e)
	} else {
		l.retries[s]++
	}
}

// Delivered records a request the target received for job (the target
// tells jobs apart by URL) with the given webhook-id header, at at.
func (l *Ledger) Delivered(job, webhookID string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries = append(l.deliveries, delivery{job: job, webhookID: webhookID, at: at})
}

// Bad records a problem found outside the ledger (an undecodable message).
func (l *Ledger) Bad(problem string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, problem)
}

// Counts returns how many first attempts and deliveries were recorded so
// far, for waiting until the flow settles.
func (l *Ledger) Counts() (enqueued, delivered int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.firsts {
		enqueued += len(f)
	}
	return enqueued, len(l.deliveries)
}

// EnqueuedJobs is how many distinct jobs have had a first attempt enqueued,
// for waiting until every job fires.
func (l *Ledger) EnqueuedJobs() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	jobs := map[string]bool{}
	for s := range l.firsts {
		jobs[s.Job] = true
	}
	return len(jobs)
}

// Verdict is the outcome of Check.
type Verdict struct {
	Slots          int      // expected slots checked
	Missing        []string // expected slots never delivered
	NotEnqueued    []string // expected slots delivered or not, never seen at the broker
	DoubleEnqueued []string // slots fired twice: first attempts from different outbox rows
	Republished    []string // slots whose first attempt's outbox row was published again
	Early          []string // slots delivered before their nominal time, or enqueued before it without not_before
	Problems       []string // wrong execution ids, deliveries of no known slot
	Retries        int      // messages of attempts > 1 seen at the broker
	Duplicates     int      // deliveries beyond the first of a slot (same webhook-id)
	MaxLate        time.Duration
	MaxLateSlot    string
	// Recovery is from the fault to the last first-delivery later than
	// OnTime: after it every slot arrived on time and the backlog was
	// gone. Zero when no slot was late.
	Recovery time.Duration
}

// Check judges every job's every second in [from, to] (whole seconds), with
// the fault injected at fault.
func (l *Ledger) Check(jobs []string, from, to, fault time.Time) Verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v Verdict
	v.Problems = slices.Clone(l.problems)

	// Resolve deliveries to slots by webhook-id: the derived id of an
	// expected slot or of any message seen at the broker.
	ids := make(map[string]Slot, len(l.ids))
	for id, s := range l.ids {
		ids[id] = s
	}
	for _, job := range jobs {
		for sec := from.Unix(); sec <= to.Unix(); sec++ {
			ids[execid.For(job, time.Unix(sec, 0))] = Slot{Job: job, Nominal: sec}
		}
	}
	first := map[Slot]time.Time{}
	for _, d := range l.deliveries {
		s, ok := ids[d.webhookID]
		if !ok {
			// A slot after the window whose message the tap has not read
			// yet (the tap is a consumer like the dispatcher, and may lag
			// it): any slot of the job up to ten minutes before the
			// delivery is a real one.
			s, ok = slotNear(d.job, d.webhookID, d.at)
		}
		switch {
		case !ok:
			v.Problems = append(v.Problems, fmt.Sprintf("delivery for job %s with webhook-id %q of no slot", d.job, d.webhookID))
			continue
		case s.Job != d.job:
			v.Problems = append(v.Problems, fmt.Sprintf("delivery for job %s with webhook-id %q of slot %s", d.job, d.webhookID, s))
			continue
		}
		if d.at.Before(time.Unix(s.Nominal, 0)) {
			v.Early = append(v.Early, fmt.Sprintf("%s delivered %s early", s, time.Unix(s.Nominal, 0).Sub(d.at)))
		}
		if f, seen := first[s]; !seen || d.at.Before(f) {
			if seen {
				v.Duplicates++
			}
			first[s] = d.at
		} else {
			v.Duplicates++
		}
	}

	for s, arrivals := range l.firsts {
		if len(arrivals) > 1 {
			messages := map[string]int{}
			for _, e := range arrivals {
				messages[e.rowID]++
			}
			if len(messages) > 1 {
				v.DoubleEnqueued = append(v.DoubleEnqueued, fmt.Sprintf("%s in %d messages", s, len(messages)))
			} else {
				v.Republished = append(v.Republished, fmt.Sprintf("%s x%d", s, len(arrivals)))
			}
		}
		for _, e := range arrivals {
			if e.early(time.Unix(s.Nominal, 0)) {
				v.Early = append(v.Early, fmt.Sprintf("%s enqueued %s early", s, time.Unix(s.Nominal, 0).Sub(e.at)))
			}
		}
	}
	for _, n := range l.retries {
		v.Retries += n
	}

	var lastLate time.Time
	for _, job := range jobs {
		for sec := from.Unix(); sec <= to.Unix(); sec++ {
			s := Slot{Job: job, Nominal: sec}
			v.Slots++
			if len(l.firsts[s]) == 0 {
				v.NotEnqueued = append(v.NotEnqueued, s.String())
			}
			at, ok := first[s]
			if !ok {
				v.Missing = append(v.Missing, s.String())
				continue
			}
			late := at.Sub(time.Unix(sec, 0))
			if late > v.MaxLate {
				v.MaxLate, v.MaxLateSlot = late, s.String()
			}
			if late > OnTime && at.After(lastLate) {
				lastLate = at
			}
		}
	}
	if lastLate.After(fault) {
		v.Recovery = lastLate.Sub(fault)
	}
	for _, list := range [][]string{v.Missing, v.NotEnqueued, v.DoubleEnqueued, v.Republished, v.Early} {
		slices.Sort(list)
	}
	return v
}

// Err is nil when the verdict holds every rule of the package doc, else an
// error naming the first few offending slots of each broken rule.
func (v Verdict) Err() error {
	var errs []error
	for _, rule := range []struct {
		what  string
		slots []string
	}{
		{"expected slots never delivered", v.Missing},
		{"expected slots never enqueued", v.NotEnqueued},
		{"slots fired twice (enqueued from two outbox rows)", v.DoubleEnqueued},
		{"slots enqueued or delivered before their nominal time", v.Early},
		{"wrong ids", v.Problems},
	} {
		if len(rule.slots) > 0 {
			errs = append(errs, fmt.Errorf("%d %s: %v", len(rule.slots), rule.what, head(rule.slots)))
		}
	}
	return errors.Join(errs...)
}

// String is a one-line summary for the test log and the summary table.
func (v Verdict) String() string {
	return fmt.Sprintf("slots=%d missing=%d not_enqueued=%d fired_twice=%d republished=%d early=%d problems=%d retries=%d duplicate_deliveries=%d max_late=%s recovery=%s",
		v.Slots, len(v.Missing), len(v.NotEnqueued), len(v.DoubleEnqueued), len(v.Republished), len(v.Early), len(v.Problems), v.Retries, v.Duplicates,
		v.MaxLate.Round(time.Millisecond), v.Recovery.Round(time.Millisecond))
}

// slotNear finds the slot of job whose execution id is webhookID among the
// seconds from ten minutes before at to a second after it.
func slotNear(job, webhookID string, at time.Time) (Slot, bool) {
	for sec := at.Unix() + 1; sec >= at.Unix()-600; sec-- {
		if execid.For(job, time.Unix(sec, 0)) == webhookID {
			return Slot{Job: job, Nominal: sec}, true
		}
	}
	return Slot{}, false
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

// QueueVerdict is the outcome of CheckQueue: the broker side alone.
type QueueVerdict struct {
	Slots          int      // expected slots checked
	NotEnqueued    []string // expected slots never seen at the broker
	DoubleEnqueued []string // slots fired twice: first attempts from different outbox rows
	Republished    []string // slots whose first attempt's outbox row was published again
	Early          []string // slots enqueued before their nominal time without not_before
	Problems       []string // wrong execution ids, first attempts without an outbox row
	Retries        int      // messages of attempts > 1
	MaxLate        time.Duration
	MaxLateSlot    string
	// Lateness is the worst lateness (first arrival at the broker minus
	// nominal; negative for slots fired ahead, to be held until their
	// time) of each nominal second from lateFrom to to, in seconds with
	// one decimal, "-" where a slot of that second never arrived: lateness
	// that grows from the first second is the machine's capacity, lateness
	// that starts at a fault is the fault's.
	Lateness []string
}

// CheckQueue judges the broker side of every job's every second in
// [from, to]: each slot enqueued, from one outbox row, not before its
// time; the lateness counts from lateFrom.
func (l *Ledger) CheckQueue(jobs []string, from, to, lateFrom time.Time) QueueVerdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := QueueVerdict{Problems: slices.Clone(l.problems)}
	for _, n := range l.retries {
		v.Retries += n
	}
	worst := map[int64]time.Duration{} // per nominal second (negative: enqueued ahead, held)
	missing := map[int64]bool{}        // nominal seconds with a slot never enqueued
	for _, job := range jobs {
		for sec := from.Unix(); sec <= to.Unix(); sec++ {
			s := Slot{Job: job, Nominal: sec}
			v.Slots++
			arrivals := l.firsts[s]
			if len(arrivals) == 0 {
				v.NotEnqueued = append(v.NotEnqueued, s.String())
				missing[sec] = true
				continue
			}
			rows := map[string]int{}
			first := arrivals[0]
			for _, e := range arrivals {
				rows[e.rowID]++
				if e.at.Before(first.at) {
					first = e
				}
			}
			if len(rows) > 1 {
				v.DoubleEnqueued = append(v.DoubleEnqueued, fmt.Sprintf("%s in %d outbox rows", s, len(rows)))
			}
			if len(arrivals) > len(rows) {
				v.Republished = append(v.Republished, fmt.Sprintf("%s x%d", s, len(arrivals)))
			}
			nominal := time.Unix(sec, 0)
			if first.early(nominal) {
				v.Early = append(v.Early, fmt.Sprintf("%s enqueued %s early", s, nominal.Sub(first.at)))
			}
			if sec < lateFrom.Unix() {
				continue
			}
			late := first.at.Sub(nominal)
			if late > v.MaxLate {
				v.MaxLate, v.MaxLateSlot = late, s.String()
			}
			if w, ok := worst[sec]; !ok || late > w {
				worst[sec] = late
			}
		}
	}
	for sec := lateFrom.Unix(); sec <= to.Unix(); sec++ {
		if missing[sec] {
			v.Lateness = append(v.Lateness, "-")
		} else {
			v.Lateness = append(v.Lateness, fmt.Sprintf("%.1f", worst[sec].Seconds()))
		}
	}
	for _, list := range [][]string{v.NotEnqueued, v.DoubleEnqueued, v.Republished, v.Early} {
		slices.Sort(list)
	}
	return v
}

// EnqueuedSlots returns the nominal seconds (unix) of job's slots whose
// first attempt reached the broker, in order.
func (l *Ledger) EnqueuedSlots(job string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	for s := range l.firsts {
		if s.Job == job {
			out = append(out, s.Nominal)
		}
	}
	slices.Sort(out)
	return out
}

// OutboxRows returns, for each slot of job that reached the broker, how
// many outbox rows its first attempt came from (more than one: fired
// twice).
func (l *Ledger) OutboxRows(job string) map[int64]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int64]int{}
	for s, arrivals := range l.firsts {
		if s.Job != job {
			continue
		}
		rows := map[string]bool{}
		for _, e := range arrivals {
			rows[e.rowID] = true
		}
		out[s.Nominal] = len(rows)
	}
	return out
}
