package schedule

import (
	"fmt"
	"strings"
)

// MaxCronLength is the longest cron expression ParseCron accepts, in bytes.
// Longer input is refused rather than parsed, so that a hostile job cannot
// make the registry spend time or memory on it.
const MaxCronLength = 256

// Cron is a parsed cron expression. It is immutable and safe for concurrent
// use. The zero value matches nothing; obtain one from ParseCron.
type Cron struct {
	// Bit i of each set means value i is allowed: second and minute use bits
	// 0-59, hour 0-23, dom 1-31, month 1-12, dow 0-6 (Sunday is 0; a 7 in
	// the expression is folded into 0).
	second, minute, hour, dom, month, dow uint64
	// domStar and dowStar record that the field was written starting with
	// '*' or '?'. Vixie cron decides between AND and OR day matching on
	// this syntactic property, not on the resulting set.
	domStar, dowStar bool
	// dowDays[w] holds the days 1-31 (as bits) whose weekday is in dow, for
	// a month whose first day is weekday w. It turns day matching into one
	// AND or OR of two masks per month instead of a loop over days.
	dowDays [7]uint64
	// days holds the Quartz forms (L, W, #); quartz says whether any is
	// used, so that plain expressions keep the plain, cheaper day mask.
	days   quartzDays
	quartz bool
	src    string
}

// quartzDays holds the day forms whose days depend on the month: its length
// and the weekday of its first day. masks turns them into days per month.
type quartzDays struct {
	// fromLast bit n: the day n days before the last day of the month
	// (L is bit 0, L-3 bit 3).
	fromLast uint64
	// nearestWeekday bit d: the weekday (Monday-Friday) nearest to day d
	// within the month (dW).
	nearestWeekday uint64
	// lastWeekday: the last weekday of the month (LW).
	lastWeekday bool
	// lastOf bit w: the last weekday w of the month (wL).
	lastOf uint8
	// nth[w] bit k: the k-th weekday w of the month (w#k).
	nth [7]uint8
}

// ParseError says which part of a cron expression is wrong.
type ParseError struct {
	// Field is "expression" for problems with the expression as a whole
	// (empty, too long, wrong number of fields, unknown macro, time zone
	// prefix, can never fire) or the name of the offending field: "second",
	// "minute", "hour", "day-of-month", "month" or "day-of-week".
	Field string
	// Value is the offending text: the whole field for a field error, the
	// trimmed expression (shortened when very long) for an expression error.
	Value string
	// Reason is a human-readable explanation meant for API error messages.
	Reason string
	// err is ErrNeverFires for an expression that can never fire.
	err error
}

// Unwrap returns ErrNeverFires when the expression is well formed but matches
// no date, and nil otherwise.
func (e *ParseError) Unwrap() error {
	return e.err
}

