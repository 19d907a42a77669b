package schedule

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseCronValid(t *testing.T) {
	t.Parallel()
	all := func(lo, hi int) []int { return seq(lo, hi, 1) }
	type sets struct {
		second, minute, hour, dom, month, dow []int
		domStar, dowStar                      bool
	}
	// every is the set of "* * * * *", tests override what differs.
	every := sets{
		second: []int{0}, minute: all(0, 59), hour: all(0, 23), dom: all(1, 31),
		month: all(1, 12), dow: all(0, 6), domStar: true, dowStar: true,
	}
	with := func(f func(*sets)) sets {
		s := every
		f(&s)
		return s
	}
	tests := []struct {
		name   string
		expr   string
		want   sets
		string string
	}{
		{"all stars", "* * * * *", every, "* * * * *"},
		{"numbers", "5 4 3 2 1", with(func(s *sets) {
			s.minute, s.hour, s.dom, s.month, s.dow = []int{5}, []int{4}, []int{3}, []int{2}, []int{1}
			s.domStar, s.dowStar = false, false
		}), "5 4 3 2 1"},
		{"leading zeros", "05 007 * * *", with(func(s *sets) { s.minute, s.hour = []int{5}, []int{7} }), "05 007 * * *"},
		{"range", "10-12 * * * *", with(func(s *sets) { s.minute = []int{10, 11, 12} }), "10-12 * * * *"},
		{"star step", "*/15 * * * *", with(func(s *sets) { s.minute = []int{0, 15, 30, 45} }), "*/15 * * * *"},
		{"range step", "10-30/10 * * * *", with(func(s *sets) { s.minute = []int{10, 20, 30} }), "10-30/10 * * * *"},
		{"start step means start-max", "5/20 * * * *", with(func(s *sets) { s.minute = []int{5, 25, 45} }), "5/20 * * * *"},
		{"step equal to span", "*/60 * * * *", with(func(s *sets) { s.minute = []int{0} }), "*/60 * * * *"},
		{"list of forms", "1,2,5-7,50/5 * * * *", with(func(s *sets) { s.minute = []int{1, 2, 5, 6, 7, 50, 55} }), "1,2,5-7,50/5 * * * *"},
		{"hour step", "0 */6 * * *", with(func(s *sets) { s.minute, s.hour = []int{0}, []int{0, 6, 12, 18} }), "0 */6 * * *"},
		{"dom step counts as star", "0 0 */10 * *", with(func(s *sets) { s.minute, s.hour, s.dom = []int{0}, []int{0}, []int{1, 11, 21, 31} }), "0 0 */10 * *"},
		{"dom list is restricted", "0 0 1,15 * *", with(func(s *sets) {
			s.minute, s.hour, s.dom, s.domStar = []int{0}, []int{0}, []int{1, 15}, false
		}), "0 0 1,15 * *"},
		{"question mark dom", "0 0 ? * MON", with(func(s *sets) {
			s.minute, s.hour, s.dow, s.dowStar = []int{0}, []int{0}, []int{1}, false
		}), "0 0 ? * MON"},
		{"question mark dow", "0 0 1 * ?", with(func(s *sets) {
			s.minute, s.hour, s.dom, s.domStar = []int{0}, []int{0}, []int{1}, false
		}), "0 0 1 * ?"},
		{"sunday as 7", "0 0 * * 7", with(func(s *sets) { s.minute, s.hour, s.dow, s.dowStar = []int{0}, []int{0}, []int{0}, false }), "0 0 * * 7"},
		{"range to 7", "0 0 * * 5-7", with(func(s *sets) { s.minute, s.hour, s.dow, s.dowStar = []int{0}, []int{0}, []int{0, 5, 6}, false }), "0 0 * * 5-7"},
		{"range 1-7 is every day", "0 0 * * 1-7", with(func(s *sets) { s.minute, s.hour, s.dow, s.dowStar = []int{0}, []int{0}, all(0, 6), false }), "0 0 * * 1-7"},
		{"dow step 7 is sunday", "0 0 * * */7", with(func(s *sets) { s.minute, s.hour, s.dow = []int{0}, []int{0}, []int{0} }), "0 0 * * */7"},
		{"day names", "0 0 * * mon-Fri", with(func(s *sets) { s.minute, s.hour, s.dow, s.dowStar = []int{0}, []int{0}, all(1, 5), false }), "0 0 * * MON-FRI"},
		{"day name step runs to 7", "0 0 * * MON/2", with(func(s *sets) { s.minute, s.hour, s.dow, s.dowStar = []int{0}, []int{0}, []int{0, 1, 3, 5}, false }), "0 0 * * MON/2"},
		{"month names", "0 0 1 jan-MAR,Dec *", with(func(s *sets) {
			s.minute, s.hour, s.dom, s.month, s.domStar = []int{0}, []int{0}, []int{1}, []int{1, 2, 3, 12}, false
		}), "0 0 1 JAN-MAR,DEC *"},
		{"mixed name and number range", "0 0 * 2-APR SUN,6", with(func(s *sets) {
			s.minute, s.hour, s.month, s.dow, s.dowStar = []int{0}, []int{0}, []int{2, 3, 4}, []int{0, 6}, false
		}), "0 0 * 2-APR SUN,6"},
		{"seconds field", "*/20 30 9 * * *", with(func(s *sets) {
			s.second, s.minute, s.hour = []int{0, 20, 40}, []int{30}, []int{9}
		}), "*/20 30 9 * * *"},
		{"white space", " \t0\t0   1  1 *  ", with(func(s *sets) {
			s.minute, s.hour, s.dom, s.month, s.domStar = []int{0}, []int{0}, []int{1}, []int{1}, false
		}), "0 0 1 1 *"},
		{"february 29th", "0 0 29 2 *", with(func(s *sets) {
			s.minute, s.hour, s.dom, s.month, s.domStar = []int{0}, []int{0}, []int{29}, []int{2}, false
		}), "0 0 29 2 *"},
		{"impossible day rescued by OR", "0 0 31 4,6,9,11 MON", with(func(s *sets) {
			s.minute, s.hour, s.dom, s.month, s.dow = []int{0}, []int{0}, []int{31}, []int{4, 6, 9, 11}, []int{1}
			s.domStar, s.dowStar = false, false
		}), "0 0 31 4,6,9,11 MON"},
		{"@yearly", "@yearly", with(func(s *sets) {
			s.minute, s.hour, s.dom, s.month, s.domStar = []int{0}, []int{0}, []int{1}, []int{1}, false
		}), "@yearly"},
		{"@annually upper case", " @ANNUALLY ", with(func(s *sets) {
			s.minute, s.hour, s.dom, s.month, s.domStar = []int{0}, []int{0}, []int{1}, []int{1}, false
		}), "@annually"},
		{"@monthly", "@monthly", with(func(s *sets) { s.minute, s.hour, s.dom, s.domStar = []int{0}, []int{0}, []int{1}, false }), "@monthly"},
		{"@weekly", "@Weekly", with(func(s *sets) { s.minute, s.hour, s.dow, s.dowStar = []int{0}, []int{0}, []int{0}, false }), "@weekly"},
		{"@daily", "@daily", with(func(s *sets) { s.minute, s.hour = []int{0}, []int{0} }), "@daily"},
		{"@midnight", "@midnight", with(func(s *sets) { s.minute, s.hour = []int{0}, []int{0} }), "@midnight"},
		{"@hourly", "@hourly", with(func(s *sets) { s.minute = []int{0} }), "@hourly"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := ParseCron(tt.expr)
			require.NoError(t, err)
			got := sets{
				second: setValues(c.second), minute: setValues(c.minute), hour: setValues(c.hour),
				dom: setValues(c.dom), month: setValues(c.month), dow: setValues(c.dow),
				domStar: c.domStar, dowStar: c.dowStar,
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.string, c.String())

			again, err := ParseCron(c.String())
			require.NoError(t, err)
			require.Equal(t, c, again, "String must parse back to the same Cron")
		})
	}
}

func TestParseCronInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		expr   string
		field  string
		reason string // substring of Reason
	}{
		{"empty", "", "expression", "empty"},
		{"blank", " \t ", "expression", "empty"},
		{"too few fields", "* * * *", "expression", "4 fields"},
		{"too many fields", "* * * * * * *", "expression", "7 fields"},
		{"too long", "0 0 * * " + strings.Repeat("1,", 130) + "1", "expression", "longer than 256"},
		{"newline is not a separator", "0 0 * *\n*", "expression", "4 fields"},
		{"@every", "@every 5m", "expression", "@every"},
		{"@reboot", "@reboot", "expression", "unknown macro"},
		{"unknown macro", "@fortnightly", "expression", "unknown macro"},
		{"macro with fields", "@daily 5", "expression", "takes no fields"},
		{"TZ prefix", "TZ=UTC 0 0 * * *", "expression", "time zone"},
		{"CRON_TZ prefix", "cron_tz=Europe/Berlin 0 0 * * *", "expression", "time zone"},
		{"february 30th", "0 0 30 2 *", "expression", "never fire"},
		{"31st of short months", "0 0 31 4,6,9,11 *", "expression", "never fire"},
		{"february 30th with star dow step", "0 0 30,31 2 */2", "expression", "never fire"},
		{"second out of range", "60 * * * * *", "second", "out of range 0-59"},
		{"minute out of range", "60 * * * *", "minute", "out of range 0-59"},
		{"hour out of range", "0 24 * * *", "hour", "out of range 0-23"},
		{"day 0", "0 0 0 * *", "day-of-month", "out of range 1-31"},
		{"day 32", "0 0 32 * *", "day-of-month", "out of range 1-31"},
		{"month 0", "0 0 * 0 *", "month", "out of range 1-12"},
		{"month 13", "0 0 * 13 *", "month", "out of range 1-12"},
		{"dow 8", "0 0 * * 8", "day-of-week", "out of range 0-7"},
		{"huge number", "99999999999999999999999 * * * *", "minute", "out of range"},
		{"negative number", "-1 * * * *", "minute", "negative"},
		{"negative range end", "1--2 * * * *", "minute", "negative"},
		{"plus sign", "+5 * * * *", "minute", "not a number"},
		{"number with junk", "5x * * * *", "minute", "not a number"},
		{"decimal", "1.5 * * * *", "minute", "not a number"},
		{"letters", "a * * * *", "minute", "not a number"},
		{"name in hour", "0 JAN * * *", "hour", "not a number"},
		{"day name in month", "0 0 * MON *", "month", "not a number or a name"},
		{"month name in dow", "0 0 * * JAN", "day-of-week", "not a number or a name"},
		{"full day name", "0 0 * * MONDAY", "day-of-week", "not a number or a name"},
		{"backwards range", "30-10 * * * *", "minute", "backwards"},
		{"backwards day names", "0 0 * * FRI-MON", "day-of-week", "backwards"},
		{"wrap to sunday", "0 0 * * MON-SUN", "day-of-week", "backwards"},
		{"missing range end", "5- * * * *", "minute", "missing value"},
		{"double range", "1-2-3 * * * *", "minute", "not a number"},
		{"step 0", "*/0 * * * *", "minute", "between 1 and 60"},
		{"step beyond span", "*/61 * * * *", "minute", "between 1 and 60"},
		{"hour step beyond span", "0 */25 * * *", "hour", "between 1 and 24"},
		{"missing step", "*/ * * * *", "minute", "missing step"},
		{"missing step base", "/5 * * * *", "minute", "missing value"},
		{"double step", "1/2/3 * * * *", "minute", "not a number"},
		{"step with junk", "*/5x * * * *", "minute", "not a number"},
		{"name as step", "0 0 * * */MON", "day-of-week", "not a number"},
		{"empty list item", "1,,2 * * * *", "minute", "empty list item"},
		{"trailing comma", "0 0 1, * *", "day-of-month", "empty list item"},
		{"leading comma", "0 0 * ,1 *", "month", "empty list item"},
		{"question mark in minute", "? * * * *", "minute", "only allowed"},
		{"question mark in month", "0 0 * ? *", "month", "only allowed"},
		{"double star", "** * * * *", "minute", "not a number"},
		{"star range", "*-5 * * * *", "minute", "not a number"},
		{"L in minute", "L * * * *", "minute", "not a number"},
		{"W in hour", "0 15W * * *", "hour", "not a number"},
		{"# in day-of-month", "0 0 1#2 * *", "day-of-month", "belongs in day-of-week"},
		{"L with a step", "0 0 L/2 * *", "day-of-month", "takes no range or step"},
		{"L in a range", "0 0 1-L * *", "day-of-month", "takes no range or step"},
		{"L offset too large", "0 0 L-31 * *", "day-of-month", "between 0 and 30"},
		{"L offset not a number", "0 0 L-x * *", "day-of-month", "not a number"},
		{"L offset with W", "0 0 L-3W * *", "day-of-month", "not a number"},
		{"W on a range", "0 0 1-5W * *", "day-of-month", "single day"},
		{"W on a step", "0 0 */5W * *", "day-of-month", "single day"},
		{"W alone", "0 0 W * *", "day-of-month", "missing value"},
		{"W day 0", "0 0 0W * *", "day-of-month", "out of range 1-31"},
		{"W day 32", "0 0 32W * *", "day-of-month", "out of range 1-31"},
		{"W in day-of-week", "0 0 * * 5W", "day-of-week", "not a number"},
		{"L alone in day-of-week", "0 0 * * L", "day-of-week", "ambiguous"},
		{"L on a day-of-week range", "0 0 * * 1-5L", "day-of-week", "single weekday"},
		{"L on day-of-week 8", "0 0 * * 8L", "day-of-week", "out of range 0-7"},
		{"# on a range", "0 0 * * 1-5#2", "day-of-week", "single weekday"},
		{"# occurrence 0", "0 0 * * 1#0", "day-of-week", "between 1 and 5"},
		{"# occurrence 6", "0 0 * * MON#6", "day-of-week", "between 1 and 5"},
		{"# without occurrence", "0 0 * * 1#", "day-of-week", "missing occurrence"},
		{"# without weekday", "0 0 * * #2", "day-of-week", "missing value"},
		{"# with L", "0 0 * * 5#L", "day-of-week", "not a number"},
		{"# on a step", "0 0 * * */2#1", "day-of-week", "single weekday"},
		{"second Friday on days 1 and 21", "0 0 */20 * 5#2", "expression", "never fire"},
		{"fifth Friday of February on the 1st", "0 0 */30 2 5#5", "expression", "never fire"},
		{"L-30 in 30-day months", "0 0 L-30 4,6,9,11 *", "expression", "never fire"},
		{"31W in short months", "0 0 31W 2,4 *", "expression", "never fire"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := ParseCron(tt.expr)
			require.Nil(t, c)
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tt.field, pe.Field, pe.Error())
			require.Contains(t, pe.Reason, tt.reason)
			require.Equal(t, tt.reason == "never fire", errors.Is(err, ErrNeverFires))
			require.Contains(t, err.Error(), tt.field)
		})
	}
}

func TestParseErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := ParseCron("0 0 1,x * *")
	require.EqualError(t, err, `invalid day-of-month "1,x": "x" is not a number`)
	_, err = ParseCron("0 0 30 2 *")
	require.EqualError(t, err, `invalid expression "0 0 30 2 *": can never fire: no selected month has any of the selected days of the month`)
}

// TestDayMatching checks Vixie's rule: OR when both day fields are
// restricted, AND when either starts with '*'. July 2026 starts on a
// Wednesday; August 1st is a Saturday and September 1st a Tuesday.
func TestDayMatching(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		expr string
		want []string
	}{
		{"dom and dow restricted: either", "0 0 1,15 * MON", []string{
			"2026-07-01T00:00:00Z", "2026-07-06T00:00:00Z", "2026-07-13T00:00:00Z", "2026-07-15T00:00:00Z",
			"2026-07-20T00:00:00Z", "2026-07-27T00:00:00Z", "2026-08-01T00:00:00Z", "2026-08-03T00:00:00Z",
		}},
		{"only dow restricted", "0 0 * * MON", []string{
			"2026-07-06T00:00:00Z", "2026-07-13T00:00:00Z", "2026-07-20T00:00:00Z", "2026-07-27T00:00:00Z",
			"2026-08-03T00:00:00Z", "2026-08-10T00:00:00Z", "2026-08-17T00:00:00Z", "2026-08-24T00:00:00Z",
		}},
		{"only dom restricted", "0 0 1 * *", []string{
			"2026-07-01T00:00:00Z", "2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z",
			"2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z",
		}},
		{"friday or the 13th", "0 0 13 * FRI", []string{
			"2026-07-03T00:00:00Z", "2026-07-10T00:00:00Z", "2026-07-13T00:00:00Z", "2026-07-17T00:00:00Z",
			"2026-07-24T00:00:00Z", "2026-07-31T00:00:00Z", "2026-08-07T00:00:00Z", "2026-08-13T00:00:00Z",
		}},
		// dom */10 is a star: days 1, 11, 21, 31 that are also Mondays.
		{"dom star step: both", "0 0 */10 * MON", []string{
			"2026-08-31T00:00:00Z", "2026-09-21T00:00:00Z", "2026-12-21T00:00:00Z",
			"2027-01-11T00:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z",
		}},
		{"question mark dom: dow only", "0 0 ? * 7", []string{
			"2026-07-05T00:00:00Z", "2026-07-12T00:00:00Z",
		}},
	}
	after := ts("2026-06-30T12:00:00Z")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewCron(mustCron(t, tt.expr), nil)
			require.Equal(t, tt.want, utcStrings(s.NextN(after, len(tt.want))))
		})
	}
}

// TestCanFireMatchesCalendar cross-checks the "can never fire" rule against
// a brute-force walk over 28 years (every date on every weekday) for all
// single-month, single-day AND expressions.
func TestCanFireMatchesCalendar(t *testing.T) {
	t.Parallel()
	for m := 1; m <= 12; m++ {
		for d := 28; d <= 31; d++ {
			exists := false
			for day := ts("2000-01-01T00:00:00Z"); day.Year() < 2028; day = day.AddDate(0, 0, 1) {
				if int(day.Month()) == m && day.Day() == d {
					exists = true
					break
				}
			}
			expr := fmt.Sprintf("0 0 %d %d *", d, m)
			_, err := ParseCron(expr)
			require.Equal(t, exists, err == nil, expr)
		}
	}
}
