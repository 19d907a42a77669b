package schedule

import (
	"errors"
	"math"
	"math/big"
	"time"
)

// ErrNeverFires says a schedule cannot fire. ParseCron's error for an
// expression that matches no date at all (such as February 30th) wraps it, so
// errors.Is(err, ErrNeverFires) tells that case from a syntax error. Callers
// may also return it when Next reports no slot left; Next itself reports that
// with its boolean.
var ErrNeverFires = errors.New("schedule: never fires again")

// Kind of schedule.
type Kind int

// Kinds of schedule. The zero Kind belongs to the zero Schedule, which never
// fires.
const (
	// KindCron fires on the wall-clock times of a cron expression.
	KindCron Kind = iota + 1
	// KindInterval fires every fixed duration of elapsed time.
	KindInterval
	// KindAt fires once at an instant.
	KindAt
	// KindAfter fires once, a delay after creation.
	KindAfter
)

// String returns "cron", "interval", "at", "after", or "unknown" for any other
// value including the zero Kind.
func (k Kind) String() string {
	switch k {
	case KindCron:
		return "cron"
	case KindInterval:
		return "interval"
	case KindAt:
		return "at"
	case KindAfter:
		return "after"
	}
	return "unknown"
}

// Search horizon for cron schedules: Next gives up when no wall time within
// this many years after `after` matches.
const horizonYears = 29

// Unix seconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, the range
// of instants the cron search works in (checked by a test).
const (
	minCronUnix = -62135596800
	maxCronUnix = 253402300799
)

// Schedule is a validated schedule with its location and bounds. It is an
// immutable value, safe for concurrent use and cheap to copy. The zero
// Schedule never fires.
type Schedule struct {
	kind Kind
	cron *Cron
	loc  *time.Location
	// every is the interval of KindInterval.
	every time.Duration
	// at is the anchor of KindInterval and the single slot of KindAt and
	// KindAfter.
	at         time.Time
	start, end time.Time
}

// NewCron returns a schedule firing on c's wall-clock times in loc; a nil loc
// means UTC. A nil or zero-value c gives a schedule that never fires. See
// Next for how daylight-saving transitions are handled.
func NewCron(c *Cron, loc *time.Location) Schedule {
	if loc == nil {
		loc = time.UTC
	}
	return Schedule{kind: KindCron, cron: c, loc: loc}
}

// NewInterval returns a schedule whose slots are anchor + k*every for every
// integer k (negative, zero or positive): the anchor itself is a slot, and an
// anchor in the future or far in the past works the same way. Time zones
// and daylight saving play no part. A non-positive every gives a schedule
// that never fires. Results carry the anchor's location.
func NewInterval(every time.Duration, anchor time.Time) Schedule {
	return Schedule{kind: KindInterval, every: every, at: anchor.Round(0)}
}

// NewAt returns a schedule firing once, at at.
func NewAt(at time.Time) Schedule {
	return Schedule{kind: KindAt, at: at.Round(0)}
}

// NewAfter returns a schedule firing once, at created+delay. A negative delay
// is not rejected: it simply puts the slot before created.
func NewAfter(created time.Time, delay time.Duration) Schedule {
	return Schedule{kind: KindAfter, at: created.Round(0).Add(delay)}
}

// WithBounds returns a copy of s that has no slot before start and none
// after end; a slot exactly at start or at end is kept. A zero time means
// that side is unbounded. If end is before start the schedule never fires.
func (s Schedule) WithBounds(start, end time.Time) Schedule {
	s.start, s.end = start.Round(0), end.Round(0)
	return s
}

// Kind returns the kind of s, or 0 for the zero Schedule.
func (s Schedule) Kind() Kind {
	return s.kind
}

