package e2e_test

import (
	"fmt"
	"sync"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
)

// ledger is the test's independent record of what reached the dispatch
// queue: the proof is taken from the queue, not from the trigger's tables.
type ledger struct {
	mu       sync.Mutex
	count    map[slotKey]int
	arrival  map[slotKey]time.Time
	problems []string
}

type slotKey struct {
	job     string
	nominal int64 // unix seconds
}

func newLedger() *ledger {
	return &ledger{count: map[slotKey]int{}, arrival: map[slotKey]time.Time{}}
}

func (l *ledger) add(req *dispatchv1.DispatchRequest, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	nominal := req.NominalTime.AsTime()
	k := slotKey{req.JobId, nominal.Unix()}
	l.count[k]++
	if _, seen := l.arrival[k]; !seen {
		l.arrival[k] = at
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
	for _, c := range l.count {
		n += c
	}
	return n
}

// verdict checks every job's every second in [from, to]: each slot must have
// arrived exactly once. It returns the problems (missing, duplicated) and
// the lateness (arrival - nominal) of the slots in [lateFrom, to].
type verdict struct {
	slots      int
	missing    []string
	duplicated []string
	maxLate    time.Duration
	maxLateAt  string
}

func (l *ledger) check(jobs []string, from, to time.Time, lateFrom time.Time) verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v verdict
	for _, job := range jobs {
		for s := from.Unix(); s <= to.Unix(); s++ {
			v.slots++
			k := slotKey{job, s}
			switch n := l.count[k]; {
			case n == 0:
				v.missing = append(v.missing, fmt.Sprintf("%s@%s", job, time.Unix(s, 0).UTC().Format(time.TimeOnly)))
			case n > 1:
				v.duplicated = append(v.duplicated, fmt.Sprintf("%s@%s x%d", job, time.Unix(s, 0).UTC().Format(time.TimeOnly), n))
			default:
				if s >= lateFrom.Unix() {
					if late := l.arrival[k].Sub(time.Unix(s, 0)); late > v.maxLate {
						v.maxLate, v.maxLateAt = late, time.Unix(s, 0).UTC().Format(time.TimeOnly)
					}
				}
			}
		}
	}
	return v
}
