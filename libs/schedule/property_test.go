package schedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// refCron is a random cron expression together with the sets it means,
// computed by the generator itself rather than by the parser, so that the
// property tests check the parser and Next against an independent model.
type refCron struct {
	expr string
	// sets are indexed second, minute, hour, dom, month, dow.
	sets             [6][64]bool
	domStar, dowStar bool
	q                refQuartz
	// nearest memoizes nearestWorkday, which the brute-force walks would
	// otherwise recompute for every minute.
	nearest map[[3]int]int
}

// refQuartz is the generator's record of the Quartz items it wrote.
type refQuartz struct {
	fromLast    [31]bool // L-n: fromLast[n]
	lastWeekday bool     // LW
	nearest     [32]bool // dW: nearest[d]
	lastOf      [7]bool  // wL: lastOf[w]
	nth         [7][6]bool
}

// density is the probability that the generator writes a field as a star.
type density [6]float64

// genCron writes a random valid-syntax expression. withSeconds adds the
// seconds field; otherwise the second set is {0}.
func genCron(r *rand.Rand, withSeconds bool, d density) refCron {
	specs := [6]*fieldSpec{&secondSpec, &minuteSpec, &hourSpec, &domSpec, &monthSpec, &dowSpec}
	var ref refCron
	var parts []string
	for i, spec := range specs {
		if i == 0 && !withSeconds {
			ref.sets[0][0] = true
			continue
		}
		var q *refQuartz
		if spec.question {
			q = &ref.q
		}
		text, star := genField(r, spec, d[i], &ref.sets[i], q)
		parts = append(parts, text)
		if i == 3 {
			ref.domStar = star
		}
		if i == 5 {
			ref.dowStar = star
			if ref.sets[5][7] {
				ref.sets[5][0] = true
				ref.sets[5][7] = false
			}
		}
	}
	sep := []string{" ", "  ", "\t"}
	ref.expr = strings.Join(parts, sep[r.IntN(len(sep))])
	return ref
}

// genField writes one field. For the day fields q is non-nil, and some items
// are Quartz forms recorded there.
func genField(r *rand.Rand, spec *fieldSpec, starProb float64, set *[64]bool, q *refQuartz) (string, bool) {
	span := spec.max - spec.min + 1
	mark := func(lo, hi, step int) {
		for v := lo; v <= hi; v += step {
			set[v] = true
		}
	}
	value := func(v int) string {
		if spec.names != nil && v-spec.nameBase < len(spec.names) && r.IntN(3) == 0 {
			name := spec.names[v-spec.nameBase]
			if r.IntN(2) == 0 {
				name = strings.ToLower(name)
			}
			return name
		}
		return fmt.Sprint(v)
	}
	if r.Float64() < starProb {
		star := "*"
		if spec.question && r.IntN(4) == 0 {
			star = "?"
		}
		if r.IntN(3) == 0 {
			step := 1 + r.IntN(span)
			mark(spec.min, spec.max, step)
			return fmt.Sprintf("%s/%d", star, step), true
		}
		mark(spec.min, spec.max, 1)
		return star, true
	}
	items := make([]string, 1+r.IntN(3))
	for i := range items {
		a := spec.min + r.IntN(span)
		b := a + r.IntN(spec.max-a+1)
		step := 1 + r.IntN(span)
		if q != nil && r.IntN(3) == 0 {
			items[i] = genQuartz(r, spec, q)
			continue
		}
		switch r.IntN(5) {
		case 0, 1:
			items[i] = value(a)
			mark(a, a, 1)
		case 2:
			items[i] = value(a) + "-" + value(b)
			mark(a, b, 1)
		case 3:
			items[i] = fmt.Sprintf("%s-%s/%d", value(a), value(b), step)
			mark(a, b, step)
		default:
			items[i] = fmt.Sprintf("%s/%d", value(a), step)
			mark(a, spec.max, step)
		}
	}
	return strings.Join(items, ","), false
}

