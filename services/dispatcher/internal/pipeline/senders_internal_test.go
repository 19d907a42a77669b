package pipeline

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSenders: every attempt is sent, one that blocks holds up none of the
// others, the most recently idle sender takes the next attempt, senders
// idle too long are let go, and stop lets every idle one go.
func TestSenders(t *testing.T) {
	t.Parallel()
	var s senders

	blocked, release := make(chan struct{}), make(chan struct{})
	s.send(func() { close(blocked); <-release })
	<-blocked
	var wg sync.WaitGroup
	wg.Add(3)
	for range 3 {
		s.send(func() { wg.Done(); wg.Wait() }) // three at once
	}
	wg.Wait()
	require.Eventually(t, func() bool { return s.len() == 3 }, 10*time.Second, time.Millisecond, "the three go idle")

	// One at a time, each attempt goes to the sender that went idle last.
	first := s.idle[2]
	done := make(chan struct{})
	for range 10 {
		s.send(func() { done <- struct{}{} })
		<-done
		require.Eventually(t, func() bool { return s.len() == 3 }, 10*time.Second, time.Millisecond)
		require.Same(t, first, s.idle[2], "the most recently idle sender is reused")
	}

	close(release)
	require.Eventually(t, func() bool { return s.len() == 4 }, 10*time.Second, time.Millisecond)
	s.sweep(time.Now().Add(time.Hour), time.Minute)
	require.Zero(t, s.len(), "idle past the limit: let go")

	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() { s.run(ctx); close(stopped) }()
	s.send(func() { done <- struct{}{} })
	<-done
	cancel()
	<-stopped
	require.Zero(t, s.len())
	s.send(func() { done <- struct{}{} })
	<-done
	require.Never(t, func() bool { return s.len() > 0 }, 50*time.Millisecond, time.Millisecond, "after stop, nothing is kept")
}
