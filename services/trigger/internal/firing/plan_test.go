package firing

import (
	"cmp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/jobspec"
)

// slotRun is a run of consecutive slots of one kind: n slots from `from`,
// every `step`.
type slotRun struct {
	kind SlotKind
	from time.Time
	step time.Duration
	n    int
}

func expand(runs ...slotRun) []Slot {
	var out []Slot
	for _, r := range runs {
		for i := range r.n {
			out = append(out, Slot{Nominal: r.from.Add(time.Duration(i) * r.step), Kind: r.kind})
		}
	}
	return out
}

func TestPlan(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	const spreadWindow = 10 * time.Minute
	spreadJob := newJob("spread-job", cronSched("0 * * * *", "UTC"), withSpread(spreadWindow))
	offset := jobspec.SpreadOffset("spread-job", spreadWindow)
	require.Positive(t, offset) // else the spread cases test nothing

	// createdAt gives an after-job created at t0-30s, so that its slot is t0.
	afterJob := newJob("after", afterSched(30*time.Second))
	afterJob.CreateTime.Seconds = t0.Add(-30 * time.Second).Unix()

	missed1h := "older than the catch-up window of 1h0m0s when the trigger could fire it"
	missed0 := "more than 5s late when the trigger could fire it, and the job does not catch up (catch-up window 0s)"

	tests := []struct {
		name   string
		due    Due
		now    time.Time
		want   []Slot // Reason is checked separately for missed slots
		reason string
		to     time.Time
	}{
		{
			name: "on time",
			due:  due(newJob("j", cronSched("* * * * *", "UTC")), 0, t0),
			now:  t0.Add(50 * time.Millisecond),
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
			to:   t0.Add(time.Minute),
		},
		{
			name: "exactly at the nominal time",
			due:  due(newJob("j", cronSched("* * * * *", "UTC")), 0, t0),
			now:  t0,
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
			to:   t0.Add(time.Minute),
		},
		{
			name: "just under the on-time tolerance",
			due:  due(newJob("j", cronSched("* * * * *", "UTC")), 0, t0),
			now:  t0.Add(5*time.Second - time.Nanosecond),
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
			to:   t0.Add(time.Minute),
		},
		{
			name: "at the on-time tolerance: catch-up",
			due:  due(newJob("j", cronSched("* * * * *", "UTC")), 0, t0),
			now:  t0.Add(5 * time.Second),
			want: expand(slotRun{KindCatchUp, t0, 0, 1}),
			to:   t0.Add(time.Minute),
		},
		{
			name: "not due yet: nothing to commit",
			due:  due(newJob("j", cronSched("* * * * *", "UTC")), 0, t0),
			now:  t0.Add(-time.Millisecond),
			to:   t0,
		},
		{
			// Slots 10..6 s late are catch-up, the last five (4..0 s late)
			// are still on time.
			name: "every second, 10 s late",
			due:  due(newJob("j", everySched(time.Second, t0)), 0, t0),
			now:  t0.Add(10 * time.Second),
			want: expand(
				slotRun{KindCatchUp, t0, time.Second, 6},
				slotRun{KindScheduled, t0.Add(6 * time.Second), time.Second, 5},
			),
			to: t0.Add(11 * time.Second),
		},
		{
			name: "every second, 30 s late: oldest first, then the next future slot",
			due:  due(newJob("j", everySched(time.Second, t0)), 0, t0),
			now:  t0.Add(30*time.Second + 500*time.Millisecond),
			want: expand(
				slotRun{KindCatchUp, t0, time.Second, 26},
				slotRun{KindScheduled, t0.Add(26 * time.Second), time.Second, 5},
			),
			to: t0.Add(31 * time.Second),
		},
		{
			// 60 slots more than 1 h late are missed; the one exactly 1 h
			// late and the later ones fire.
			name: "down 2 h with a catch-up window of 1 h",
			due:  due(newJob("j", cronSched("* * * * *", "UTC")), 0, t0),
			now:  t0.Add(2 * time.Hour),
			want: expand(
				slotRun{KindMissed, t0, time.Minute, 60},
				slotRun{KindCatchUp, t0.Add(time.Hour), time.Minute, 60},
				slotRun{KindScheduled, t0.Add(2 * time.Hour), 0, 1},
			),
			reason: missed1h,
			to:     t0.Add(2*time.Hour + time.Minute),
		},
		{
			name: "catch-up window unset: the 1 h default",
			due: due(newJob("j", cronSched("*/30 * * * *", "UTC"), func(j *registryv1.Job) {
				j.CatchUpWindow = nil
			}), 0, t0),
			now: t0.Add(90 * time.Minute),
			want: expand(
				slotRun{KindMissed, t0, 0, 1},
				slotRun{KindCatchUp, t0.Add(30 * time.Minute), 30 * time.Minute, 2},
				slotRun{KindScheduled, t0.Add(90 * time.Minute), 0, 1},
			),
			reason: missed1h,
			to:     t0.Add(120 * time.Minute),
		},
		{
			name: "catch-up 0: everything past the tolerance is missed",
			due:  due(newJob("j", cronSched("* * * * *", "UTC"), withCatchUp(0)), 0, t0),
			now:  t0.Add(10*time.Minute + 2*time.Second),
			want: expand(
				slotRun{KindMissed, t0, time.Minute, 10},
				slotRun{KindScheduled, t0.Add(10 * time.Minute), 0, 1},
			),
			reason: missed0,
			to:     t0.Add(11 * time.Minute),
		},
		{
			name: "catch-up 0, on time: fires",
			due:  due(newJob("j", cronSched("* * * * *", "UTC"), withCatchUp(0)), 0, t0),
			now:  t0.Add(4 * time.Second),
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
			to:   t0.Add(time.Minute),
		},
		{
			name: "one-time at: done after its slot",
			due:  due(newJob("j", atSched(t0)), 0, t0),
			now:  t0.Add(time.Second),
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
		},
		{
			name:   "one-time at, late beyond the window: missed and done",
			due:    due(newJob("j", atSched(t0)), 0, t0),
			now:    t0.Add(2 * time.Hour),
			want:   expand(slotRun{KindMissed, t0, 0, 1}),
			reason: missed1h,
		},
		{
			name: "one-time after: done after its slot",
			due:  due(afterJob, 0, t0),
			now:  t0,
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
		},
		{
			name: "end_time reached: done",
			due:  due(newJob("j", cronSched("* * * * *", "UTC"), withEnd(t0.Add(30*time.Second))), 0, t0),
			now:  t0,
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
		},
		{
			name: "end_time on the next slot: that slot still comes",
			due:  due(newJob("j", cronSched("* * * * *", "UTC"), withEnd(t0.Add(time.Minute))), 0, t0),
			now:  t0,
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
			to:   t0.Add(time.Minute),
		},
		{
			// An every-second job an hour behind: the first 1,000 slots,
			// oldest first; To is the next one behind, so the engine
			// continues with it at once.
			name: "cap of 1,000 slots",
			due:  due(newJob("j", everySched(time.Second, t0)), 0, t0),
			now:  t0.Add(time.Hour),
			want: expand(slotRun{KindCatchUp, t0, time.Second, 1000}),
			to:   t0.Add(1000 * time.Second),
		},
		{
			// 02:30 does not exist in Berlin on 2026-03-29 (02:00 CET ->
			// 03:00 CEST): the slot fires once, at 03:00 CEST = 01:00Z.
			name: "DST gap: Berlin 30 2 * * * fires once at 01:00Z",
			due: due(newJob("j", cronSched("30 2 * * *", "Europe/Berlin")), 0,
				time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)),
			now:  time.Date(2026, 3, 29, 1, 0, 0, 100e6, time.UTC),
			want: expand(slotRun{KindScheduled, time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), 0, 1}),
			to:   time.Date(2026, 3, 30, 2, 30, 0, 0, berlin),
		},
		{
			name: "DST gap walked from the day before: one slot in the gap",
			due: due(newJob("j", cronSched("30 2 * * *", "Europe/Berlin"), withCatchUp(48*time.Hour)), 0,
				time.Date(2026, 3, 28, 1, 30, 0, 0, time.UTC)),
			now: time.Date(2026, 3, 29, 1, 0, 1, 0, time.UTC),
			want: []Slot{
				{Nominal: time.Date(2026, 3, 28, 1, 30, 0, 0, time.UTC), Kind: KindCatchUp},
				{Nominal: time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), Kind: KindScheduled},
			},
			to: time.Date(2026, 3, 30, 0, 30, 0, 0, time.UTC),
		},
		{
			// 02:30 happens twice in Berlin on 2026-10-25: only the first
			// (00:30Z) fires; the next slot is the next day.
			name: "DST repeated hour: fires at the first occurrence only",
			due: due(newJob("j", cronSched("30 2 * * *", "Europe/Berlin")), 0,
				time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)),
			now:  time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC),
			want: expand(slotRun{KindCatchUp, time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), 0, 1}),
			to:   time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC),
		},
		{
			name: "spread: not due before the offset",
			due:  due(spreadJob, 0, t0),
			now:  t0.Add(offset - time.Millisecond),
			to:   t0,
		},
		{
			name: "spread: fires at the offset, nominal time unchanged",
			due:  due(spreadJob, 0, t0),
			now:  t0.Add(offset),
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
			to:   t0.Add(time.Hour),
		},
		{
			name: "spread: lateness counts from the offset",
			due:  due(spreadJob, 0, t0),
			now:  t0.Add(offset + 4*time.Second),
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
			to:   t0.Add(time.Hour),
		},
		{
			name: "paused: due slots are missed, never fired",
			due: due(newJob("j", cronSched("* * * * *", "UTC"), func(j *registryv1.Job) {
				j.Paused = true
			}), 0, t0),
			now:    t0.Add(time.Minute),
			want:   expand(slotRun{KindMissed, t0, time.Minute, 2}),
			reason: "the job is paused",
			to:     t0.Add(2 * time.Minute),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			adv, err := Plan(tt.due, tt.now)
			require.NoError(t, err)
			require.Equal(t, tt.due, adv.Due)
			require.Len(t, adv.Slots, len(tt.want))
			for i, s := range adv.Slots {
				require.Truef(t, tt.want[i].Nominal.Equal(s.Nominal), "slot %d: nominal %s, want %s", i, s.Nominal, tt.want[i].Nominal)
				require.Equalf(t, tt.want[i].Kind, s.Kind, "slot %d (%s)", i, s.Nominal)
				if s.Kind == KindMissed {
					require.Equal(t, tt.reason, s.Reason)
				} else {
					require.Empty(t, s.Reason)
				}
				if i > 0 {
					require.True(t, adv.Slots[i-1].Nominal.Before(s.Nominal), "oldest first, each once")
				}
			}
			require.Truef(t, tt.to.Equal(adv.To), "To %s, want %s", adv.To, tt.to)
		})
	}
}

