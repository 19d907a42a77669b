package pipeline

import (
	"sync"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
)

// unsettledBudget bounds the memory the unsettled attempts may take, by
// the size of what they keep (a settlement's reason and response excerpt
// dominate; unsettledOverhead is the rest). 64 MiB holds some 100,000
// attempts of ordinary targets, a broker outage's worth of a busy
// dispatcher's deliveries.
const (
	unsettledBudget   = 64 << 20
	unsettledOverhead = 256
)

// unsettledMaxAge is how long an unsettled attempt is kept for a
// redelivery that may never come to this dispatcher (another one took the
// message); past it the entry goes when room is needed.
const unsettledMaxAge = time.Hour

// settleKind is what an attempt's outcome calls for.
type settleKind int

const (
	// settleCancelled: a cancel aborted the attempt in flight; CANCELLED.
	settleCancelled settleKind = iota + 1
	// settleSucceeded: SUCCEEDED.
	settleSucceeded
	// settleRetry: FAILED with the retry scheduled, and the next attempt
	// in the tier's delay queue.
	settleRetry
	// settleDead: FAILED and DEAD, and the dead letter.
	settleDead
)

// settlement is what one attempt's outcome calls for, decided once when
// the attempt ends: the events to emit and the retry or dead letter to
// publish, with everything they carry. Publishing it again makes the same
// messages (events are idempotent on (execution, attempt, kind) at their
// consumers; a second retry or dead letter is the case the package doc
// describes for a failed publish).
type settlement struct {
	kind settleKind
	// now is the outcome's time: the events' time, the dead letter's
	// DeadTime and the completion record's.
	now time.Time
	// info is the attempt as the events describe it (Retry set for
	// settleRetry).
	info execevent.Attempt
	// reason is the events' reason; for settleDead, FAILED's is reason
	// with "; not retried" added and DEAD's and the dead letter's reason.
	reason string
	// out is the delivery's outcome, which the dead letter carries.
	out     deliver.Outcome
	tier    time.Duration
	traceID string
}

// size is what s costs the unsettled set's budget.
func (s settlement) size() int {
	return unsettledOverhead + len(s.reason) + len(s.out.Excerpt) + len(s.out.Reason) + len(s.traceID)
}

// attemptKey names one attempt of one execution. Execution ids are
// derived from the job's id and the slot, so the namespace is part of the
// name: the same id in two namespaces is two executions.
type attemptKey struct {
	namespace   string
	executionID string
	attempt     int32
}

func attemptOf(req *dispatchv1.DispatchRequest) attemptKey {
	return attemptKey{req.Namespace, req.ExecutionId, req.Attempt}
}

// unsettled holds the settlements of attempts made here whose
// consequences are not yet all confirmed. The broker's death is when that
// happens: the requests this dispatcher holds until their slot (ADR 0022)
// and those in flight are delivered, their events cannot be published, and
// the broker redelivers every message that was not acknowledged once it is
// back. Without this set each of those redeliveries would reach its target
// a second time; with it, a redelivery to this dispatcher publishes the
// kept settlement instead of attempting again. A redelivery to another
// dispatcher, or after this one restarted, is attempted again, with the
// same webhook-id: delivery stays at least once, and this only keeps the
// common case (one dispatcher survives a broker restart) to once.
type unsettled struct {
	mu      sync.Mutex
	byKey   map[attemptKey]unsettledEntry
	used    int
	budget  int
	maxAge  time.Duration
	dropped func()
}

type unsettledEntry struct {
	settlement
	kept time.Time
}

func newUnsettled(budget int, maxAge time.Duration, dropped func()) *unsettled {
	return &unsettled{byKey: map[attemptKey]unsettledEntry{}, budget: budget, maxAge: maxAge, dropped: dropped}
}

// keep holds s for k until forget, replacing what was held for k. When
// the budget is spent, entries older than maxAge make room; if that is
// not enough, s is not kept (dropped is called), and a redelivery of its
// request is attempted again.
func (u *unsettled) keep(k attemptKey, s settlement, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.removeLocked(k)
	if u.used+s.size() > u.budget {
		for key, e := range u.byKey {
			if now.Sub(e.kept) > u.maxAge {
				u.removeLocked(key)
			}
		}
	}
	if u.used+s.size() > u.budget {
		u.dropped()
		return
	}
	u.byKey[k] = unsettledEntry{settlement: s, kept: now}
	u.used += s.size()
}

// get returns the settlement held for k.
func (u *unsettled) get(k attemptKey) (settlement, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.byKey[k]
	return e.settlement, ok
}

// forget lets go of k's settlement: everything it caused is confirmed.
func (u *unsettled) forget(k attemptKey) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.removeLocked(k)
}

func (u *unsettled) removeLocked(k attemptKey) {
	if e, ok := u.byKey[k]; ok {
		u.used -= e.size()
		delete(u.byKey, k)
	}
}

// len is how many settlements are held.
func (u *unsettled) len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.byKey)
}