// genQuartz writes one Quartz item of a day field and records it in q.
func genQuartz(r *rand.Rand, spec *fieldSpec, q *refQuartz) string {
	var item string
	if spec == &domSpec {
		switch r.IntN(4) {
		case 0:
			item = "L"
			q.fromLast[0] = true
		case 1:
			n := r.IntN(31)
			item = fmt.Sprintf("L-%d", n)
			q.fromLast[n] = true
		case 2:
			item = "LW"
			q.lastWeekday = true
		default:
			d := 1 + r.IntN(31)
			item = fmt.Sprintf("%dW", d)
			q.nearest[d] = true
		}
	} else {
		w := r.IntN(8)
		day := fmt.Sprint(w)
		if w < 7 && r.IntN(3) == 0 {
			day = spec.names[w]
		}
		if r.IntN(2) == 0 {
			item = day + "L"
			q.lastOf[w%7] = true
		} else {
			k := 1 + r.IntN(5)
			item = fmt.Sprintf("%s#%d", day, k)
			q.nth[w%7][k] = true
		}
	}
	if r.IntN(3) == 0 {
		item = strings.ToLower(item)
	}
	return item
}

// nearestWorkday returns the Monday-to-Friday day of month m of year y
// closest to day n, searching the month's days by distance; this is the
// definition of W, written independently of the package's rule.
func (ref *refCron) nearestWorkday(y int, m time.Month, n int) int {
	key := [3]int{y, int(m), n}
	if d, ok := ref.nearest[key]; ok {
		return d
	}
	best := 0
	for d := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC); d.Month() == m; d = d.AddDate(0, 0, 1) {
		if wd := d.Weekday(); wd == time.Saturday || wd == time.Sunday {
			continue
		}
		if best == 0 || abs(d.Day()-n) < abs(best-n) {
			best = d.Day()
		}
	}
	if ref.nearest == nil {
		ref.nearest = make(map[[3]int]int)
	}
	ref.nearest[key] = best
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// matchesDay applies Vixie's day rule to the reference sets of the date of
// t, the Quartz items joining their field first.
func (ref *refCron) matchesDay(t time.Time) bool {
	y, month, day := t.Date()
	if !ref.sets[4][month] {
		return false
	}
	wd := t.Weekday()
	dom, dow := ref.sets[3][day], ref.sets[5][wd]
	if ref.q != (refQuartz{}) {
		last := time.Date(y, month+1, 0, 0, 0, 0, 0, time.UTC).Day()
		dom = dom || ref.q.fromLast[last-day] ||
			ref.q.lastWeekday && day == ref.nearestWorkday(y, month, last)
		for n := 1; n <= last && !dom; n++ {
			dom = ref.q.nearest[n] && day == ref.nearestWorkday(y, month, n)
		}
		dow = dow || ref.q.lastOf[wd] && day+7 > last || ref.q.nth[wd][(day-1)/7+1]
	}
	if ref.domStar || ref.dowStar {
		return dom && dow
	}
	return dom || dow
}

// matchesWall reports whether the wall clock reading of t matches.
func (ref *refCron) matchesWall(t time.Time) bool {
	return ref.sets[0][t.Second()] && ref.sets[1][t.Minute()] && ref.sets[2][t.Hour()] &&
		ref.matchesDay(t)
}

// canFire walks 28 years, which put every date on every weekday.
func (ref *refCron) canFire() bool {
	for day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC); day.Year() < 2028; day = day.AddDate(0, 0, 1) {
		if ref.matchesDay(day) {
			return true
		}
	}
	return false
}

func wallSeconds(t time.Time) int64 {
	_, off := t.Zone()
	return t.Unix() + int64(off)
}

// isFirstOccurrence reports that no earlier instant up to 3 hours back (real
// shifts are multiples of 15 minutes) shows the same wall clock reading.
func isFirstOccurrence(t time.Time) bool {
	for back := 15 * time.Minute; back <= 3*time.Hour; back += 15 * time.Minute {
		if wallSeconds(t.Add(-back)) == wallSeconds(t) {
			return false
		}
	}
	return true
}