func TestPlanOptions(t *testing.T) {
	t.Parallel()
	d := due(newJob("j", everySched(time.Second, t0)), 0, t0)
	tests := []struct {
		name    string
		planner Planner
		now     time.Time
		due     time.Time // the engine's cutoff; zero: now
		want    []Slot
		to      time.Time
	}{
		{
			name:    "tolerance 1s",
			planner: Planner{OnTimeTolerance: time.Second},
			now:     t0.Add(2 * time.Second),
			want: expand(
				slotRun{KindCatchUp, t0, time.Second, 2},
				slotRun{KindScheduled, t0.Add(2 * time.Second), 0, 1},
			),
			to: t0.Add(3 * time.Second),
		},
		{
			// Due up to now + 1.5 s (the engine's lead); lateness still
			// counts from now, so the slot 2 s before now is catch-up under
			// a 1 s tolerance.
			name:    "lead 1.5s",
			planner: Planner{OnTimeTolerance: time.Second},
			now:     t0.Add(2 * time.Second),
			due:     t0.Add(3500 * time.Millisecond),
			want: expand(
				slotRun{KindCatchUp, t0, time.Second, 2},
				slotRun{KindScheduled, t0.Add(2 * time.Second), time.Second, 2},
			),
			to: t0.Add(4 * time.Second),
		},
		{
			name:    "cap 3",
			planner: Planner{MaxSlots: 3},
			now:     t0.Add(10 * time.Second),
			want:    expand(slotRun{KindCatchUp, t0, time.Second, 3}),
			to:      t0.Add(3 * time.Second),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sched, err := scheduleOf(nil, d)
			require.NoError(t, err)
			adv := tt.planner.plan(d, sched, tt.now, cmp.Or(tt.due, tt.now))
			require.Equal(t, tt.want, adv.Slots)
			require.True(t, tt.to.Equal(adv.To))
		})
	}
}

