package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBatcherGroupsWhileBusy: while the only flush slot is busy, submitted
// items queue up; the next flush takes them all, up to the batch cap, and
// every submitter gets its own batch's result.
func TestBatcherGroupsWhileBusy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		maxBatch int
		want     [][]int
	}{
		{"one batch", 20, [][]int{{0}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}},
		{"capped", 4, [][]int{{0}, {1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gate := make(chan struct{})
			var (
				mu      sync.Mutex
				batches [][]int
			)
			flush := func(_ context.Context, items []int) error {
				mu.Lock()
				batches = append(batches, items)
				first := len(batches) == 1
				mu.Unlock()
				if first {
					<-gate
				}
				if items[0] == 5 {
					return errors.New("boom")
				}
				return nil
			}
			b := newBatcher(flush, tt.maxBatch, 0, 1, time.Minute)
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { b.run(ctx); close(done) }()

			waits := []<-chan error{b.submit(0)}
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(batches) == 1 }, 5*time.Second, time.Millisecond)
			for i := 1; i <= 10; i++ {
				waits = append(waits, b.submit(i))
			}
			close(gate)
			for i, w := range waits {
				err := <-w
				if tt.maxBatch == 4 && i >= 5 && i <= 8 {
					require.Error(t, err, "item %d was in the failed batch", i)
				} else {
					require.NoError(t, err, "item %d", i)
				}
			}
			stop()
			<-done
			require.Equal(t, tt.want, batches)
			require.ErrorIs(t, <-b.submit(99), errBatcherStopped)
		})
	}
}

// TestBatcherLinger: with a linger, a lone item waits for company up to the
// linger, and a full batch goes at once.
func TestBatcherLinger(t *testing.T) {
	t.Parallel()
	got := make(chan []int, 10)
	b := newBatcher(func(_ context.Context, items []int) error { got <- items; return nil }, 3, time.Hour, 1, time.Minute)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.run(ctx); close(done) }()
	w1, w2, w3 := b.submit(1), b.submit(2), b.submit(3)
	require.Equal(t, []int{1, 2, 3}, <-got, "a full batch does not wait for the linger")
	require.NoError(t, <-w1)
	require.NoError(t, <-w2)
	require.NoError(t, <-w3)
	w4 := b.submit(4)
	select {
	case items := <-got:
		t.Fatalf("flushed %v before the linger", items)
	default:
	}
	stop() // stopping flushes what lingers
	require.Equal(t, []int{4}, <-got)
	require.NoError(t, <-w4)
	<-done
}

// TestBatcherLingerCountsFromSubmit: the linger counts from the first
// item's submission, so an item that waited for a busy slot longer than
// the linger is flushed without waiting again.
func TestBatcherLingerCountsFromSubmit(t *testing.T) {
	t.Parallel()
	b := newBatcher(func(context.Context, []int) error { return nil }, 10, time.Hour, 1, time.Minute)
	old := pending[int]{item: 1, at: time.Now().Add(-2 * time.Hour), done: make(chan error, 1)}
	// With nothing else queued, a linger counted from now would block for
	// an hour.
	require.Equal(t, []pending[int]{old}, b.fill(t.Context(), []pending[int]{old}))
}
