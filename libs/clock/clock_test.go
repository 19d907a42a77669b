package clock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/clock"
)

func TestOffset(t *testing.T) {
	t.Parallel()
	base := clock.NewFake(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	o := clock.NewOffset(base, 10*time.Second)
	require.Equal(t, base.Now().Add(10*time.Second), o.Now())
	require.Equal(t, 10*time.Second, o.Offset())

	o.Set(-time.Second)
	require.Equal(t, base.Now().Add(-time.Second), o.Now())

	// After waits on the base: the offset does not shorten a wait.
	ch := o.After(5 * time.Second)
	base.Advance(4 * time.Second)
	select {
	case <-ch:
		t.Fatal("After fired before its duration passed on the base clock")
	default:
	}
	base.Advance(time.Second)
	<-ch
}

func TestOffsetOfReal(t *testing.T) {
	t.Parallel()
	o := clock.NewOffset(clock.Real{}, time.Hour)
	a, b := o.Now(), o.Now()
	require.GreaterOrEqual(t, b.Sub(a), time.Duration(0), "elapsed time is unaffected by the offset")
	require.InDelta(t, float64(time.Hour), float64(time.Until(a)), float64(time.Second))
}

func TestFakeAfterFunc(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	var calls []string
	fake.AfterFunc(2*time.Second, func() { calls = append(calls, "late") })
	fake.AfterFunc(time.Second, func() { calls = append(calls, "early:"+fake.Now().Format(time.TimeOnly)) })
	stopped := fake.AfterFunc(time.Second, func() { calls = append(calls, "stopped") })
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop(), "a stopped timer is gone")
	require.Equal(t, 2, fake.Timers())

	fake.Advance(time.Second)
	require.Equal(t, []string{"early:12:00:01"}, calls, "due timers run before Advance returns, and may read the clock")
	fake.Advance(5 * time.Second)
	require.Equal(t, []string{"early:12:00:01", "late"}, calls)
	require.Zero(t, fake.Timers())

	now := fake.AfterFunc(0, func() { calls = append(calls, "now") })
	require.Equal(t, "now", calls[len(calls)-1], "a timer of no duration runs at once")
	require.False(t, now.Stop())
}

func TestRealAfterFuncStop(t *testing.T) {
	t.Parallel()
	fired := make(chan struct{})
	timer := clock.Real{}.AfterFunc(time.Hour, func() { close(fired) })
	require.True(t, timer.Stop())
	done := make(chan struct{})
	clock.Real{}.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
}