// TestPlanResumesAfterCap walks an every-second job a day behind in capped
// chunks, as the engine does, and checks every slot is recorded once, in
// order, with the right kind.
func TestPlanResumesAfterCap(t *testing.T) {
	t.Parallel()
	d := due(newJob("j", everySched(time.Second, t0)), 0, t0)
	now := t0.Add(24 * time.Hour)
	var all []Slot
	for chunks := 0; ; chunks++ {
		require.Less(t, chunks, 100, "does not terminate")
		adv, err := Plan(d, now)
		require.NoError(t, err)
		require.LessOrEqual(t, len(adv.Slots), DefaultMaxSlots)
		all = append(all, adv.Slots...)
		if adv.To.After(now) {
			break
		}
		d.NextFire = adv.To
	}
	require.Len(t, all, 24*3600+1)
	for i, s := range all {
		require.True(t, t0.Add(time.Duration(i)*time.Second).Equal(s.Nominal))
		late := now.Sub(s.Nominal)
		switch {
		case late < 5*time.Second:
			require.Equal(t, KindScheduled, s.Kind)
		case late > time.Hour:
			require.Equal(t, KindMissed, s.Kind)
		default:
			require.Equal(t, KindCatchUp, s.Kind)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		due  Due
		want string
	}{
		{name: "no job", due: Due{JobID: "j", NextFire: t0}, want: "no job definition"},
		{name: "no next fire", due: due(newJob("j", cronSched("* * * * *", "UTC")), 0, time.Time{}), want: "no next fire time"},
		{
			name: "no create time",
			due: due(newJob("j", cronSched("* * * * *", "UTC"), func(j *registryv1.Job) {
				j.CreateTime = nil
			}), 0, t0),
			want: "no valid create_time",
		},
		{name: "no schedule", due: due(newJob("j", nil), 0, t0), want: "bad stored schedule"},
		{name: "bad cron", due: due(newJob("j", cronSched("61 * * * *", "UTC")), 0, t0), want: "cron"},
		{name: "unknown time zone", due: due(newJob("j", cronSched("* * * * *", "Mars/Olympus")), 0, t0), want: "time_zone"},
		{
			name: "bad interval",
			due: due(newJob("j", &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{
				Every: durationpb.New(time.Millisecond),
			}}}), 0, t0),
			want: "interval.every",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Plan(tt.due, t0.Add(time.Minute))
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, "job j")
		})
	}
}

