package firing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// checkHeap verifies the heap order, the positions and the job index.
func checkHeap(t *testing.T, h *timerHeap) {
	t.Helper()
	require.Len(t, h.byJob, len(h.items))
	for i, e := range h.items {
		require.Equal(t, i, e.index)
		require.Same(t, e, h.byJob[e.due.JobID])
		if i > 0 {
			require.False(t, e.commitAt.Before(h.items[(i-1)/2].commitAt), "heap order at %d", i)
		}
	}
}

func TestTimerHeap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ops  func(t *testing.T, h *timerHeap, r *rand.Rand)
	}{
		{
			name: "pops in commitAt order",
			ops: func(t *testing.T, h *timerHeap, r *rand.Rand) {
				for i := range 1000 {
					h.push(&entry{due: Due{JobID: fmt.Sprint(i)}, commitAt: t0.Add(time.Duration(r.IntN(100)) * time.Millisecond)})
				}
				checkHeap(t, h)
				var got []time.Time
				for h.Len() > 0 {
					got = append(got, h.pop().commitAt)
				}
				require.Len(t, got, 1000)
				require.True(t, slices.IsSortedFunc(got, time.Time.Compare))
				require.Nil(t, h.pop())
				require.Nil(t, h.peek())
			},
		},
		{
			name: "remove and fix keep the order",
			ops: func(t *testing.T, h *timerHeap, r *rand.Rand) {
				for i := range 500 {
					h.push(&entry{due: Due{JobID: fmt.Sprint(i)}, commitAt: t0.Add(time.Duration(r.IntN(1e6)))})
				}
				for i := range 500 {
					e := h.get(fmt.Sprint(r.IntN(500)))
					if e == nil {
						continue
					}
					if i%2 == 0 {
						h.remove(e)
						require.Nil(t, h.get(e.due.JobID))
						require.Equal(t, -1, e.index)
					} else {
						e.commitAt = t0.Add(time.Duration(r.IntN(1e6)))
						h.fix(e.index)
					}
					checkHeap(t, h)
				}
			},
		},
		{
			name: "filter drops and re-heapifies",
			ops: func(t *testing.T, h *timerHeap, r *rand.Rand) {
				for i := range 1000 {
					h.push(&entry{due: Due{JobID: fmt.Sprint(i), Partition: i % 7}, commitAt: t0.Add(time.Duration(r.IntN(1e6)))})
				}
				dropped := h.filter(func(e *entry) bool { return e.due.Partition != 3 })
				require.Equal(t, 143, dropped) // i%7 == 3 for i < 1000: 3, 10, ..., 997
				checkHeap(t, h)
				for _, e := range h.items {
					require.NotEqual(t, 3, e.due.Partition)
				}
				require.Nil(t, h.get("3"))
				h.clear()
				require.Zero(t, h.Len())
				require.Empty(t, h.byJob)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.ops(t, newTimerHeap(), rand.New(rand.NewPCG(1, 2)))
		})
	}
}

func TestHeapCountDue(t *testing.T) {
	t.Parallel()
	h := newTimerHeap()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		h.push(&entry{due: Due{JobID: fmt.Sprint(i)}, commitAt: base.Add(time.Duration((i*37)%100) * time.Second)})
	}
	require.Equal(t, 0, h.countDue(base.Add(-time.Second), 1000))
	require.Equal(t, 1, h.countDue(base, 1000))
	require.Equal(t, 50, h.countDue(base.Add(49*time.Second), 1000))
	require.Equal(t, 10, h.countDue(base.Add(49*time.Second), 10), "stops at the limit")
	require.Equal(t, 100, h.countDue(base.Add(time.Hour), 1000))
	require.Equal(t, 0, newTimerHeap().countDue(base, 10))
}
