package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// nextCase is one NextN expectation. Expected instants were derived by hand
// from the zone rules (noted per case), not copied from output.
type nextCase struct {
	name  string
	expr  string
	zone  string // "" means UTC
	after string
	want  []string // RFC 3339 UTC; an empty list means Next reports false
}

func runNextCases(t *testing.T, tests []nextCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			loc := time.UTC
			if tt.zone != "" {
				loc = loadLocation(t, tt.zone)
			}
			s := NewCron(mustCron(t, tt.expr), loc)
			after := ts(tt.after)
			n := max(len(tt.want), 1)
			got := s.NextN(after, n)
			if len(tt.want) == 0 {
				require.Empty(t, got)
			} else {
				require.Equal(t, tt.want, utcStrings(got))
			}
			for _, g := range got {
				require.Equal(t, loc, g.Location(), "cron results carry the schedule's location")
				require.Zero(t, g.Nanosecond())
			}
			first, ok := s.Next(after)
			require.Equal(t, len(tt.want) > 0, ok)
			if ok {
				require.Equal(t, tt.want[0], utcStrings([]time.Time{first})[0])
			}
		})
	}
}

func TestNextUTC(t *testing.T) {
	t.Parallel()
	runNextCases(t, []nextCase{
		{"every minute is strictly after", "* * * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"}},
		{"sub-second after", "* * * * *", "", "2026-01-01T00:00:59.999999999Z",
			[]string{"2026-01-01T00:01:00Z"}},
		{"every second", "* * * * * *", "", "2026-01-01T00:00:00.5Z",
			[]string{"2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"}},
		{"seconds expression", "*/20 30 9 * * *", "", "2026-01-01T09:30:20Z",
			[]string{"2026-01-01T09:30:40Z", "2026-01-02T09:30:00Z", "2026-01-02T09:30:20Z"}},
		{"quarter hours across midnight", "*/15 * * * *", "", "2026-01-01T23:40:00Z",
			[]string{"2026-01-01T23:45:00Z", "2026-01-02T00:00:00Z", "2026-01-02T00:15:00Z"}},
		{"hour list", "0 9,17 * * *", "", "2026-01-01T12:00:00Z",
			[]string{"2026-01-01T17:00:00Z", "2026-01-02T09:00:00Z"}},
		{"year rollover", "0 0 1 1 *", "", "2026-12-31T23:59:59Z",
			[]string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"@yearly at its own slot", "@yearly", "", "2026-01-01T00:00:00Z",
			[]string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"@monthly", "@monthly", "", "2026-01-15T00:00:00Z",
			[]string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},
		{"@weekly is sunday", "@weekly", "", "2026-01-01T00:00:00Z", // Jan 1 2026 is a Thursday
			[]string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"@hourly", "@hourly", "", "2026-01-01T00:59:59Z",
			[]string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"}},
		{"leap day", "0 0 29 2 *", "", "2026-01-01T00:00:00Z",
			[]string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z"}},
		{"leap day in 2096", "0 0 29 2 *", "", "2095-03-01T00:00:00Z",
			[]string{"2096-02-29T00:00:00Z"}},
		// 2100 is not a leap year, so the next February 29th after 2097 is
		// 2104: the 29-year horizon reaches it.
		{"leap day across a skipped leap year", "0 0 29 2 *", "", "2097-03-01T00:00:00Z", []string{"2104-02-29T00:00:00Z"}},
		// A February 29th that is a Sunday (day-of-week "*/7" counts as a
		// star, so both day fields must match): 2088, then 2128, 40 years on.
		{"leap Sunday beyond the horizon", "0 0 29 2 */7", "", "2088-03-01T00:00:00Z", nil},
		{"leap Sunday at the horizon's edge", "0 0 29 2 */7", "", "2099-03-01T00:00:00Z", // limit 2128-03-01T00:00:00
			[]string{"2128-02-29T00:00:00Z"}},
		{"leap Sunday one second past the horizon", "0 0 29 2 */7", "", "2099-02-28T23:59:59Z", nil},
		{"31st skips short months", "0 0 31 * *", "", "2026-01-31T00:00:00Z",
			[]string{"2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z", "2026-07-31T00:00:00Z", "2026-08-31T00:00:00Z"}},
		{"last minute of month", "59 23 30 4 *", "", "2026-04-30T23:58:59Z",
			[]string{"2026-04-30T23:59:00Z", "2027-04-30T23:59:00Z"}},
		{"february 28th then march", "0 12 28,1 2,3 *", "", "2026-02-27T00:00:00Z",
			[]string{"2026-02-28T12:00:00Z", "2026-03-01T12:00:00Z", "2026-03-28T12:00:00Z", "2027-02-01T12:00:00Z"}},
		{"from the zero time", "0 12 * * *", "", "0001-01-01T00:00:00Z",
			[]string{"0001-01-01T12:00:00Z"}},
		{"up to year 9999", "0 0 1 1 *", "", "9998-06-01T00:00:00Z",
			[]string{"9999-01-01T00:00:00Z"}},
		{"nothing after year 9999", "0 0 1 1 *", "", "9999-06-01T00:00:00Z", nil},
		{"last second of year 9999", "* * * * * *", "", "9999-12-31T23:59:59Z", nil},
	})
}

// Europe/Berlin 2026: clocks go forward on March 29th at 01:00Z (02:00 CET
// becomes 03:00 CEST, wall 02:00-02:59 does not exist) and back on October
// 25th at 01:00Z (03:00 CEST becomes 02:00 CET, wall 02:00-02:59 happens
// twice: first pass 00:00Z-01:00Z, second pass 01:00Z-02:00Z).
func TestNextBerlin(t *testing.T) {
	t.Parallel()
	const z = "Europe/Berlin"
	runNextCases(t, []nextCase{
		{"spring: slot in the gap fires at the transition", "30 2 * * *", z, "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"spring: quarter hours collapse in the gap", "*/15 * * * *", z, "2026-03-29T00:30:00Z",
			[]string{"2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z", "2026-03-29T01:30:00Z"}},
		{"spring: from the transition instant", "*/15 * * * *", z, "2026-03-29T01:00:00Z",
			[]string{"2026-03-29T01:15:00Z"}},
		{"spring: gap slot and gap end fire once", "0 2,3 * * *", z, "2026-03-28T22:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T01:00:00Z"}},
		{"spring: seconds in the gap", "59 59 2 * * *", z, "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:59:59Z"}},
		{"autumn: repeated wall time fires once", "30 2 * * *", z, "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"autumn: second pass is silent", "0,30 * * * *", z, "2026-10-24T23:15:00Z",
			[]string{"2026-10-24T23:30:00Z", "2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z", "2026-10-25T02:30:00Z"}},
		{"autumn: after inside the second pass", "0,30 * * * *", z, "2026-10-25T01:10:00Z",
			[]string{"2026-10-25T02:00:00Z"}},
		{"autumn: after at the start of the second pass", "* * * * *", z, "2026-10-25T01:00:00Z",
			[]string{"2026-10-25T02:00:00Z", "2026-10-25T02:01:00Z"}},
		{"autumn: after at the end of the first pass", "* * * * *", z, "2026-10-25T00:59:00Z",
			[]string{"2026-10-25T02:00:00Z"}},
		{"autumn: every second in the second pass", "* * * * * *", z, "2026-10-25T01:59:59Z",
			[]string{"2026-10-25T02:00:00Z"}},
		{"autumn: hourly", "0 * * * *", z, "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}},
		{"weekdays 9:00, the documented example", "0 9 * * 1-5", z, "2026-03-28T00:00:00Z", []string{
			"2026-03-30T07:00:00Z", "2026-03-31T07:00:00Z", "2026-04-01T07:00:00Z", "2026-04-02T07:00:00Z", "2026-04-03T07:00:00Z",
			"2026-04-06T07:00:00Z", "2026-04-07T07:00:00Z", "2026-04-08T07:00:00Z", "2026-04-09T07:00:00Z", "2026-04-10T07:00:00Z",
		}},
		{"weekdays 9:00 before the change is CET", "0 9 * * MON-FRI", z, "2026-03-26T12:00:00Z",
			[]string{"2026-03-27T08:00:00Z", "2026-03-30T07:00:00Z"}},
		{"midnight on the change days", "0 0 * * *", z, "2026-10-24T12:00:00Z", // 00:00 CEST, then CET
			[]string{"2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"}},
	})
}

