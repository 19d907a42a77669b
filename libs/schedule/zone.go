package schedule

import (
	"math"
	"time"
)

// maxOffsetJump bounds the difference between the UTC offsets of two
// consecutive zone periods. Real shifts are at most a day (Samoa skipped
// 2011-12-30); twice that leaves a margin. An instant farther than this from
// the start of its zone period cannot share its wall time with an instant of
// an earlier period.
const maxOffsetJump = 2 * secondsPerDay

// zonePeriod is the zone period containing an instant: its UTC offset in
// seconds and its bounds [start, end) in Unix seconds (math.MinInt64 and
// math.MaxInt64 when unbounded).
type zonePeriod struct {
	offset, start, end int64
}

func periodAt(loc *time.Location, unix int64) zonePeriod {
	t := time.Unix(unix, 0).In(loc)
	_, off := t.Zone()
	p := zonePeriod{offset: int64(off), start: math.MinInt64, end: math.MaxInt64}
	start, end := t.ZoneBounds()
	if !start.IsZero() {
		p.start = start.Unix()
	}
	if !end.IsZero() {
		p.end = end.Unix()
	}
	return p
}

func offsetAt(loc *time.Location, unix int64) int64 {
	_, off := time.Unix(unix, 0).In(loc).Zone()
	return int64(off)
}

// civilToInstant maps a wall time (civil seconds) in loc to the Unix second at
// which a slot with that wall time fires:
//   - a wall time that occurs once maps to that instant;
//   - a wall time that occurs twice (the repeated hour when clocks go back)
//     maps to its first occurrence;
//   - a wall time skipped by a forward jump maps to the transition instant,
//     the first instant after the gap.
//
// time.Date leaves the last two cases unspecified, so the candidates are
// computed explicitly from the zone periods around the wall time.
func civilToInstant(c int64, loc *time.Location) int64 {
	if loc == time.UTC {
		return c
	}
	// Fast path: far from any transition the offset at "c as if UTC" is
	// the offset of the wall time, and the instant is unique.
	guess := c - offsetAt(loc, c)
	p := periodAt(loc, guess)
	if c-p.offset == guess && (p.start == math.MinInt64 || guess-p.start >= maxOffsetJump) {
		return guess
	}

	// Near a transition: look at the period of the guess and its neighbours;
	// every wall time c - offset that falls inside its own period is a
	// valid instant, and the earliest one wins.
	periods := [3]zonePeriod{p}
	n := 1
	if p.start != math.MinInt64 {
		periods[n] = periodAt(loc, p.start-1)
		n++
	}
	if p.end != math.MaxInt64 {
		periods[n] = periodAt(loc, p.end)
		n++
	}
	best, found := int64(math.MaxInt64), false
	for _, q := range periods[:n] {
		if i := c - q.offset; i >= q.start && i < q.end && i < best {
			best, found = i, true
		}
	}
	if found {
		return best
	}
	// A gap: c lies between the last wall time before a forward jump at T
	// and the wall time of T itself, [T+before, T+after).
	for _, t := range [2]int64{p.start, p.end} {
		if t == math.MinInt64 || t == math.MaxInt64 {
			continue
		}
		before, after := offsetAt(loc, t-1), offsetAt(loc, t)
		if c >= t+before && c < t+after {
			return t
		}
	}
	// Unreachable for real zone data (it would take two transitions within
	// a couple of days); fall back to the guess, which is at least a valid
	// instant near c.
	return guess
}