// gapBefore returns the wall times skipped just before t, [from, to) in wall
// seconds, when the clocks jump forward at t; ok is false otherwise.
func gapBefore(t time.Time) (from, to int64, ok bool) {
	_, now := t.Zone()
	_, prev := t.Add(-time.Second).Zone()
	if now <= prev {
		return 0, 0, false
	}
	return t.Unix() + int64(prev), t.Unix() + int64(now), true
}

// bruteForce lists, step seconds at a time, the instants in [from, to) at
// which the product promise says ref fires in loc: the first occurrence of
// a matching wall time, or a transition instant ending a gap in which some
// wall time matches. It never uses the package's search or zone mapping.
func bruteForce(ref *refCron, loc *time.Location, from, to time.Time, step time.Duration) []time.Time {
	var out []time.Time
	for t := from.In(loc); t.Before(to); t = t.Add(step) {
		fires := ref.matchesWall(t) && isFirstOccurrence(t)
		if gapFrom, gapTo, ok := gapBefore(t); ok && !fires {
			for w := gapFrom; w < gapTo && !fires; w += int64(step / time.Second) {
				fires = ref.matchesWall(time.Unix(w, 0).UTC())
			}
		}
		if fires {
			out = append(out, t)
		}
	}
	return out
}

// nextUntil collects Next results from just before from up to to.
func nextUntil(s Schedule, from, to time.Time) []time.Time {
	var out []time.Time
	after := from.Add(-time.Nanosecond)
	for {
		next, ok := s.Next(after)
		if !ok || !next.Before(to) {
			return out
		}
		out = append(out, next)
		after = next
	}
}

// checkRandomAfters asks Next from random instants in [from, to), which in
// the transition windows include instants in the second pass of a repeated
// hour, and compares with the first brute-force firing after each.
func checkRandomAfters(t *testing.T, r *rand.Rand, s Schedule, want []time.Time, from, to time.Time, what string) {
	t.Helper()
	for range 30 {
		after := from.Add(time.Duration(r.Int64N(int64(to.Sub(from)))))
		got, ok := s.Next(after)
		for _, w := range want {
			if w.After(after) {
				require.True(t, ok, "%s after %s", what, after)
				require.Equal(t, utcStrings([]time.Time{w}), utcStrings([]time.Time{got}), "%s after %s", what, after)
				break
			}
		}
		if len(want) == 0 || !want[len(want)-1].After(after) {
			require.True(t, !ok || !got.Before(to), "%s after %s: unexpected %s", what, after, got)
		}
	}
}

type window struct {
	zone     string
	from, to string
}