// America/New_York 2026: forward on March 8th at 07:00Z (02:00 EST becomes
// 03:00 EDT), back on November 1st at 06:00Z (02:00 EDT becomes 01:00 EST,
// wall 01:00-01:59 twice: 05:00Z-06:00Z then 06:00Z-07:00Z).
func TestNextNewYork(t *testing.T) {
	t.Parallel()
	const z = "America/New_York"
	runNextCases(t, []nextCase{
		{"spring gap", "30 2 * * *", z, "2026-03-06T12:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"autumn repeat", "30 1 * * *", z, "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"autumn after inside the second pass", "30 1 * * *", z, "2026-11-01T06:10:00Z",
			[]string{"2026-11-02T06:30:00Z"}},
		{"autumn quarter hours", "*/20 * * * *", z, "2026-11-01T05:30:00Z",
			[]string{"2026-11-01T05:40:00Z", "2026-11-01T07:00:00Z", "2026-11-01T07:20:00Z"}},
	})
}

// Australia/Lord_Howe shifts by 30 minutes. 2026: back on April 5th at 15:00Z
// on April 4th (02:00 +11 becomes 01:30 +10:30, wall 01:30-01:59 twice:
// 14:30Z-15:00Z then 15:00Z-15:30Z); forward on October 4th at 15:30Z on
// October 3rd (02:00 +10:30 becomes 02:30 +11, wall 02:00-02:29 missing).
func TestNextLordHowe(t *testing.T) {
	t.Parallel()
	const z = "Australia/Lord_Howe"
	runNextCases(t, []nextCase{
		{"autumn quarter hours", "*/15 * * * *", z, "2026-04-04T14:00:00Z",
			[]string{"2026-04-04T14:15:00Z", "2026-04-04T14:30:00Z", "2026-04-04T14:45:00Z", "2026-04-04T15:30:00Z", "2026-04-04T15:45:00Z"}},
		{"spring quarter hours", "*/15 * * * *", z, "2026-10-03T15:00:00Z", // 02:00, 02:15 and 02:30 collapse
			[]string{"2026-10-03T15:15:00Z", "2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z"}},
		{"spring slot in the gap", "15 2 * * *", z, "2026-10-02T12:00:00Z",
			[]string{"2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"}},
		{"autumn repeated slot", "45 1 * * *", z, "2026-04-03T12:00:00Z",
			[]string{"2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
	})
}

// TestNextOddZones covers a fixed offset (no zone periods at all) and Samoa
// skipping December 30th 2011 (-10 to +14 at 10:00Z), a 24-hour gap.
func TestNextOddZones(t *testing.T) {
	t.Parallel()
	runNextCases(t, []nextCase{
		{"samoa skipped day", "0 12 * * *", "Pacific/Apia", "2011-12-29T00:00:00Z",
			[]string{"2011-12-29T22:00:00Z", "2011-12-30T10:00:00Z", "2011-12-30T22:00:00Z"}},
	})
	s := NewCron(mustCron(t, "0 9 * * *"), time.FixedZone("+05:30", 5*3600+1800))
	require.Equal(t, []string{"2026-01-01T03:30:00Z", "2026-01-02T03:30:00Z"},
		utcStrings(s.NextN(ts("2026-01-01T00:00:00Z"), 2)))
}

// TestNextOutsideYearRange checks instants time.Time can hold but the cron
// search does not cover: nothing after 9999, and a far-past `after` behaves
// like the start of year 1.
func TestNextOutsideYearRange(t *testing.T) {
	t.Parallel()
	s := NewCron(mustCron(t, "0 12 * * *"), loadLocation(t, "Europe/Berlin"))
	_, ok := s.Next(time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC))
	require.False(t, ok)
	got, ok := s.Next(time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC))
	require.True(t, ok)
	require.Equal(t, 1, got.Year())
	require.True(t, got.After(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)))
}

func TestCronRangeConstants(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), int64(minCronUnix))
	require.Equal(t, time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix(), int64(maxCronUnix))
}

// TestCivilCalendar cross-checks the calendar arithmetic with package time
// over four centuries, including 1900 and 2100 (not leap) and 2000 (leap).
func TestCivilCalendar(t *testing.T) {
	t.Parallel()
	for day := time.Date(1890, 1, 1, 0, 0, 0, 0, time.UTC); day.Year() < 2310; day = day.AddDate(0, 0, 1) {
		z := day.Unix() / secondsPerDay
		require.Equal(t, z, daysFromCivil(int64(day.Year()), int64(day.Month()), int64(day.Day())))
		y, m, d := civilFromDays(z)
		require.Equal(t, [3]int64{int64(day.Year()), int64(day.Month()), int64(day.Day())}, [3]int64{y, m, d})
		require.Equal(t, int(day.Weekday()), weekday(z))
		if day.Day() == 1 {
			require.Equal(t, day.AddDate(0, 1, -1).Day(), daysInMonth(y, int(m)))
		}
	}
}