// Next returns the first slot strictly after `after`, and false when the
// schedule has no slot left: a one-shot already passed, the end bound passed,
// a non-positive interval, or a cron expression with no matching wall time
// within 29 years after after's wall time (or beyond the year 9999).
//
// Cron slots are wall-clock times in the schedule's location, mapped to
// instants this way:
//   - a wall time that occurs once fires at that instant;
//   - a wall time in the hour repeated when clocks go back fires only at its
//     first occurrence; the second pass through that hour fires nothing;
//   - a wall time skipped when clocks go forward fires at the first instant
//     after the gap (the transition). Several skipped slots and a slot at
//     the gap's end all map to that instant and so fire once.
//
// Cron results have no sub-second part and carry the schedule's location.
// Interval slots keep the anchor's sub-second part; at and after return the
// given instant as is.
func (s Schedule) Next(after time.Time) (time.Time, bool) {
	if !s.start.IsZero() {
		// A slot equal to start is allowed: ask for slots after start-1ns.
		if lo := s.start.Add(-time.Nanosecond); after.Before(lo) {
			after = lo
		}
	}
	var next time.Time
	var ok bool
	switch s.kind {
	case KindCron:
		next, ok = s.nextCron(after)
	case KindInterval:
		next, ok = s.nextInterval(after)
	case KindAt, KindAfter:
		next, ok = s.at, s.at.After(after)
	}
	if !ok || (!s.end.IsZero() && next.After(s.end)) {
		return time.Time{}, false
	}
	return next, true
}

// NextN returns up to n slots, strictly increasing, the first strictly after
// `after`. It returns fewer (possibly none) when the schedule runs out, and
// nil when n <= 0.
func (s Schedule) NextN(after time.Time, n int) []time.Time {
	if n <= 0 {
		return nil
	}
	out := make([]time.Time, 0, min(n, 64))
	for len(out) < n {
		next, ok := s.Next(after)
		if !ok {
			break
		}
		out = append(out, next)
		after = next
	}
	return out
}

func (s Schedule) nextCron(after time.Time) (time.Time, bool) {
	if s.cron == nil || s.cron.month == 0 {
		return time.Time{}, false // nil or zero Cron: nothing matches
	}
	// Whole seconds suffice: slots are whole seconds, so slot > after
	// exactly when slot > floor(after).
	au := after.Unix()
	if au >= maxCronUnix {
		return time.Time{}, false
	}
	au = max(au, minCronUnix-1)
	loc := s.loc
	ca := au + offsetAt(loc, au) // after's wall time

	// The mapping from wall time to instant is non-decreasing, so no wall
	// time at or before ca can map after `after`; start just past it.
	// The horizon is the same wall time horizonYears later (February 29th
	// becoming the 28th).
	days := floorDiv(ca, secondsPerDay)
	y, m, d := civilFromDays(days)
	ly := y + horizonYears
	limit := daysFromCivil(ly, m, min(d, int64(daysInMonth(ly, int(m)))))*secondsPerDay + ca - days*secondsPerDay
	from := ca + 1
	for {
		c, ok := s.cron.nextCivil(from, limit)
		if !ok {
			return time.Time{}, false
		}
		if inst := civilToInstant(c, loc); inst > au {
			return time.Unix(inst, 0).In(loc), true
		}
		// Only possible when `after` lies in the second pass of a repeated
		// hour: wall times up to the end of that hour map to its first pass,
		// before `after`. Skip to the wall time ending the repetition: the
		// start T of after's zone period plus the offset in effect before T.
		from = c + 1
		if p := periodAt(loc, au); p.start != math.MinInt64 {
			from = max(from, p.start+offsetAt(loc, p.start-1))
		}
	}
}

func (s Schedule) nextInterval(after time.Time) (time.Time, bool) {
	if s.every <= 0 {
		return time.Time{}, false
	}
	// The slot is after + (every - r) where r = (after - anchor) mod every,
	// taken in [0, every). Sub saturates beyond ~292 years; only then is
	// exact big-integer arithmetic needed.
	var r time.Duration
	if d := after.Sub(s.at); d != math.MaxInt64 && d != math.MinInt64 {
		r = d % s.every
		if r < 0 {
			r += s.every
		}
	} else {
		diff := big.NewInt(after.Unix() - s.at.Unix())
		diff.Mul(diff, big.NewInt(int64(time.Second)))
		diff.Add(diff, big.NewInt(int64(after.Nanosecond()-s.at.Nanosecond())))
		r = time.Duration(diff.Mod(diff, big.NewInt(int64(s.every))).Int64())
	}
	// Round(0) drops a monotonic clock reading of after, which would
	// otherwise be carried into the result.
	next := after.Round(0).Add(s.every - r)
	if !next.After(after) {
		return time.Time{}, false // beyond the range of time.Time
	}
	return next.In(s.at.Location()), true
}
