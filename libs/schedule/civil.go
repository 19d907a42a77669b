package schedule

import "math/bits"

// Civil (wall-clock) times are handled as int64 "civil seconds": the seconds
// since 1970-01-01T00:00:00 of a calendar that has no time zone, i.e. the
// Unix time the wall clock reading would have if it were UTC. The cron search
// runs entirely on civil seconds and calendar fields, and only the final
// candidate is mapped to an instant (zone.go). Doing the calendar math here,
// instead of through time.Date, keeps the hot path free of location lookups.

const secondsPerDay = 86400

// Bounds of the civil years the cron search covers. Protobuf timestamps
// cannot go beyond year 9999, and the bounds keep all arithmetic far from
// int64 overflow.
const (
	minCivilYear = 1
	maxCivilYear = 9999
)

// daysFromCivil returns the number of days from 1970-01-01 to y-m-d in the
// proleptic Gregorian calendar (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := (m + 9) % 12 // March is 0, so the leap day is the year's last day
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	if mp < 10 {
		m = mp + 3
	} else {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func isLeap(y int64) bool {
	return y%4 == 0 && (y%100 != 0 || y%400 == 0)
}

func daysInMonth(y int64, m int) int {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// dayBits returns bits 1..n set.
func dayBits(n int) uint64 {
	return (uint64(1)<<(n+1) - 1) &^ 1
}

// weekday returns the weekday (Sunday = 0) of the day z days after
// 1970-01-01, which was a Thursday.
func weekday(z int64) int {
	w := (z + 4) % 7
	if w < 0 {
		w += 7
	}
	return int(w)
}

// nextBit returns the smallest set bit of mask that is >= from, or -1.
func nextBit(mask uint64, from int) int {
	if from >= 64 {
		return -1
	}
	m := mask & (^uint64(0) << from)
	if m == 0 {
		return -1
	}
	return bits.TrailingZeros64(m)
}

// civilSeconds assembles calendar fields into civil seconds.
func civilSeconds(y int64, mo, d, h, mi, s int) int64 {
	return daysFromCivil(y, int64(mo), int64(d))*secondsPerDay + int64(h*3600+mi*60+s)
}

// dayMask returns the days of month mo of year y on which c may fire.
func (c *Cron) dayMask(y int64, mo int) uint64 {
	first := weekday(daysFromCivil(y, int64(mo), 1))
	return c.monthDays(first, daysInMonth(y, mo))
}

// monthDays returns the days on which c may fire in a month of n days whose
// first day is weekday first. The Quartz forms join their own field before
// the Vixie AND/OR rule combines the two fields, so they follow that rule
// like any other item.
func (c *Cron) monthDays(first, n int) uint64 {
	dom, dow := c.dom, c.dowDays[first]
	if c.quartz {
		qdom, qdow := c.days.masks(first, n)
		dom, dow = dom|qdom, dow|qdow
	}
	var m uint64
	if c.domStar || c.dowStar {
		m = dom & dow
	} else {
		m = dom | dow
	}
	return m & dayBits(n)
}

// masks returns the days of the day-of-month and the day-of-week Quartz
// forms in a month of n days whose first day is weekday first.
func (q *quartzDays) masks(first, n int) (dom, dow uint64) {
	for b := q.fromLast; b != 0; b &= b - 1 {
		if d := n - bits.TrailingZeros64(b); d >= 1 {
			dom |= 1 << d
		}
	}
	if q.lastWeekday {
		dom |= 1 << nearestWeekday(n, first, n)
	}
	for b := q.nearestWeekday; b != 0; b &= b - 1 {
		if d := bits.TrailingZeros64(b); d <= n {
			dom |= 1 << nearestWeekday(d, first, n)
		}
	}
	lastWeekday := (first + n - 1) % 7
	for w := range 7 {
		if q.lastOf&(1<<w) != 0 {
			dow |= 1 << (n - (lastWeekday-w+7)%7)
		}
		firstW := 1 + (w-first+7)%7 // the first weekday w of the month
		for b := q.nth[w]; b != 0; b &= b - 1 {
			if d := firstW + 7*(bits.TrailingZeros8(b)-1); d <= n {
				dow |= 1 << d
			}
		}
	}
	return dom, dow
}

// nearestWeekday returns the Monday-to-Friday day nearest to day d of a month
// of n days whose first day is weekday first, without leaving the month
// (Quartz's W): a Saturday moves to the Friday before, or to Monday the 3rd
// when it is the 1st; a Sunday moves to the Monday after, or to the Friday
// before when it is the last day.
func nearestWeekday(d, first, n int) int {
	switch (first + d - 1) % 7 {
	case 6: // Saturday
		if d == 1 {
			return 3
		}
		return d - 1
	case 0: // Sunday
		if d == n {
			return d - 2
		}
		return d + 1
	}
	return d
}

// nextCivil returns the first civil time >= start matching c, or false when
// there is none at or before limit. It moves field by field: a mismatch in
// a field jumps to the next allowed value of that field and resets the
// smaller fields, so one call costs a handful of iterations per month
// crossed, whatever the expression.
func (c *Cron) nextCivil(start, limit int64) (int64, bool) {
	days := floorDiv(start, secondsPerDay)
	sod := int(start - days*secondsPerDay)
	y, m, d := civilFromDays(days)
	mo, day := int(m), int(d)
	h, mi, s := sod/3600, sod/60%60, sod%60

	limitYear := int64(maxCivilYear)
	if ly, _, _ := civilFromDays(floorDiv(limit, secondsPerDay)); ly < limitYear {
		limitYear = ly
	}
	// The day mask of the month being searched, recomputed only when the
	// search moves to another month: an hour, minute or second carried
	// over to the next day stays in the same month most of the time.
	maskY, maskMo, mask := int64(0), 0, uint64(0)
	for y <= limitYear {
		if c.month&(1<<mo) == 0 {
			next := nextBit(c.month, mo)
			if next < 0 {
				y++
				next = nextBit(c.month, 1)
			}
			mo, day, h, mi, s = next, 1, 0, 0, 0
			continue
		}
		if y != maskY || mo != maskMo {
			maskY, maskMo, mask = y, mo, c.dayMask(y, mo)
		}
		nd := nextBit(mask, day)
		if nd < 0 {
			mo, day, h, mi, s = mo+1, 1, 0, 0, 0
			if mo > 12 {
				y, mo = y+1, 1
			}
			continue
		}
		if nd != day {
			day, h, mi, s = nd, 0, 0, 0
		}
		nh := nextBit(c.hour, h)
		if nh < 0 {
			// day may become 32; the day mask then has no bit left and
			// the next iteration moves to the next month.
			day, h, mi, s = day+1, 0, 0, 0
			continue
		}
		if nh != h {
			h, mi, s = nh, 0, 0
		}
		nmi := nextBit(c.minute, mi)
		if nmi < 0 {
			h, mi, s = h+1, 0, 0
			if h > 23 {
				day, h = day+1, 0
			}
			continue
		}
		if nmi != mi {
			mi, s = nmi, 0
		}
		ns := nextBit(c.second, s)
		if ns < 0 {
			mi, s = mi+1, 0
			if mi > 59 {
				h, mi = h+1, 0
				if h > 23 {
					day, h = day+1, 0
				}
			}
			continue
		}
		found := civilSeconds(y, mo, day, h, mi, ns)
		if found > limit {
			return 0, false
		}
		return found, true
	}
	return 0, false
}
