package schedule

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuartzForms pins the Quartz day forms on dates worked out by hand.
// 2026 starts on a Thursday: January 31st and February 28th are Saturdays,
// February 1st, March 1st, February 15th, March 15th and May 31st Sundays,
// August 1st and 15th Saturdays.
func TestQuartzForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		expr string
		zone string
		want []string
	}{
		{"last day", "0 0 L * *", "UTC", []string{
			"2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z",
		}},
		{"three days before the last, leap February", "0 0 L-3 2 *", "UTC", []string{
			"2026-02-25T00:00:00Z", "2027-02-25T00:00:00Z", "2028-02-26T00:00:00Z",
		}},
		{"L-0 is L", "0 0 l-0 1 *", "UTC", []string{"2026-01-31T00:00:00Z", "2027-01-31T00:00:00Z"}},
		{"L-30 only in 31-day months", "0 0 L-30 * *", "UTC", []string{
			"2026-01-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-05-01T00:00:00Z", "2026-07-01T00:00:00Z",
		}},
		{"last weekday: Saturday and Sunday move back", "0 0 LW * *", "UTC", []string{
			"2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z",
			"2026-05-29T00:00:00Z",
		}},
		{"nearest weekday to the 15th", "0 0 15W * *", "UTC", []string{
			"2026-01-15T00:00:00Z", "2026-02-16T00:00:00Z", "2026-03-16T00:00:00Z", "2026-04-15T00:00:00Z",
			"2026-05-15T00:00:00Z", "2026-06-15T00:00:00Z", "2026-07-15T00:00:00Z", "2026-08-14T00:00:00Z",
		}},
		{"1W does not leave the month", "0 0 1w 2,3,8 *", "UTC", []string{
			"2026-02-02T00:00:00Z", "2026-03-02T00:00:00Z", "2026-08-03T00:00:00Z",
		}},
		{"31W: a Saturday moves back, a Sunday last day too, short months skipped", "0 0 31W * *", "UTC", []string{
			"2026-01-30T00:00:00Z", "2026-03-31T00:00:00Z", "2026-05-29T00:00:00Z", "2026-07-31T00:00:00Z",
		}},
		{"last Friday", "0 0 * * 5L", "UTC", []string{
			"2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-27T00:00:00Z", "2026-04-24T00:00:00Z",
		}},
		{"last Sunday, as 7 and by name", "0 0 * * 7L,sunL", "UTC", []string{
			"2026-01-25T00:00:00Z", "2026-02-22T00:00:00Z", "2026-03-29T00:00:00Z", "2026-04-26T00:00:00Z",
		}},
		{"second Monday", "0 0 * * MON#2", "UTC", []string{
			"2026-01-12T00:00:00Z", "2026-02-09T00:00:00Z", "2026-03-09T00:00:00Z", "2026-04-13T00:00:00Z",
		}},
		{"fifth Friday only in months that have one", "0 0 * * 5#5", "UTC", []string{
			"2026-01-30T00:00:00Z", "2026-05-29T00:00:00Z", "2026-07-31T00:00:00Z", "2026-10-30T00:00:00Z",
		}},
		{"list of forms", "0 0 1,L * *", "UTC", []string{
			"2026-01-01T00:00:00Z", "2026-01-31T00:00:00Z", "2026-02-01T00:00:00Z", "2026-02-28T00:00:00Z",
		}},
		{"second Monday and last Friday", "0 0 ? * 1#2,5L", "UTC", []string{
			"2026-01-12T00:00:00Z", "2026-01-30T00:00:00Z", "2026-02-09T00:00:00Z", "2026-02-27T00:00:00Z",
		}},
		// Both day fields restricted: Vixie's OR, as for any other item.
		{"last day or last Friday", "0 0 L * 5L", "UTC", []string{
			"2026-01-30T00:00:00Z", "2026-01-31T00:00:00Z", "2026-02-27T00:00:00Z", "2026-02-28T00:00:00Z",
		}},
		{"the 13th or the second Friday", "0 0 13 * 5#2", "UTC", []string{
			"2026-01-09T00:00:00Z", "2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z", "2026-03-13T00:00:00Z",
		}},
		// A day field starting with '*' makes it AND: days 1, 11, 21, 31
		// that are a second Friday (8th-14th), so only the 11th.
		{"star step and second Friday", "0 0 */10 * 5#2", "UTC", []string{
			"2026-09-11T00:00:00Z", "2026-12-11T00:00:00Z", "2027-06-11T00:00:00Z", "2028-02-11T00:00:00Z",
		}},
		// The last Sunday of March is Berlin's spring-forward day: 02:30
		// does not exist and fires at 03:00 CEST.
		{"last Sunday of March in the gap", "30 2 * 3 0L", "Europe/Berlin", []string{
			"2026-03-29T01:00:00Z", "2027-03-28T01:00:00Z",
		}},
		{"last Sunday of October in the repeated hour", "30 2 * 10 SUNL", "Europe/Berlin", []string{
			"2026-10-25T00:30:00Z", "2027-10-31T00:30:00Z",
		}},
	}
	after := ts("2025-12-31T23:00:00Z")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewCron(mustCron(t, tt.expr), loadLocation(t, tt.zone))
			require.Equal(t, tt.want, utcStrings(s.NextN(after, len(tt.want))))
		})
	}
}

// TestQuartzString checks that the normalized expression upper-cases the
// forms and parses back to the same Cron.
func TestQuartzString(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		"0 0 l-3,lw,15w * *": "0 0 L-3,LW,15W * *",
		"0 0 ? * fri#2,monl": "0 0 ? * FRI#2,MONL",
		"0 0 1,L * 5L":       "0 0 1,L * 5L",
	} {
		c := mustCron(t, expr)
		require.Equal(t, want, c.String())
		require.Equal(t, c, mustCron(t, c.String()), expr)
	}
}
