package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/eventmix"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
)

// TestSlotEventsMakeOneEventPerQuickSlotAndTwoPerSlowOne checks the
// generator without a broker: over a run of slots, a quick slot is its
// outcome alone, a slow one a STARTED and then its outcome, every outcome
// carrying the attempt's start.
func TestSlotEventsMakeOneEventPerQuickSlotAndTwoPerSlowOne(t *testing.T) {
	t.Parallel()
	mix, err := eventmix.NewMix(0.1)
	require.NoError(t, err)
	o := options{failEvery: 7}
	slot := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	now := slot.Add(3 * time.Second)
	slow, failed := 0, 0
	for n := range 100 {
		events := slotEvents(o, mix, n, n, slot, now)
		out := events[len(events)-1]
		if mix.Slow(n) {
			slow++
			require.Len(t, events, 2, "slot %d is slow", n)
			require.Equal(t, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, events[0].GetKind())
			require.Equal(t, out.GetExecutionId(), events[0].GetExecutionId())
			require.Greater(t, out.GetDuration().AsDuration(), 250*time.Millisecond, "slower than the default --started-event-after")
		} else {
			require.Len(t, events, 1, "slot %d is quick", n)
			require.Less(t, out.GetDuration().AsDuration(), 250*time.Millisecond)
		}
		if out.GetKind() == eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED {
			failed++
		} else {
			require.Equal(t, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, out.GetKind())
		}
		require.True(t, out.GetOccurTime().AsTime().Equal(now))
		require.True(t, out.GetStartTime().AsTime().Equal(now.Add(-out.GetDuration().AsDuration())), "the outcome carries the start")
		require.True(t, out.GetFireTime().AsTime().Equal(slot))
		require.Equal(t, "alerting", out.GetJobLabels()["bench"], "the rules select on it")
	}
	require.Equal(t, 10, slow)
	require.Equal(t, 14, failed)
}

func TestSlotsComeDueAsFastAsTheRatePublishesThem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		share      float64
		period     time.Duration
		perMessage int
	}{
		{name: "production", share: 0.01, period: 10100 * time.Millisecond, perMessage: 99},
		{name: "the mix before ADR 0021", share: 1, period: 20 * time.Second, perMessage: 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mix, err := eventmix.NewMix(tc.share)
			require.NoError(t, err)
			require.InDelta(t, tc.period.Seconds(), slotPeriod(100_000, 10_000, mix).Seconds(), 1e-6)
			require.Equal(t, tc.perMessage, slotsPerMessage(100, mix))
		})
	}
}