// Error returns e as `invalid <field> "<value>": <reason>`.
func (e *ParseError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

// fieldSpec describes one cron field. The table below is immutable.
type fieldSpec struct {
	name string
	min  int
	max  int
	// names are accepted case-insensitively; names[i] stands for nameBase+i.
	names    []string
	nameBase int
	// question reports whether '?' is accepted (day fields only).
	question bool
}

var (
	secondSpec = fieldSpec{name: "second", min: 0, max: 59}
	minuteSpec = fieldSpec{name: "minute", min: 0, max: 59}
	hourSpec   = fieldSpec{name: "hour", min: 0, max: 23}
	domSpec    = fieldSpec{name: "day-of-month", min: 1, max: 31, question: true}
	monthSpec  = fieldSpec{name: "month", min: 1, max: 12, nameBase: 1, names: []string{
		"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
	}}
	// dowSpec allows 7 as a second Sunday so that ranges such as 5-7 work.
	dowSpec = fieldSpec{name: "day-of-week", min: 0, max: 7, question: true, names: []string{
		"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT",
	}}
)

// macroExpansion returns the 5-field expression for a macro (lower-cased),
// or "" when name is not a supported macro.
func macroExpansion(name string) string {
	switch name {
	case "@yearly", "@annually":
		return "0 0 1 1 *"
	case "@monthly":
		return "0 0 1 * *"
	case "@weekly":
		return "0 0 * * 0"
	case "@daily", "@midnight":
		return "0 0 * * *"
	case "@hourly":
		return "0 * * * *"
	}
	return ""
}

// ParseCron parses a cron expression with Vixie cron semantics.
//
// The expression has 5 fields "minute hour day-of-month month day-of-week" or
// 6 with a leading "second" field, separated by spaces or tabs; surrounding
// white space is ignored. A field is a comma list of items; an item is '*',
// a value, a range "a-b", or one of these followed by a step "/n"; "a/n"
// means "a-max/n". Values are numbers, or for month and day-of-week the
// case-insensitive names JAN-DEC and SUN-SAT (ranges like MON-FRI work).
// Bounds: second and minute 0-59, hour 0-23, day-of-month 1-31, month 1-12,
// day-of-week 0-7 where both 0 and 7 are Sunday. '?' means '*' and is only
// allowed in the two day fields. Steps must be between 1 and the number of
// values of the field (so "*/60" is a valid minute field firing at :00);
// ranges do not wrap around (a-b needs a <= b).
//
// The macros @yearly, @annually, @monthly, @weekly, @daily, @midnight and
// @hourly are accepted case-insensitively. @every, @reboot, other macros and
// TZ=/CRON_TZ= prefixes are refused: intervals and time zones are separate
// parts of a job's schedule.
//
// The day fields also take Quartz's forms, case-insensitively, as list items
// beside ordinary ones ("1,L", "1#2,5L"):
//   - day-of-month "L": the last day of the month; "L-n" (n 0-30): n days
//     before it, in months long enough ("L-30" fires only in 31-day months);
//     "LW": the last Monday-to-Friday of the month;
//   - day-of-month "dW": the Monday-to-Friday nearest to day d within the
//     month: a Saturday moves to the Friday before (to Monday the 3rd when it
//     is the 1st), a Sunday to the Monday after (to the Friday before when it
//     is the last day). A month without day d has no dW ("31W" skips April);
//   - day-of-week "wL": the last weekday w of the month ("5L", "FRIL": the
//     last Friday); "w#k" (k 1-5): the k-th weekday w ("1#2", "MON#2": the
//     second Monday). "5#5" fires only in months with five Fridays.
//
// W, L and # take a single value: no ranges or steps. "L" alone in
// day-of-week is refused (Quartz reads it as Saturday, other tools refuse it).
//
// Day matching follows Vixie cron: when the day-of-month or the day-of-week
// field starts with '*' or '?' (including "*/2"), a day must match both
// fields; when both are restricted a day matches if either does. So
// "0 0 1,15 * MON" fires on the 1st, the 15th and every Monday. The Quartz
// forms are restricted items like any other: "0 0 L * 5L" fires on the last
// day and on the last Friday, "0 0 * * 5L" only on the last Friday. (Quartz
// refuses both day fields restricted; the OR keeps one rule for every
// expression, and is what croner and cron-parser do too.)
//
// Expressions that can never fire, such as "0 0 30 2 *" (February 30th), are
// refused with Field "expression"; February 29th is accepted. Expressions
// longer than MaxCronLength bytes are refused. Every error is a *ParseError.
func ParseCron(expr string) (*Cron, error) {
	if len(expr) > MaxCronLength {
		return nil, &ParseError{
			Field:  "expression",
			Value:  expr[:32] + "...",
			Reason: fmt.Sprintf("longer than %d bytes", MaxCronLength),
		}
	}
	trimmed := strings.TrimSpace(expr)
	if trimmed == "" {
		return nil, exprError(trimmed, "is empty")
	}
	fields := splitFields(trimmed)

	src := ""
	if strings.HasPrefix(fields[0], "@") {
		name := strings.ToLower(fields[0])
		if name == "@every" {
			return nil, exprError(trimmed, "@every is not supported; use an interval schedule")
		}
		expansion := macroExpansion(name)
		if expansion == "" {
			return nil, exprError(trimmed, fmt.Sprintf("unknown macro %q", fields[0]))
		}
		if len(fields) != 1 {
			return nil, exprError(trimmed, fmt.Sprintf("macro %s takes no fields", name))
		}
		src = name
		fields = splitFields(expansion)
	}
	if upper := strings.ToUpper(fields[0]); strings.HasPrefix(upper, "TZ=") || strings.HasPrefix(upper, "CRON_TZ=") {
		return nil, exprError(trimmed, "a time zone prefix is not supported; set the schedule's time zone instead")
	}
	if len(fields) != 5 && len(fields) != 6 {
		return nil, exprError(trimmed, fmt.Sprintf("has %d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with a leading second)", len(fields)))
	}
	if src == "" {
		src = strings.ToUpper(strings.Join(fields, " "))
	}

	c := &Cron{second: 1, src: src} // 5 fields: second 0
	if len(fields) == 6 {
		var err error
		if c.second, _, err = parseField(fields[0], &secondSpec, nil); err != nil {
			return nil, err
		}
		fields = fields[1:]
	}
	var err error
	if c.minute, _, err = parseField(fields[0], &minuteSpec, nil); err != nil {
		return nil, err
	}
	if c.hour, _, err = parseField(fields[1], &hourSpec, nil); err != nil {
		return nil, err
	}
	if c.dom, c.domStar, err = parseField(fields[2], &domSpec, &c.days); err != nil {
		return nil, err
	}
	if c.month, _, err = parseField(fields[3], &monthSpec, nil); err != nil {
		return nil, err
	}
	if c.dow, c.dowStar, err = parseField(fields[4], &dowSpec, &c.days); err != nil {
		return nil, err
	}
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1
	}
	for w := range c.dowDays {
		// Day d of the month falls on weekday (w+d-1) mod 7.
		for d := 1; d <= 31; d++ {
			if c.dow&(1<<((w+d-1)%7)) != 0 {
				c.dowDays[w] |= 1 << d
			}
		}
	}
	c.quartz = c.days != quartzDays{}
	if !c.canFire() {
		e := exprError(trimmed, "can never fire: no selected month has any of the selected days of the month")
		e.err = ErrNeverFires
		return nil, e
	}
	return c, nil
}

