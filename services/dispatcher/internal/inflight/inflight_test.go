package inflight_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/dispatcher/internal/inflight"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := inflight.NewRegistry()
	alpha := inflight.Ref{Namespace: "alpha", ExecutionID: "e1"}
	beta := inflight.Ref{Namespace: "beta", ExecutionID: "e1"}

	first, releaseFirst := r.Track(t.Context(), alpha)
	second, releaseSecond := r.Track(t.Context(), alpha)
	other, releaseOther := r.Track(t.Context(), beta)
	defer releaseOther()

	require.True(t, r.Abort(alpha))
	for _, ctx := range []context.Context{first, second} {
		require.Error(t, ctx.Err())
		require.True(t, inflight.Aborted(ctx), "every attempt of the execution")
	}
	require.NoError(t, other.Err(), "another namespace's execution of the same id runs on")

	releaseFirst()
	releaseSecond()
	require.False(t, r.Abort(alpha), "released attempts are gone")

	done, release := r.Track(t.Context(), alpha)
	release()
	require.Error(t, done.Err(), "release ends the attempt's context")
	require.False(t, inflight.Aborted(done), "released is not aborted")

	parent, cancel := context.WithCancel(t.Context())
	shutdown, release := r.Track(parent, alpha)
	defer release()
	cancel()
	require.False(t, inflight.Aborted(shutdown), "a cancelled parent (shutdown) is not an abort")
}

// feed is an in-memory Feed.
type feed struct {
	mu  sync.Mutex
	all []store.Cancellation
}

func (f *feed) add(ns, id string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all = append(f.all, store.Cancellation{ExecutionRef: store.ExecutionRef{Namespace: ns, ExecutionID: id}, RecordedAt: at})
}

func (f *feed) CancellationsSince(_ context.Context, since time.Time, limit int) ([]store.Cancellation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Cancellation
	for _, c := range f.all {
		if !c.RecordedAt.Before(since) && len(out) < limit {
			out = append(out, c)
		}
	}
	return out, nil
}

// TestWatcher: what the feed records, before Run or while it runs, late
// commits within the overlap included, becomes known and aborts the
// attempts in flight; Cancel acts at once.
func TestWatcher(t *testing.T) {
	t.Parallel()
	f := &feed{}
	base := time.Now()
	f.add("alpha", "before-start", base)
	reg := inflight.NewRegistry()
	w, err := inflight.NewWatcher(inflight.WatcherOptions{Feed: f, Registry: reg, PollInterval: 5 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	<-w.Ready()
	require.True(t, w.Known(inflight.Ref{Namespace: "alpha", ExecutionID: "before-start"}))
	require.False(t, w.Known(inflight.Ref{Namespace: "beta", ExecutionID: "before-start"}))

	running := inflight.Ref{Namespace: "alpha", ExecutionID: "running"}
	attempt, release := reg.Track(t.Context(), running)
	defer release()
	f.add("alpha", "newer", base.Add(2*time.Second))
	f.add("alpha", "running", base.Add(time.Second)) // committed late, recorded earlier
	select {
	case <-attempt.Done():
		require.True(t, inflight.Aborted(attempt))
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt was not aborted")
	}
	require.True(t, w.Known(running))

	local := inflight.Ref{Namespace: "alpha", ExecutionID: "local"}
	here, releaseHere := reg.Track(t.Context(), local)
	defer releaseHere()
	require.True(t, w.Cancel(local), "in flight here")
	require.True(t, inflight.Aborted(here))
	require.True(t, w.Known(local))
	require.False(t, w.Cancel(inflight.Ref{Namespace: "alpha", ExecutionID: "elsewhere"}))
}

func TestNewWatcherValidates(t *testing.T) {
	t.Parallel()
	_, err := inflight.NewWatcher(inflight.WatcherOptions{Registry: inflight.NewRegistry()})
	require.ErrorContains(t, err, "Feed")
	_, err = inflight.NewWatcher(inflight.WatcherOptions{Feed: &feed{}})
	require.ErrorContains(t, err, "Registry")
	_, err = inflight.NewWatcher(inflight.WatcherOptions{Feed: &feed{}, Registry: inflight.NewRegistry(), PollInterval: -1})
	require.ErrorContains(t, err, "negative")
}

// TestWatcherFull: past MaxKnown the watcher says it is full, so that the
// pipeline asks the database rather than trust a "no".
func TestWatcherFull(t *testing.T) {
	t.Parallel()
	w, err := inflight.NewWatcher(inflight.WatcherOptions{Feed: &feed{}, Registry: inflight.NewRegistry(), MaxKnown: 2})
	require.NoError(t, err)
	stranger := inflight.Ref{Namespace: "alpha", ExecutionID: "never-cancelled"}
	w.Cancel(inflight.Ref{Namespace: "alpha", ExecutionID: "1"})
	w.Cancel(inflight.Ref{Namespace: "alpha", ExecutionID: "2"})
	require.False(t, w.Known(stranger))
	require.False(t, w.Full(), "room left: a no is certain")
	w.Cancel(inflight.Ref{Namespace: "alpha", ExecutionID: "3"})
	require.False(t, w.Known(inflight.Ref{Namespace: "alpha", ExecutionID: "3"}), "did not fit")
	require.True(t, w.Full(), "a no is no longer certain")
}