// withRuns is d with RunsFired set.
func withRuns(d Due, n int64) Due {
	d.RunsFired = n
	return d
}

// TestPlanMaxRuns: a job with a limit fires at most its remaining runs;
// missed slots do not count; the slot that reaches the limit ends the
// advance with a zero To, and nothing after it is recorded.
func TestPlanMaxRuns(t *testing.T) {
	t.Parallel()
	minutely := func(opts ...jobOpt) *registryv1.Job {
		return newJob("j", cronSched("* * * * *", "UTC"), append(opts, withCatchUp(time.Hour))...)
	}
	tests := []struct {
		name string
		due  Due
		now  time.Time
		want []Slot
		to   time.Time
		runs int64
	}{
		{
			name: "unlimited",
			due:  withRuns(due(minutely(), 0, t0), 0),
			now:  t0.Add(2 * time.Minute),
			want: expand(slotRun{KindCatchUp, t0, time.Minute, 2}, slotRun{KindScheduled, t0.Add(2 * time.Minute), 0, 1}),
			to:   t0.Add(3 * time.Minute),
			runs: 0,
		},
		{
			name: "below the limit",
			due:  withRuns(due(minutely(withMaxRuns(3)), 0, t0), 1),
			now:  t0,
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
			to:   t0.Add(time.Minute),
			runs: 1,
		},
		{
			name: "the last run completes the job",
			due:  withRuns(due(minutely(withMaxRuns(3)), 0, t0), 2),
			now:  t0,
			want: expand(slotRun{KindScheduled, t0, 0, 1}),
			runs: 1,
		},
		{
			name: "a catch-up stops at the limit",
			due:  withRuns(due(minutely(withMaxRuns(5)), 0, t0), 3),
			now:  t0.Add(10 * time.Minute),
			want: expand(slotRun{KindCatchUp, t0, time.Minute, 2}),
			runs: 2,
		},
		{
			name: "missed slots do not count",
			due:  withRuns(due(minutely(withMaxRuns(2)), 0, t0), 0),
			now:  t0.Add(62 * time.Minute),
			want: expand(slotRun{KindMissed, t0, time.Minute, 2}, slotRun{KindCatchUp, t0.Add(2 * time.Minute), time.Minute, 2}),
			runs: 2,
		},
		{
			name: "already at the limit: completes without a slot",
			due:  withRuns(due(minutely(withMaxRuns(2)), 0, t0), 2),
			now:  t0,
			runs: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			adv, err := Plan(tt.due, tt.now)
			require.NoError(t, err)
			got := make([]Slot, len(adv.Slots))
			for i, s := range adv.Slots {
				got[i] = Slot{Nominal: s.Nominal, Kind: s.Kind}
			}
			if len(tt.want) == 0 {
				require.Empty(t, got)
			} else {
				require.Equal(t, tt.want, got)
			}
			require.Truef(t, tt.to.Equal(adv.To), "To %s, want %s", adv.To, tt.to)
			require.Equal(t, tt.runs, adv.Runs())
			require.Equal(t, tt.to.IsZero(), adv.Completes())
		})
	}
}
