package pipeline

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHandlers: every function runs; one that blocks does not hold up the
// others; a goroutine that finished one takes the next instead of a new
// one being started; idle goroutines exit.
func TestHandlers(t *testing.T) {
	t.Parallel()
	h := newHandlers(500 * time.Millisecond)

	blocked, release := make(chan struct{}), make(chan struct{})
	h.Go(func() { close(blocked); <-release })
	<-blocked
	var wg sync.WaitGroup
	ran := make([]bool, 100)
	for i := range ran {
		wg.Add(1)
		h.Go(func() { defer wg.Done(); ran[i] = true })
		wg.Wait() // one at a time: each finds the previous one's goroutine idle
	}
	for i, ok := range ran {
		require.True(t, ok, "function %d ran", i)
	}
	require.LessOrEqual(t, h.live.Load(), int64(4), "the blocked one, and the two or three goroutines the sequence reused")

	close(release)
	require.Eventually(t, func() bool { return h.live.Load() == 0 }, 10*time.Second, 5*time.Millisecond,
		"idle handler goroutines exit")
	done := make(chan struct{})
	h.Go(func() { close(done) })
	<-done
}