// String returns the normalized source expression: fields separated by single
// spaces with names upper-cased, or the lower-cased macro. Parsing it again
// gives an equivalent Cron.
func (c *Cron) String() string {
	return c.src
}

// canFire reports whether some calendar date matches the day and month
// fields. Only AND day matching can be impossible: with OR matching every
// selected month contains every weekday. A day-of-week restriction never makes
// an existing (month, day) impossible because every date falls on every
// weekday over the 400-year Gregorian cycle.
//
// The Quartz forms break both shortcuts ("0 0 */20 * 5#2": days 1 and 21
// are never a second Friday), so with them every selected month is tried
// with each weekday for its first day and each of its lengths.
func (c *Cron) canFire() bool {
	if c.quartz {
		for m := 1; m <= 12; m++ {
			if c.month&(1<<m) == 0 {
				continue
			}
			for _, n := range [2]int{daysInMonth(2001, m), daysInMonth(2000, m)} {
				for first := range 7 {
					if c.monthDays(first, n) != 0 {
						return true
					}
				}
			}
		}
		return false
	}
	if !c.domStar && !c.dowStar {
		return true
	}
	for m := 1; m <= 12; m++ {
		maxDay := daysInMonth(2000, m) // 2000 is a leap year: Feb 29 exists
		if c.month&(1<<m) != 0 && c.dom&dayBits(maxDay) != 0 {
			return true
		}
	}
	return false
}

func exprError(expr, reason string) *ParseError {
	return &ParseError{Field: "expression", Value: expr, Reason: reason}
}

// splitFields splits on runs of spaces and tabs only: other white space (a
// newline inside an expression) is more likely a mistake than a separator.
func splitFields(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' })
}

// parseField returns the set of values of one field and whether it counts as
// a star for Vixie day matching (it starts with '*' or '?'). For the two day
// fields, q is non-nil and receives the Quartz items.
func parseField(text string, spec *fieldSpec, q *quartzDays) (uint64, bool, error) {
	star := text[0] == '*' || text[0] == '?'
	var bits uint64
	for item := range strings.SplitSeq(text, ",") {
		if q != nil {
			if handled, reason := parseQuartzItem(item, spec, q); handled {
				if reason != "" {
					return 0, false, &ParseError{Field: spec.name, Value: text, Reason: reason}
				}
				continue
			}
		}
		b, reason := parseItem(item, spec)
		if reason != "" {
			return 0, false, &ParseError{Field: spec.name, Value: text, Reason: reason}
		}
		bits |= b
	}
	return bits, star, nil
}

// parseQuartzItem recognizes the Quartz day forms: L, L-n, LW and nW in
// day-of-month, wL and w#k in day-of-week. It reports whether item is (or
// is a malformed attempt at) one of them, and a non-empty reason when it is
// malformed. Other items are left to parseItem. No weekday name ends in L
// and day-of-month has no names, so the forms cannot be mistaken for names.
func parseQuartzItem(item string, spec *fieldSpec, q *quartzDays) (bool, string) {
	upper := strings.ToUpper(item)
	if spec == &domSpec {
		switch {
		case upper == "L":
			q.fromLast |= 1
		case upper == "LW":
			q.lastWeekday = true
		case strings.HasPrefix(upper, "L-"):
			n, reason := parseNumber(upper[2:], "offset")
			if reason != "" {
				return true, reason + "; L-n is n days before the last day, as in L-3"
			}
			if n > 30 {
				return true, fmt.Sprintf("offset %s must be between 0 and 30", upper[2:])
			}
			q.fromLast |= 1 << n
		case strings.HasSuffix(upper, "W"):
			day := upper[:len(upper)-1]
			if strings.ContainsAny(day, "*?-/L") {
				return true, "W follows a single day of the month, as in 15W, or L (LW)"
			}
			d, reason := parseValue(day, spec)
			if reason != "" {
				return true, reason
			}
			q.nearestWeekday |= 1 << d
		case strings.Contains(upper, "L"):
			return true, "L is the last day (L), a day before it (L-3) or the last weekday (LW), and takes no range or step"
		case strings.Contains(upper, "W"):
			return true, "W follows a single day of the month, as in 15W, or L (LW)"
		case strings.Contains(upper, "#"):
			return true, "# belongs in day-of-week, as in 1#2 (the second Monday)"
		default:
			return false, ""
		}
		return true, ""
	}
	// Day of week.
	switch {
	case upper == "L":
		return true, "L alone is ambiguous in day-of-week (Quartz reads it as Saturday); write 5L for the last Friday, or 6 for Saturday"
	case strings.Contains(upper, "#"):
		day, nth, _ := strings.Cut(upper, "#")
		w, reason := parseQuartzWeekday(day, "#"+nth)
		if reason != "" {
			return true, reason
		}
		k, reason := parseNumber(nth, "occurrence")
		if reason != "" {
			return true, reason
		}
		if k < 1 || k > 5 {
			return true, fmt.Sprintf("occurrence %s must be between 1 and 5", nth)
		}
		q.nth[w] |= 1 << k
	case strings.HasSuffix(upper, "L"):
		w, reason := parseQuartzWeekday(upper[:len(upper)-1], "L")
		if reason != "" {
			return true, reason
		}
		q.lastOf |= 1 << w
	default:
		return false, ""
	}
	return true, ""
}