// dstWindows straddle the 2026 transitions of zones with 1-hour and 30-minute
// shifts, in both directions.
var dstWindows = [...]window{
	{"Europe/Berlin", "2026-03-28T00:00:00Z", "2026-03-30T00:00:00Z"},
	{"Europe/Berlin", "2026-10-24T00:00:00Z", "2026-10-26T00:00:00Z"},
	{"America/New_York", "2026-03-07T12:00:00Z", "2026-03-09T12:00:00Z"},
	{"America/New_York", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z"},
	{"Australia/Lord_Howe", "2026-04-03T12:00:00Z", "2026-04-05T12:00:00Z"},
	{"Australia/Lord_Howe", "2026-10-02T12:00:00Z", "2026-10-04T12:00:00Z"},
}

// TestPropertyRandomExpressions checks the parser's sets against the
// generator's, the never-fires rule against a calendar walk, and properties
// of NextN from random instants in several zones.
func TestPropertyRandomExpressions(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{
		time.UTC,
		loadLocation(t, "Europe/Berlin"),
		loadLocation(t, "America/New_York"),
		loadLocation(t, "Australia/Lord_Howe"),
		loadLocation(t, "Asia/Kathmandu"),
	}
	base := ts("2020-01-01T00:00:00Z").Unix()
	for i := range 600 {
		ref := genCron(r, i%3 == 0, density{0.5, 0.5, 0.5, 0.5, 0.6, 0.5})
		c, err := ParseCron(ref.expr)
		if !ref.canFire() {
			var pe *ParseError
			require.ErrorAs(t, err, &pe, ref.expr)
			require.Equal(t, "expression", pe.Field, ref.expr)
			continue
		}
		require.NoError(t, err, ref.expr)
		got := [6]uint64{c.second, c.minute, c.hour, c.dom, c.month, c.dow}
		for f := range got {
			for v := range 64 {
				require.Equal(t, ref.sets[f][v], got[f]&(1<<v) != 0, "%q field %d value %d", ref.expr, f, v)
			}
		}
		require.Equal(t, [2]bool{ref.domStar, ref.dowStar}, [2]bool{c.domStar, c.dowStar}, ref.expr)

		for _, loc := range zones {
			after := time.Unix(base+r.Int64N(10*365*secondsPerDay), r.Int64N(1e9))
			s := NewCron(c, loc)
			prev := after
			for _, next := range s.NextN(after, 20) {
				require.True(t, next.After(prev), "%q in %s after %s: %s not after %s", ref.expr, loc, after, next, prev)
				_, _, isGap := gapBefore(next)
				require.True(t, ref.matchesWall(next) || isGap, "%q in %s: %s does not match", ref.expr, loc, next)
				require.True(t, isFirstOccurrence(next), "%q in %s: %s is a second pass", ref.expr, loc, next)
				prev = next
			}
		}
	}
}

// TestBruteForceMinutes compares Next with a minute-by-minute walk for
// 5-field expressions, in UTC and across daylight-saving transitions.
func TestBruteForceMinutes(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	windows := dstWindows[:]
	checked, fired := 0, 0
	for checked < 150 {
		ref := genCron(r, false, density{0, 0.3, 0.4, 0.7, 0.9, 0.7})
		if !ref.canFire() {
			continue
		}
		checked++
		c := mustCron(t, ref.expr)
		utcFrom := ts("2020-01-01T00:00:00Z").Add(time.Duration(r.IntN(10*365*24*60)) * time.Minute)
		all := append([]window{{"UTC", utcFrom.Format(time.RFC3339), utcFrom.Add(48 * time.Hour).Format(time.RFC3339)}}, windows...)
		for _, w := range all {
			loc := loadLocation(t, w.zone)
			from, to := ts(w.from), ts(w.to)
			want := bruteForce(&ref, loc, from, to, time.Minute)
			got := nextUntil(NewCron(c, loc), from, to)
			require.Equal(t, utcStrings(want), utcStrings(got), "%q in %s", ref.expr, w.zone)
			checkRandomAfters(t, r, NewCron(c, loc), want, from, to, fmt.Sprintf("%q in %s", ref.expr, w.zone))
			fired += len(want)
		}
	}
	require.Greater(t, fired, 1000, "the generator must produce expressions that fire in the windows")
}

// TestBruteForceSeconds does the same second by second for 6-field
// expressions over a few hours around the transitions.
func TestBruteForceSeconds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	windows := []window{
		{"UTC", "2026-05-01T22:30:00Z", "2026-05-02T01:30:00Z"},
		{"Europe/Berlin", "2026-03-29T00:00:00Z", "2026-03-29T02:30:00Z"},
		{"Europe/Berlin", "2026-10-24T23:30:00Z", "2026-10-25T02:30:00Z"},
		{"Australia/Lord_Howe", "2026-04-04T14:00:00Z", "2026-04-04T16:00:00Z"},
		{"Australia/Lord_Howe", "2026-10-03T14:45:00Z", "2026-10-03T16:15:00Z"},
	}
	checked, fired := 0, 0
	for checked < 40 {
		ref := genCron(r, true, density{0.3, 0.4, 0.8, 1, 1, 1})
		checked++
		c := mustCron(t, ref.expr)
		for _, w := range windows {
			loc := loadLocation(t, w.zone)
			from, to := ts(w.from), ts(w.to)
			want := bruteForce(&ref, loc, from, to, time.Second)
			got := nextUntil(NewCron(c, loc), from, to)
			require.Equal(t, utcStrings(want), utcStrings(got), "%q in %s", ref.expr, w.zone)
			checkRandomAfters(t, r, NewCron(c, loc), want, from, to, fmt.Sprintf("%q in %s", ref.expr, w.zone))
			fired += len(want)
		}
	}
	require.Greater(t, fired, 1000, "the generator must produce expressions that fire in the windows")
}
