package schedule

import (
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestInterval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		every  time.Duration
		anchor string
		after  string
		want   []string
	}{
		{"between slots", 10 * time.Minute, "2026-01-01T00:00:00Z", "2026-01-01T00:25:00Z",
			[]string{"2026-01-01T00:30:00Z", "2026-01-01T00:40:00Z"}},
		{"after on a slot", 10 * time.Minute, "2026-01-01T00:00:00Z", "2026-01-01T00:30:00Z",
			[]string{"2026-01-01T00:40:00Z"}},
		{"anchor itself is a slot", time.Hour, "2026-01-01T00:00:00Z", "2025-12-31T23:59:59.999999999Z",
			[]string{"2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"}},
		{"anchor in the future", time.Hour, "2026-06-01T00:00:00.5Z", "2026-01-01T00:30:00Z",
			[]string{"2026-01-01T01:00:00.5Z", "2026-01-01T02:00:00.5Z"}},
		{"ignores daylight saving", 24 * time.Hour, "2026-03-28T12:00:00+01:00", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T11:00:00Z", "2026-03-30T11:00:00Z"}},
		// 1700-01-01 to 2026-01-01 is 326*365+79 days; days*86400s is an exact
		// number of hours, and is 1 (mod 7) in seconds.
		{"far past anchor, hours", time.Hour, "1700-01-01T00:00:07Z", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T00:00:07Z", "2026-01-01T01:00:07Z"}},
		{"far past anchor, 7 seconds", 7 * time.Second, "1700-01-01T00:00:00Z", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T00:00:06Z", "2026-01-01T00:00:13Z"}},
		{"far future anchor", time.Hour, "2400-01-01T00:30:00Z", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T00:30:00Z"}},
		{"nanosecond interval", time.Nanosecond, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T00:00:00.000000001Z", "2026-01-01T00:00:00.000000002Z"}},
		{"zero interval never fires", 0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", nil},
		{"negative interval never fires", -time.Hour, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewInterval(tt.every, ts(tt.anchor))
			require.Equal(t, KindInterval, s.Kind())
			got := s.NextN(ts(tt.after), max(len(tt.want), 1))
			if len(tt.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tt.want, utcStrings(got))
		})
	}
}

// TestIntervalExactFarAway checks, with big-integer arithmetic, that the
// result is a slot and that the slot before it is not after `after`, for
// anchors and instants centuries apart (beyond time.Duration's range).
func TestIntervalExactFarAway(t *testing.T) {
	t.Parallel()
	nanos := func(x time.Time) *big.Int {
		n := big.NewInt(x.Unix())
		n.Mul(n, big.NewInt(int64(time.Second)))
		return n.Add(n, big.NewInt(int64(x.Nanosecond())))
	}
	anchors := []time.Time{
		time.Date(1, 1, 1, 0, 0, 0, 123, time.UTC),
		time.Date(1600, 7, 3, 4, 5, 6, 789, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2700, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
	}
	everies := []time.Duration{time.Nanosecond, 7 * time.Second, 13*time.Minute + 17*time.Nanosecond, 24 * time.Hour, 1<<62 + 3}
	for _, anchor := range anchors {
		for _, every := range everies {
			for _, after := range anchors {
				got, ok := NewInterval(every, anchor).Next(after)
				require.True(t, ok)
				require.True(t, got.After(after))
				diff := new(big.Int).Sub(nanos(got), nanos(anchor))
				require.Zero(t, new(big.Int).Mod(diff, big.NewInt(int64(every))).Sign(), "result is a slot")
				prev := new(big.Int).Sub(nanos(got), big.NewInt(int64(every)))
				require.LessOrEqual(t, prev.Cmp(nanos(after)), 0, "no slot skipped")
			}
		}
	}
}

func TestOneShots(t *testing.T) {
	t.Parallel()
	at := ts("2026-01-01T10:00:00.25Z")
	tests := []struct {
		name  string
		s     Schedule
		kind  Kind
		after string
		want  []string
	}{
		{"at before", NewAt(at), KindAt, "2026-01-01T00:00:00Z", []string{"2026-01-01T10:00:00.25Z"}},
		{"at just before", NewAt(at), KindAt, "2026-01-01T10:00:00.249999999Z", []string{"2026-01-01T10:00:00.25Z"}},
		{"at exactly", NewAt(at), KindAt, "2026-01-01T10:00:00.25Z", nil},
		{"at passed", NewAt(at), KindAt, "2027-01-01T00:00:00Z", nil},
		{"after", NewAfter(ts("2026-01-01T00:00:00Z"), 90*time.Minute), KindAfter, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T01:30:00Z"}},
		{"after passed", NewAfter(ts("2026-01-01T00:00:00Z"), 90*time.Minute), KindAfter, "2026-01-01T01:30:00Z", nil},
		{"after with zero delay", NewAfter(ts("2026-01-01T00:00:00Z"), 0), KindAfter, "2025-12-31T00:00:00Z",
			[]string{"2026-01-01T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.kind, tt.s.Kind())
			got := tt.s.NextN(ts(tt.after), 3)
			if len(tt.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tt.want, utcStrings(got))
		})
	}
}

func TestBounds(t *testing.T) {
	t.Parallel()
	hourly := NewCron(mustCron(t, "0 * * * *"), nil)
	start, end := ts("2026-01-01T05:00:00Z"), ts("2026-01-01T08:00:00Z")
	tests := []struct {
		name  string
		s     Schedule
		after string
		n     int // 0 means 10
		want  []string
	}{
		{"start and end slots are kept", hourly.WithBounds(start, end), "2026-01-01T00:00:00Z", 0,
			[]string{"2026-01-01T05:00:00Z", "2026-01-01T06:00:00Z", "2026-01-01T07:00:00Z", "2026-01-01T08:00:00Z"}},
		{"start between slots", hourly.WithBounds(ts("2026-01-01T05:30:00Z"), end), "2026-01-01T00:00:00Z", 0,
			[]string{"2026-01-01T06:00:00Z", "2026-01-01T07:00:00Z", "2026-01-01T08:00:00Z"}},
		{"start one nanosecond after a slot", hourly.WithBounds(ts("2026-01-01T05:00:00.000000001Z"), time.Time{}), "2026-01-01T00:00:00Z", 1,
			[]string{"2026-01-01T06:00:00Z"}},
		{"after past start", hourly.WithBounds(start, end), "2026-01-01T06:00:00Z", 0,
			[]string{"2026-01-01T07:00:00Z", "2026-01-01T08:00:00Z"}},
		{"end one nanosecond before a slot", hourly.WithBounds(time.Time{}, ts("2026-01-01T01:59:59.999999999Z")), "2026-01-01T00:00:00Z", 0,
			[]string{"2026-01-01T01:00:00Z"}},
		{"end passed", hourly.WithBounds(start, end), "2026-01-01T08:00:00Z", 0, nil},
		{"end before start", hourly.WithBounds(end, start), "2026-01-01T00:00:00Z", 0, nil},
		{"unbounded", hourly.WithBounds(time.Time{}, time.Time{}), "2026-01-01T00:00:00Z", 2,
			[]string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"}},
		{"interval", NewInterval(90*time.Minute, ts("2026-01-01T00:00:00Z")).WithBounds(start, end), "2025-01-01T00:00:00Z", 0,
			[]string{"2026-01-01T06:00:00Z", "2026-01-01T07:30:00Z"}},
		{"at before start", NewAt(ts("2026-01-01T04:00:00Z")).WithBounds(start, end), "2025-01-01T00:00:00Z", 0, nil},
		{"at on start", NewAt(start).WithBounds(start, end), "2025-01-01T00:00:00Z", 0, []string{"2026-01-01T05:00:00Z"}},
		{"after on end", NewAfter(start, 3*time.Hour).WithBounds(start, end), "2025-01-01T00:00:00Z", 0, []string{"2026-01-01T08:00:00Z"}},
		{"after beyond end", NewAfter(start, 3*time.Hour+1).WithBounds(start, end), "2025-01-01T00:00:00Z", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := tt.n
			if n == 0 {
				n = 10
			}
			got := tt.s.NextN(ts(tt.after), n)
			if len(tt.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tt.want, utcStrings(got))
		})
	}
}

func TestDegenerateSchedules(t *testing.T) {
	t.Parallel()
	after := ts("2026-01-01T00:00:00Z")
	tests := []struct {
		name string
		s    Schedule
		kind Kind
	}{
		{"zero schedule", Schedule{}, 0},
		{"nil cron", NewCron(nil, time.UTC), KindCron},
		{"zero cron", NewCron(&Cron{}, time.UTC), KindCron},
		{"zero interval", NewInterval(0, after), KindInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.kind, tt.s.Kind())
			_, ok := tt.s.Next(after)
			require.False(t, ok)
			require.Empty(t, tt.s.NextN(after, 5))
		})
	}
}

func TestNextNCounts(t *testing.T) {
	t.Parallel()
	s := NewCron(mustCron(t, "* * * * *"), nil)
	after := ts("2026-01-01T00:00:00Z")
	require.Nil(t, s.NextN(after, 0))
	require.Nil(t, s.NextN(after, -1))
	require.Len(t, s.NextN(after, 1000), 1000)
}

func TestNilLocationIsUTC(t *testing.T) {
	t.Parallel()
	got, ok := NewCron(mustCron(t, "0 9 * * *"), nil).Next(ts("2026-01-01T00:00:00Z"))
	require.True(t, ok)
	require.Equal(t, time.UTC, got.Location())
	require.Equal(t, "2026-01-01T09:00:00Z", got.Format(time.RFC3339))
}

// TestMonotonicReadingDropped: time.Now carries a monotonic clock reading that
// would otherwise leak into interval results and make comparisons with
// times from other processes use a meaningless clock.
func TestMonotonicReadingDropped(t *testing.T) {
	t.Parallel()
	now := time.Now()
	got, ok := NewInterval(time.Minute, now).Next(now)
	require.True(t, ok)
	require.NotContains(t, got.String(), "m=")
	require.Equal(t, now.Add(time.Minute).Round(0), got)
}

func TestKindString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind Kind
		want string
	}{
		{KindCron, "cron"}, {KindInterval, "interval"}, {KindAt, "at"}, {KindAfter, "after"}, {0, "unknown"}, {Kind(99), "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.kind.String())
		})
	}
}