// parseQuartzWeekday parses the single weekday before '#' or 'L' (suffix is
// the rest of the form, for the error message) and folds 7 into 0.
func parseQuartzWeekday(s, suffix string) (int, string) {
	if strings.ContainsAny(s, "*?-/") {
		return 0, fmt.Sprintf("%s follows a single weekday, as in 5%s or FRI%s", suffix[:1], suffix, suffix)
	}
	w, reason := parseValue(s, &dowSpec)
	if reason != "" {
		return 0, reason
	}
	return w % 7, ""
}

// parseItem parses one list item and returns its set, or a non-empty reason.
func parseItem(item string, spec *fieldSpec) (uint64, string) {
	if item == "" {
		return 0, "empty list item"
	}
	base, stepText, hasStep := strings.Cut(item, "/")
	step := 1
	if hasStep {
		n, reason := parseNumber(stepText, "step")
		if reason != "" {
			return 0, reason
		}
		span := spec.max - spec.min + 1
		if n < 1 || n > span {
			return 0, fmt.Sprintf("step %s must be between 1 and %d", stepText, span)
		}
		step = n
	}

	var lo, hi int
	switch {
	case base == "*" || base == "?":
		if base == "?" && !spec.question {
			return 0, "? is only allowed in day-of-month and day-of-week"
		}
		lo, hi = spec.min, spec.max
	case strings.Contains(base, "-"):
		first, last, _ := strings.Cut(base, "-")
		if first == "" {
			return 0, "negative numbers are not allowed"
		}
		var reason string
		if lo, reason = parseValue(first, spec); reason != "" {
			return 0, reason
		}
		if hi, reason = parseValue(last, spec); reason != "" {
			return 0, reason
		}
		if lo > hi {
			return 0, fmt.Sprintf("range %s goes backwards; ranges do not wrap around", base)
		}
	default:
		var reason string
		if lo, reason = parseValue(base, spec); reason != "" {
			return 0, reason
		}
		hi = lo
		if hasStep {
			hi = spec.max // "a/n" means "a-max/n"
		}
	}
	var bits uint64
	for v := lo; v <= hi; v += step {
		bits |= 1 << v
	}
	return bits, ""
}

// parseValue parses a number or a name and checks the field's bounds.
func parseValue(s string, spec *fieldSpec) (int, string) {
	if s == "" {
		return 0, "missing value"
	}
	if s[0] == '-' {
		return 0, "negative numbers are not allowed"
	}
	if s[0] < '0' || s[0] > '9' {
		for i, name := range spec.names {
			if strings.EqualFold(s, name) {
				return spec.nameBase + i, ""
			}
		}
		if spec.names != nil {
			return 0, fmt.Sprintf("%q is not a number or a name (%s-%s)", s, spec.names[0], spec.names[len(spec.names)-1])
		}
		return 0, fmt.Sprintf("%q is not a number", s)
	}
	n, reason := parseNumber(s, "value")
	if reason != "" {
		return 0, reason
	}
	if n < spec.min || n > spec.max {
		return 0, fmt.Sprintf("%s is out of range %d-%d", s, spec.min, spec.max)
	}
	return n, ""
}

// parseNumber accepts only ASCII digits (strconv.Atoi would also take a sign).
// Values too long to be in any field's range are reported as out of range
// without converting them, which also rules out overflow.
func parseNumber(s, what string) (int, string) {
	if s == "" {
		return 0, "missing " + what
	}
	n := 0
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch < '0' || ch > '9' {
			return 0, fmt.Sprintf("%s %q is not a number", what, s)
		}
		if n < 1000 {
			n = n*10 + int(ch-'0')
		}
	}
	return n, ""
}
