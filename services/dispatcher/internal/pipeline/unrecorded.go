package pipeline

import (
	"sync"

	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// DefaultUnrecordedCapacity is Options.UnrecordedCapacity's default: at
// about 150 bytes an entry, 200,000 completions (a minute of a busy
// dispatcher) cost some 30 MB.
const DefaultUnrecordedCapacity = 200_000

// unrecorded holds the completed attempts whose record failed because the
// database was away. A database outage is exactly when redeliveries come:
// the trigger's relay republishes the rows whose broker confirm arrived but
// whose delete failed. Held here, those copies are still recognised as
// done, and the records are written once the database answers again
// (Pipeline.recordHeld). It is bounded; past its capacity a completion is
// dropped (counted), and what is held is lost if the dispatcher stops
// before the database returns: the dedupe stays best effort, as the
// package doc says, but no longer fails on the first outage.
type unrecorded struct {
	mu       sync.Mutex
	byID     map[string]store.CompletedAttempt
	capacity int
}

func newUnrecorded(capacity int) *unrecorded {
	return &unrecorded{byID: map[string]store.CompletedAttempt{}, capacity: capacity}
}

// add holds c, merged with what is held for its execution as the store
// merges records (highest attempt, final if either is, latest time). It
// reports false when c was dropped because the set is full.
func (u *unrecorded) add(c store.CompletedAttempt) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	held, ok := u.byID[c.ExecutionID]
	if !ok {
		if len(u.byID) >= u.capacity {
			return false
		}
		u.byID[c.ExecutionID] = c
		return true
	}
	held.Attempt = max(held.Attempt, c.Attempt)
	held.Final = held.Final || c.Final
	if c.Time.After(held.Time) {
		held.Time = c.Time
	}
	u.byID[c.ExecutionID] = held
	return true
}

// covers reports whether attempt of the execution, or a later one, is held
// as completed. Final is not consulted: a redrive delivers the execution
// again with a higher attempt number, which no held record covers (the
// store keeps a floor time for the same reason).
func (u *unrecorded) covers(executionID string, attempt int32) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	held, ok := u.byID[executionID]
	return ok && held.Attempt >= attempt
}

// take returns up to n held completions, to record; they stay held until
// forget.
func (u *unrecorded) take(n int) []store.CompletedAttempt {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]store.CompletedAttempt, 0, min(n, len(u.byID)))
	for _, c := range u.byID {
		if len(out) == n {
			break
		}
		out = append(out, c)
	}
	return out
}

// forget lets go of recorded completions, except those merged with a newer
// completion since take: theirs is recorded on the next round.
func (u *unrecorded) forget(recorded []store.CompletedAttempt) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range recorded {
		if held, ok := u.byID[c.ExecutionID]; ok && held.Attempt == c.Attempt && held.Final == c.Final && held.Time.Equal(c.Time) {
			delete(u.byID, c.ExecutionID)
		}
	}
}

// len is how many completions are held.
func (u *unrecorded) len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.byID)
}
