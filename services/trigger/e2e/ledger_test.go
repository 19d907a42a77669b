package e2e_test

import (
	"fmt"
	"slices"
	"sync"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
)

// ledger is the test's independent record of what reached the dispatch
// queue: the proof is taken from the queue, not from the trigger's tables.
// Each message names the outbox row it was published from
// (outbox.RowIDHeader): a slot in two rows was fired twice; one row
// arriving twice was republished by the relay (at least once: a relay
// frozen or killed between the broker's confirm and its delete), which the
// dispatcher absorbs and which is counted, not failed.
type ledger struct {
	mu       sync.Mutex
	rows     map[slotKey]map[string]int // arrivals per outbox row
	arrival  map[slotKey]time.Time
	problems []string
}

type slotKey struct {
	job     string
	nominal int64 // unix seconds
}

func newLedger() *ledger {
	return &ledger{rows: map[slotKey]map[string]int{}, arrival: map[slotKey]time.Time{}}
}

func (l *ledger) add(req *dispatchv1.DispatchRequest, rowID string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	nominal := req.NominalTime.AsTime()
	k := slotKey{req.JobId, nominal.Unix()}
	if l.rows[k] == nil {
		l.rows[k] = map[string]int{}
	}
	l.rows[k][rowID]++
	if _, seen := l.arrival[k]; !seen {
		l.arrival[k] = at
	}
	if rowID == "" {
		l.problems = append(l.problems, fmt.Sprintf("job %s at %s: no outbox row id", req.JobId, nominal))
	}
	if want := execid.For(req.JobId, nominal); req.ExecutionId != want {
		l.problems = append(l.problems, fmt.Sprintf("job %s at %s: execution id %s, want %s", req.JobId, nominal, req.ExecutionId, want))
	}
	if req.Attempt != 1 {
		l.problems = append(l.problems, fmt.Sprintf("job %s at %s: attempt %d", req.JobId, nominal, req.Attempt))
	}
}

func (l *ledger) bad(problem string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, problem)
}

func (l *ledger) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rows := range l.rows {
		for _, c := range rows {
			n += c
		}
	}
	return n
}

// verdict checks every job's every second in [from, to]: each slot must
// have been fired once (one outbox row) and have arrived. It returns the
// problems (missing, fired twice), the republished slots and the lateness
// (first arrival - nominal) of the slots in [lateFrom, to].
type verdict struct {
	slots       int
	missing     []string
	firedTwice  []string
	republished []string
	maxLate     time.Duration
	maxLateAt   string
	// lateness is the max lateness of each nominal second from lateFrom,
	// "-" where a slot of that second never arrived: a failure that grows
	// from the first second is the machine's capacity, one that starts at
	// a fault is the failover.
	lateness []string
}

func (l *ledger) check(jobs []string, from, to time.Time, lateFrom time.Time) verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v verdict
	perSecond := map[int64]time.Duration{}
	for _, job := range jobs {
		for s := from.Unix(); s <= to.Unix(); s++ {
			v.slots++
			k := slotKey{job, s}
			name := fmt.Sprintf("%s@%s", job, time.Unix(s, 0).UTC().Format(time.TimeOnly))
			rows := l.rows[k]
			if len(rows) == 0 {
				v.missing = append(v.missing, name)
				perSecond[s] = -1
				continue
			}
			if len(rows) > 1 {
				v.firedTwice = append(v.firedTwice, fmt.Sprintf("%s in %d outbox rows", name, len(rows)))
			}
			for _, n := range rows {
				if n > 1 {
					v.republished = append(v.republished, fmt.Sprintf("%s x%d", name, n))
				}
			}
			if s >= lateFrom.Unix() {
				late := l.arrival[k].Sub(time.Unix(s, 0))
				if late > v.maxLate {
					v.maxLate, v.maxLateAt = late, time.Unix(s, 0).UTC().Format(time.TimeOnly)
				}
				if worst, ok := perSecond[s]; !ok || (worst >= 0 && late > worst) {
					perSecond[s] = late
				}
			}
		}
	}
	for s := lateFrom.Unix(); s <= to.Unix(); s++ {
		if late := perSecond[s]; late < 0 {
			v.lateness = append(v.lateness, "-")
		} else {
			v.lateness = append(v.lateness, fmt.Sprintf("%.1f", late.Seconds()))
		}
	}
	return v
}

// slotsOf returns the nominal seconds of job's slots that arrived, in order.
func (l *ledger) slotsOf(job string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	for k := range l.rows {
		if k.job == job {
			out = append(out, k.nominal)
		}
	}
	slices.Sort(out)
	return out
}

// rowsOf returns, for each slot of job that arrived, the number of outbox
// rows it came from (more than one: fired twice).
func (l *ledger) rowsOf(job string) map[int64]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int64]int{}
	for k, rows := range l.rows {
		if k.job == job {
			out[k.nominal] = len(rows)
		}
	}
	return out
}
