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
