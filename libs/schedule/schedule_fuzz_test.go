package schedule

import (
	"errors"
	"testing"
	"time"
)

// FuzzParseCron checks that ParseCron never panics, fails only with a
// *ParseError, and that whatever it accepts yields sane Next results in UTC
// and in a daylight-saving zone.
func FuzzParseCron(f *testing.F) {
	for _, seed := range []string{
		"* * * * *", "*/15 * * * *", "0 9 * * 1-5", "0 9 * * MON-FRI", "30 2 * * *",
		"0,30 * * * *", "0 0 29 2 *", "0 0 1,15 * MON", "0 0 */10 * MON", "0 0 ? * 7",
		"*/20 30 9 * * *", "59 59 23 31 12 *", "5/20 10-30/10 1,2 jan-mar sun",
		"@yearly", "@Hourly", "@weekly",
		"0 0 L * *", "0 0 L-3 * *", "0 0 LW * *", "0 0 15W * *", "0 0 1W,31W * *", "0 0 * * 5L",
		"0 0 ? * FRI#2,monl", "0 0 * * 5#5", "0 0 L * 5L", "0 0 */10 * 5#2", "30 2 * 3 0L",
		"0 0 * * L", "0 0 L-31 * *", "0 0 1-5W * *", "0 0 * * 1#6", "0 0 */20 * 5#2", "0 0 L/2 * *",
		"", "* * * *", "60 * * * *", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "*/0 * * * *",
		"1,,2 * * * *", "-1 * * * *", "@every 5m", "TZ=UTC * * * * *", "0 0 * * FRI-MON",
		"99999999999999999999 * * * *", "\x00 * * * *",
	} {
		f.Add(seed)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		f.Fatal(err)
	}
	// Just before Berlin's autumn change, so expressions meet both a
	// repeated hour and ordinary days.
	from := time.Date(2026, 10, 24, 23, 59, 30, 500, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		c, err := ParseCron(expr)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || c != nil {
				t.Fatalf("ParseCron(%q) = %v, %v; want nil and a *ParseError", expr, c, err)
			}
			return
		}
		for _, loc := range []*time.Location{time.UTC, berlin} {
			s := NewCron(c, loc)
			if next, ok := s.Next(from); ok && !next.After(from) {
				t.Fatalf("%q in %s: Next(%s) = %s, not after", expr, loc, from, next)
			}
			prev := from
			for _, next := range s.NextN(from, 5) {
				if !next.After(prev) {
					t.Fatalf("%q in %s: NextN not strictly increasing: %s then %s", expr, loc, prev, next)
				}
				prev = next
			}
		}
	})
}
