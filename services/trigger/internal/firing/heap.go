package firing

import (
	"time"

	"github.com/cronmesh/cronmesh/libs/schedule"
)

// entry is one loaded job waiting for its firing time.
type entry struct {
	due Due
	// commitAt is when the engine commits the entry's next slot: its
	// firing time (due.NextFire plus the job's spread offset) less the
	// engine's Lead.
	commitAt time.Time
	// sched caches the converted schedule of due.Job (valid while due.Job
	// is the same definition: a re-push after an advance keeps it, a reload
	// of a newer version clears it), because converting costs microseconds
	// (tens when a time zone is loaded from disk) against nanoseconds for
	// the walk.
	sched    schedule.Schedule
	schedSet bool
	// index is the entry's position in timerHeap.items, maintained by the
	// heap so that entries can be removed or moved in O(log n).
	index int
}

// timerHeap is a min-heap of entries by commitAt with an index by job id: the
// engine holds at most one entry per job. Hand-written rather than
// container/heap to avoid the interface calls and any boxing in the loop
// that pops up to thousands of entries per second. Not safe for concurrent
// use: only the engine's Run goroutine touches it.
type timerHeap struct {
	items []*entry
	byJob map[string]*entry
}

func newTimerHeap() *timerHeap {
	return &timerHeap{byJob: make(map[string]*entry)}
}

func (h *timerHeap) Len() int { return len(h.items) }

// get returns the held entry of the job, or nil.
func (h *timerHeap) get(jobID string) *entry { return h.byJob[jobID] }

// peek returns the earliest entry, or nil when empty.
func (h *timerHeap) peek() *entry {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

// countDue counts the entries due at now (commitAt not after it), stopping at
// limit. It visits only due entries and their direct children: a subtree
// whose root is not due holds nothing due.
func (h *timerHeap) countDue(now time.Time, limit int) int {
	n := 0
	stack := []int{0}
	for len(stack) > 0 && n < limit {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(h.items) || h.items[i].commitAt.After(now) {
			continue
		}
		n++
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return min(n, limit)
}

// push adds e; the caller ensures no entry of the same job is held.
func (h *timerHeap) push(e *entry) {
	e.index = len(h.items)
	h.items = append(h.items, e)
	h.byJob[e.due.JobID] = e
	h.up(e.index)
}

// pop removes and returns the earliest entry, or nil when empty.
func (h *timerHeap) pop() *entry {
	if len(h.items) == 0 {
		return nil
	}
	e := h.items[0]
	h.remove(e)
	return e
}

// remove takes e out of the heap.
func (h *timerHeap) remove(e *entry) {
	i, last := e.index, len(h.items)-1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil // let the entry be collected
	h.items = h.items[:last]
	delete(h.byJob, e.due.JobID)
	e.index = -1
	if i != last {
		h.fix(i)
	}
}

// fix restores the order after the entry at i changed its commitAt.
func (h *timerHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// filter keeps the entries for which keep is true and returns how many it
// dropped. O(n): it runs on ownership changes and fencing, not per firing.
func (h *timerHeap) filter(keep func(*entry) bool) int {
	kept := h.items[:0]
	dropped := 0
	for _, e := range h.items {
		if keep(e) {
			e.index = len(kept)
			kept = append(kept, e)
		} else {
			delete(h.byJob, e.due.JobID)
			e.index = -1
			dropped++
		}
	}
	clear(h.items[len(kept):])
	h.items = kept
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	return dropped
}

// clear drops every entry.
func (h *timerHeap) clear() {
	clear(h.items)
	h.items = h.items[:0]
	clear(h.byJob)
}

func (h *timerHeap) less(i, j int) bool {
	return h.items[i].commitAt.Before(h.items[j].commitAt)
}

func (h *timerHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index = i
	h.items[j].index = j
}

func (h *timerHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts the entry at i0 down and reports whether it moved.
func (h *timerHeap) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
