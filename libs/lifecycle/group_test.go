package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/lifecycle"
)

// journal records what the parts and closes did, in order.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, s)
}

func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.entries...)
}

// stopsOnCancel is a part that runs until its context is done and records
// its stop.
func stopsOnCancel(j *journal, name string) lifecycle.Part {
	return lifecycle.Part{Name: name, Run: func(ctx context.Context) error {
		<-ctx.Done()
		j.add("stop " + name)
		return nil
	}}
}

func closes(j *journal, name string) func(context.Context) error {
	return func(context.Context) error { j.add("close " + name); return nil }
}

// run starts g.Run and returns its result's channel.
func run(ctx context.Context, g *lifecycle.Group) <-chan error {
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	return done
}

func TestStagesStopInOrderThenTheClosesRun(t *testing.T) {
	t.Parallel()
	var j journal
	g := lifecycle.New(lifecycle.Options{})
	g.Stage(stopsOnCancel(&j, "api"), stopsOnCancel(&j, "consumer"))
	g.Stage(stopsOnCancel(&j, "relay"))
	g.Stage(stopsOnCancel(&j, "ring"))
	g.OnClose("pool", closes(&j, "pool"))
	g.OnClose("telemetry", closes(&j, "telemetry"))
	ctx, cancel := context.WithCancel(t.Context())
	done := run(ctx, g)
	<-g.Ready()
	assert.Empty(t, j.get(), "nothing stops before ctx is done")

	cancel()
	require.NoError(t, <-done)
	got := j.get()
	require.Len(t, got, 6)
	assert.ElementsMatch(t, []string{"stop api", "stop consumer"}, got[:2], "the first stage stops together")
	assert.Equal(t, []string{"stop relay", "stop ring"}, got[2:4], "then each stage after the one before")
	assert.ElementsMatch(t, []string{"close pool", "close telemetry"}, got[4:], "the closes come last")
}

func TestAStuckPartIsLeftBehindAfterItsStopTimeout(t *testing.T) {
	t.Parallel()
	var j journal
	clk := clock.NewFake(time.Now())
	g := lifecycle.New(lifecycle.Options{Clock: clk, StopTimeout: time.Minute})
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	g.Stage(lifecycle.Part{Name: "subscriber", StopTimeout: time.Second, Run: func(context.Context) error {
		<-stuck // a broker client that does not heed its context
		return errors.New("never seen: the group left")
	}})
	g.Stage(stopsOnCancel(&j, "after"))
	g.OnClose("pool", closes(&j, "pool"))
	ctx, cancel := context.WithCancel(t.Context())
	done := run(ctx, g)
	<-g.Ready()
	cancel()

	// The group waits on the stuck part: the next stage has not stopped.
	require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 10*time.Second, time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the part had time left", err)
	default:
	}
	assert.Empty(t, j.get())

	clk.Advance(time.Second)
	require.NoError(t, <-done, "a part left behind is no error")
	assert.Equal(t, []string{"stop after", "close pool"}, j.get())
}

func TestAHoldingPartLetsTheNextStageStopButNotTheCloses(t *testing.T) {
	t.Parallel()
	var j journal
	clk := clock.NewFake(time.Now())
	g := lifecycle.New(lifecycle.Options{Clock: clk, StopTimeout: time.Minute})
	drained := make(chan struct{})
	g.Stage(lifecycle.Part{Name: "relay", Hold: 2 * time.Second, Run: func(ctx context.Context) error {
		<-ctx.Done()
		<-drained // a drain longer than the hold
		j.add("stop relay")
		return nil
	}})
	g.Stage(stopsOnCancel(&j, "ring"))
	g.OnClose("pool", closes(&j, "pool"))
	ctx, cancel := context.WithCancel(t.Context())
	done := run(ctx, g)
	cancel()

	require.Eventually(t, func() bool { return clk.Waiters() >= 2 }, 10*time.Second, time.Millisecond)
	assert.Empty(t, j.get(), "the ring waits for the relay within the hold")
	clk.Advance(2 * time.Second)
	require.Eventually(t, func() bool { return len(j.get()) == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []string{"stop ring"}, j.get(), "past the hold the ring stops, and the pool stays open for the relay")

	close(drained)
	require.NoError(t, <-done)
	assert.Equal(t, []string{"stop ring", "stop relay", "close pool"}, j.get())
}

func TestReadyOnceEveryGatingPartIs(t *testing.T) {
	t.Parallel()
	consumer, ring := make(chan struct{}), make(chan struct{})
	serving := make(chan struct{})
	g := lifecycle.New(lifecycle.Options{OnReady: func() { close(serving) }})
	g.Stage(
		lifecycle.Part{Name: "consumer", Ready: consumer, Run: blockUntilDone},
		// A part without Ready does not hold readiness back.
		lifecycle.Part{Name: "loop", Run: blockUntilDone},
	)
	g.Stage(lifecycle.Part{Name: "ring", Ready: ring, Run: blockUntilDone})
	ctx, cancel := context.WithCancel(t.Context())
	done := run(ctx, g)

	close(consumer)
	select {
	case <-g.Ready():
		t.Fatal("ready before the ring")
	case <-serving:
		t.Fatal("OnReady before the ring")
	case <-time.After(50 * time.Millisecond):
	}
	close(ring)
	<-g.Ready()
	<-serving
	cancel()
	require.NoError(t, <-done)
}

func TestNotReadyWhenStoppedFirst(t *testing.T) {
	t.Parallel()
	var called atomic.Bool
	g := lifecycle.New(lifecycle.Options{OnReady: func() { called.Store(true) }})
	g.Stage(lifecycle.Part{Name: "consumer", Ready: make(chan struct{}), Run: blockUntilDone})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, g.Run(ctx))
	assert.False(t, called.Load())
	select {
	case <-g.Ready():
		t.Fatal("ready although the consumer never was")
	default:
	}
}

