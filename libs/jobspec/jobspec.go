package jobspec

import (
	"fmt"
	"sync"
	"time"

	"github.com/cronmesh/cronmesh/libs/schedule"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// Limits on schedules. They keep a single job from asking for absurd work
// (a sub-second interval) and keep times inside the range PostgreSQL and
// protobuf timestamps both represent.
const (
	MinInterval = time.Second
	MaxInterval = 366 * 24 * time.Hour
	MinAfter    = time.Second
	MaxAfter    = 366 * 24 * time.Hour
	// DefaultTimeZone applies when Schedule.time_zone is empty.
	DefaultTimeZone = "UTC"
)

// FieldError names a wrong field by its path relative to the schedule
// ("cron", "interval.every", "time_zone") and says what is wrong with it.
type FieldError struct {
	Field       string
	Description string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Description }

// Schedule converts s into a schedule.Schedule. created is the job's create
// time: rounded up to a whole second, it anchors interval schedules that have
// no anchor_time and starts the delay of `after` schedules (so slots fall on
// whole seconds, and never before the delay has passed). It returns every problem it finds as
// []*FieldError (never a partial schedule); a nil s is an error on the
// schedule itself (Field "").
func Schedule(s *registryv1.Schedule, created time.Time) (schedule.Schedule, []*FieldError) {
	return (*Locations)(nil).Schedule(s, created)
}

// Locations caches resolved time zones. time.LoadLocation reads and parses
// the zone's tzdata on every call (about 10 µs for Europe/Berlin here,
// thirty times the cost of the rest of Schedule), which a trigger planning
// 100,000 jobs of a burst pays 100,000 times. The zero value is ready; a nil
// *Locations does not cache. It is safe for concurrent use.
type Locations struct {
	mu     sync.RWMutex
	byName map[string]*time.Location
}

// Load is [LoadLocation] through the cache. Failures are not cached: they
// are rare, and a tz database fixed under a running process is picked up.
func (c *Locations) Load(name string) (*time.Location, error) {
	if c == nil {
		return LoadLocation(name)
	}
	c.mu.RLock()
	loc, ok := c.byName[name]
	c.mu.RUnlock()
	if ok {
		return loc, nil
	}
	loc, err := LoadLocation(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.byName == nil {
		c.byName = make(map[string]*time.Location)
	}
	c.byName[name] = loc
	c.mu.Unlock()
	return loc, nil
}

// Schedule is the package's [Schedule] with the time zone resolved through
// the cache.
func (c *Locations) Schedule(s *registryv1.Schedule, created time.Time) (schedule.Schedule, []*FieldError) {
	if s == nil {
		return schedule.Schedule{}, []*FieldError{{Description: "is required"}}
	}
	var errs []*FieldError
	fail := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Description: fmt.Sprintf(format, args...)})
	}

	loc, err := c.Load(s.GetTimeZone())
	if err != nil {
		fail("time_zone", "%v", err)
	}
	var start, end time.Time
	if s.StartTime != nil {
		if err := s.StartTime.CheckValid(); err != nil {
			fail("start_time", "is not a valid timestamp")
		} else {
			start = s.StartTime.AsTime()
		}
	}
	if s.EndTime != nil {
		if err := s.EndTime.CheckValid(); err != nil {
			fail("end_time", "is not a valid timestamp")
		} else {
			end = s.EndTime.AsTime()
		}
	}
	if !start.IsZero() && !end.IsZero() && !end.After(start) {
		fail("end_time", "must be after start_time")
	}

	var sched schedule.Schedule
	switch kind := s.Kind.(type) {
	case *registryv1.Schedule_Cron:
		cron, err := schedule.ParseCron(kind.Cron)
		if err != nil {
			fail("cron", "%v", err)
			break
		}
		sched = schedule.NewCron(cron, loc)
	case *registryv1.Schedule_Interval:
		every := kind.Interval.GetEvery()
		switch {
		case every == nil:
			fail("interval.every", "is required")
		case every.CheckValid() != nil:
			fail("interval.every", "is not a valid duration")
		case every.AsDuration() < MinInterval || every.AsDuration() > MaxInterval:
			fail("interval.every", "must be between %s and %s, got %s", MinInterval, MaxInterval, every.AsDuration())
		}
		anchor := ceilSecond(created)
		if a := kind.Interval.GetAnchorTime(); a != nil {
			if a.CheckValid() != nil {
				fail("interval.anchor_time", "is not a valid timestamp")
			} else {
				// Slots are stored with PostgreSQL's microsecond precision;
				// an anchor finer than that would yield slots no store can
				// hold exactly.
				anchor = a.AsTime().Truncate(time.Microsecond)
			}
		}
		sched = schedule.NewInterval(every.AsDuration(), anchor)
	case *registryv1.Schedule_At:
		if kind.At == nil || kind.At.CheckValid() != nil {
			fail("at", "is not a valid timestamp")
			break
		}
		sched = schedule.NewAt(kind.At.AsTime())
	case *registryv1.Schedule_After:
		switch {
		case kind.After == nil || kind.After.CheckValid() != nil:
			fail("after", "is not a valid duration")
		case kind.After.AsDuration() < MinAfter || kind.After.AsDuration() > MaxAfter:
			fail("after", "must be between %s and %s, got %s", MinAfter, MaxAfter, kind.After.AsDuration())
		default:
			sched = schedule.NewAfter(ceilSecond(created), kind.After.AsDuration())
		}
	default:
		fail("kind", "one of cron, interval, at or after is required")
	}
	if len(errs) > 0 {
		return schedule.Schedule{}, errs
	}
	return sched.WithBounds(start, end), nil
}

// LoadLocation resolves an IANA time zone name; "" means UTC. It refuses
// "Local", whose meaning depends on the machine that evaluates it, so that
// every service computes the same times.
func LoadLocation(name string) (*time.Location, error) {
	switch name {
	case "":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("%q is not an IANA time zone name", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	return loc, nil
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}
