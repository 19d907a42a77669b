package workload_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/workload"
	"github.com/cronmesh/cronmesh/libs/jobspec"
)

func TestNewSizesTheMixForTheRate(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	plan, err := workload.New(workload.Options{Rate: 3000, Start: start, Window: 10 * time.Minute})
	require.NoError(t, err)
	exp := plan.Expected(start, start.Add(10*time.Minute))
	total := 0
	for _, n := range exp {
		total += n
	}
	require.InDelta(t, 3000*600, total, 3000*600*0.01, "the slots over the window average the rate")
	require.Equal(t, 10*plan.Counts()[workload.TopOfMinute], exp[workload.TopOfMinute], "each top-of-minute job fires once a minute")
	for _, j := range plan.Jobs {
		if j.Kind == workload.OneTime {
			require.False(t, j.At.Before(start))
			require.True(t, j.At.Before(start.Add(10*time.Minute)))
		}
	}
}

// TestSlotsAgreeWithTheRegistrysSchedule checks the plan's own slot
// arithmetic against libs/jobspec, which the trigger fires by.
func TestSlotsAgreeWithTheRegistrysSchedule(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	plan, err := workload.New(workload.Options{Rate: 200, Start: start, Window: 3 * time.Minute})
	require.NoError(t, err)
	from, to := start.Add(-17*time.Second+300*time.Millisecond), start.Add(3*time.Minute+7*time.Second)
	created := start.Add(-time.Hour)
	seen := map[workload.Kind]bool{}
	for i, j := range plan.Jobs {
		if i%7 != 0 && j.Kind != workload.OneTime {
			continue // a sample of the recurring jobs is enough
		}
		seen[j.Kind] = true
		s, errs := jobspec.Schedule(j.Schedule(), created)
		require.Empty(t, errs, "job %d", i)
		var want []time.Time
		for t, ok := s.Next(from.Add(-time.Nanosecond)); ok && t.Before(to); t, ok = s.Next(t) {
			want = append(want, t.UTC())
		}
		got := j.Slots(from, to)
		require.Len(t, got, len(want), "job %d (%s)", i, j.Kind)
		for k := range got {
			require.True(t, want[k].Equal(got[k]), "job %d slot %d: %s vs %s", i, k, got[k], want[k])
		}
	}
	require.Len(t, seen, len(workload.Kinds()), "every kind sampled")
}

func TestBurstIsOneSecond(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 21, 12, 0, 5, 0, time.UTC)
	plan := workload.Burst(1000, at)
	require.Equal(t, 1000, plan.Expected(at, at.Add(time.Second))[workload.OneTime])
	require.Zero(t, plan.Expected(at.Add(time.Second), at.Add(time.Hour))[workload.OneTime])
}

func TestNewRejectsAnEmptyPlan(t *testing.T) {
	t.Parallel()
	_, err := workload.New(workload.Options{Rate: 100, Start: time.Now(), Window: time.Minute, Shares: workload.Shares{}})
	require.Error(t, err)
	_, err = workload.New(workload.Options{Rate: 0, Start: time.Now(), Window: time.Minute})
	require.Error(t, err)
}

func TestFiringFromBoundsRecurringJobs(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)
	firing := start.Add(-30 * time.Second)
	plan, err := workload.New(workload.Options{Rate: 100, Start: start, Window: time.Minute, FiringFrom: firing})
	require.NoError(t, err)
	kinds := map[workload.Kind]bool{}
	for _, j := range plan.Jobs {
		kinds[j.Kind] = true
		s := j.Schedule()
		if j.Kind == workload.OneTime {
			require.Nil(t, s.StartTime, "a one-time job is due in the window anyway")
			continue
		}
		require.Equal(t, firing, s.StartTime.AsTime(), "%v", j.Kind)
		sched, errs := jobspec.Schedule(s, start.Add(-time.Hour))
		require.Empty(t, errs)
		next, ok := sched.Next(start.Add(-time.Hour))
		require.True(t, ok)
		require.False(t, next.Before(firing), "%v fires from FiringFrom on", j.Kind)
	}
	require.Len(t, kinds, len(workload.Kinds()), "every kind planned")
}