func TestAFailingPartStopsTheGroup(t *testing.T) {
	t.Parallel()
	var j journal
	g := lifecycle.New(lifecycle.Options{})
	g.Stage(stopsOnCancel(&j, "api"))
	g.Stage(lifecycle.Part{Name: "pipeline", Run: func(context.Context) error {
		return errors.New("queue arguments refused")
	}})
	g.Stage(stopsOnCancel(&j, "keys"))
	g.OnClose("pool", closes(&j, "pool"))

	// ctx is never done: the failure alone ends Run.
	err := g.Run(t.Context())
	require.EqualError(t, err, "pipeline: queue arguments refused")
	assert.Equal(t, []string{"stop api", "stop keys", "close pool"}, j.get(), "the others stop in order")
}

func TestErrorsOfEveryPartAreJoined(t *testing.T) {
	t.Parallel()
	g := lifecycle.New(lifecycle.Options{})
	g.Stage(
		lifecycle.Part{Name: "a", Run: func(ctx context.Context) error { <-ctx.Done(); return errors.New("one") }},
		lifecycle.Part{Name: "b", Run: func(ctx context.Context) error { <-ctx.Done(); return errors.New("two") }},
		lifecycle.Part{Name: "c", Run: blockUntilDone},
	)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := g.Run(ctx)
	require.Error(t, err)
	assert.ErrorContains(t, err, "a: one")
	assert.ErrorContains(t, err, "b: two")
}

func TestACloseThatHangsIsLeftBehind(t *testing.T) {
	t.Parallel()
	var j journal
	clk := clock.NewFake(time.Now())
	g := lifecycle.New(lifecycle.Options{Clock: clk, StopTimeout: time.Second})
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	g.OnClose("publisher", func(context.Context) error { <-hang; return nil })
	g.OnClose("pool", closes(&j, "pool"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	done := run(ctx, g)
	// Each close waits on its own stop timeout; the pool's registers one
	// too, though it returns at once, so the hung close is waiting only
	// once both are.
	require.Eventually(t, func() bool { return len(j.get()) == 1 && clk.Waiters() >= 2 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []string{"close pool"}, j.get(), "the closes run together: the hung one holds up no other")
	clk.Advance(time.Second)
	require.NoError(t, <-done)
}

func TestCloseRunsOnce(t *testing.T) {
	t.Parallel()
	var j journal
	g := lifecycle.New(lifecycle.Options{})
	g.OnClose("pool", closes(&j, "pool"))
	g.Close(t.Context())
	g.Close(t.Context())
	assert.Equal(t, []string{"close pool"}, j.get())
}

func TestRunTwice(t *testing.T) {
	t.Parallel()
	g := lifecycle.New(lifecycle.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, g.Run(ctx))
	require.Error(t, g.Run(ctx))
	assert.Panics(t, func() { g.Stage(lifecycle.Part{Name: "late", Run: blockUntilDone}) })
}

func blockUntilDone(ctx context.Context) error { <-ctx.Done(); return nil }
