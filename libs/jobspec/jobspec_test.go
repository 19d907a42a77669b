package jobspec_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/schedule"
)

func TestSchedule(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 5, 1, 10, 0, 0, 250_000_000, time.UTC) // 10:00:00.25
	ts := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return v
	}
	for _, tc := range []struct {
		name  string
		sched *registryv1.Schedule
		from  time.Time
		want  []string // the whole series, except for intervals: its start
	}{
		{"interval anchored at the create time, rounded up", &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{
			Interval: &registryv1.Interval{Every: durationpb.New(90 * time.Second)}}}, created,
			[]string{"2026-05-01T10:00:01Z", "2026-05-01T10:01:31Z", "2026-05-01T10:03:01Z"}},
		{"interval with its own anchor", &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{
			Interval: &registryv1.Interval{Every: durationpb.New(time.Hour), AnchorTime: timestamppb.New(ts("2026-01-01T00:30:00Z"))}}}, created,
			[]string{"2026-05-01T10:30:00Z", "2026-05-01T11:30:00Z"}},
		{"after never fires before the delay", &registryv1.Schedule{Kind: &registryv1.Schedule_After{After: durationpb.New(time.Minute)}}, created,
			[]string{"2026-05-01T10:01:01Z"}},
		{"at", &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: timestamppb.New(ts("2026-06-01T00:00:00Z"))}}, created,
			[]string{"2026-06-01T00:00:00Z"}},
		{"cron in a zone, bounded", &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 12 * * *"}, TimeZone: "America/New_York",
			EndTime: timestamppb.New(ts("2026-05-02T16:00:00Z"))}, created,
			[]string{"2026-05-01T16:00:00Z", "2026-05-02T16:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, errs := jobspec.Schedule(tc.sched, created)
			require.Nil(t, errs)
			var got []string
			n := len(tc.want)
			if s.Kind() != schedule.KindInterval {
				n++ // these series end: asking for one more must not get one
			}
			for _, v := range s.NextN(tc.from, n) {
				got = append(got, v.UTC().Format(time.RFC3339Nano))
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestScheduleErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		sched *registryv1.Schedule
		field string
	}{
		{"nil", nil, ""},
		{"no kind", &registryv1.Schedule{}, "kind"},
		{"bad cron", &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* *"}}, "cron"},
		{"bad Quartz form", &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 0 L-31 * *"}}, "cron"},
		{"local zone", &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "@daily"}, TimeZone: "Local"}, "time_zone"},
		{"interval missing", &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{}}}, "interval.every"},
		{"interval too long", &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{Every: durationpb.New(400 * 24 * time.Hour)}}}, "interval.every"},
		{"after too short", &registryv1.Schedule{Kind: &registryv1.Schedule_After{After: durationpb.New(time.Millisecond)}}, "after"},
		{"bad at", &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: &timestamppb.Timestamp{Seconds: -1 << 62}}}, "at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, errs := jobspec.Schedule(tc.sched, time.Now())
			require.Len(t, errs, 1)
			require.Equal(t, tc.field, errs[0].Field)
		})
	}
}

func TestLocationsCache(t *testing.T) {
	t.Parallel()
	var locs jobspec.Locations
	berlin, err := locs.Load("Europe/Berlin")
	require.NoError(t, err)
	again, err := locs.Load("Europe/Berlin")
	require.NoError(t, err)
	require.Same(t, berlin, again, "the second load comes from the cache")
	utc, err := locs.Load("")
	require.NoError(t, err)
	require.Same(t, time.UTC, utc)
	_, err = locs.Load("Mars/Olympus_Mons")
	require.ErrorContains(t, err, "unknown time zone")
	_, err = locs.Load("Local")
	require.Error(t, err, "Local is refused through the cache too")

	var none *jobspec.Locations // no cache, same answers
	fresh, err := none.Load("Europe/Berlin")
	require.NoError(t, err)
	require.Equal(t, berlin.String(), fresh.String())

	// Cached and uncached schedules agree.
	spec := &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "30 2 * * *"}, TimeZone: "Europe/Berlin"}
	created := time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC)
	a, errs := locs.Schedule(spec, created)
	require.Empty(t, errs)
	b, errs := jobspec.Schedule(spec, created)
	require.Empty(t, errs)
	next := created
	for range 5 {
		na, oka := a.Next(next)
		nb, okb := b.Next(next)
		require.Equal(t, okb, oka)
		require.True(t, na.Equal(nb), "%s != %s", na, nb)
		next = na
	}
}
