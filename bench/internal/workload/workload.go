// Package workload plans the jobs the end-to-end benchmark registers: a mix
// of schedules sized for a target rate of executions per second, and, for
// every job, the nominal times it must fire in a window. The slots are
// computed here from the plan, independently of libs/schedule, so that the
// benchmark's ledger is a second opinion on the trigger rather than a copy
// of its arithmetic.
package workload

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// Kind is the shape of a job's schedule.
type Kind int

// The kinds of the mix.
const (
	// EverySecond is the cron `* * * * * *`.
	EverySecond Kind = iota + 1
	// TopOfMinute is the cron `0 * * * * *`: every job of the kind fires on
	// the same second, as real crontabs crowd onto minute boundaries.
	TopOfMinute
	// Minute is the cron `S * * * * *` with S from 1 to 59, spread.
	Minute
	// Interval fires every 5 s, 15 s or 60 s from a whole-second anchor.
	Interval
	// OneTime fires once, at a millisecond instant inside the window.
	OneTime
)

func (k Kind) String() string {
	switch k {
	case EverySecond:
		return "cron every second"
	case TopOfMinute:
		return "cron every minute, second 0"
	case Minute:
		return "cron every minute, seconds 1-59"
	case Interval:
		return "interval 5 s / 15 s / 60 s"
	case OneTime:
		return "one-time (at)"
	}
	return "kind " + strconv.Itoa(int(k))
}

// Kinds lists every kind in report order.
func Kinds() []Kind { return []Kind{EverySecond, TopOfMinute, Minute, Interval, OneTime} }

// intervals are the periods of Interval jobs; each takes a third of the
// kind's rate.
var intervals = [...]time.Duration{5 * time.Second, 15 * time.Second, 60 * time.Second}

// Job is one planned job. Its index in Plan.Jobs names it at the target.
type Job struct {
	Kind   Kind
	Second int           // Minute: the second of the minute
	Every  time.Duration // Interval
	Anchor time.Time     // Interval
	At     time.Time     // OneTime
	// NotBefore, if set, is the schedule's start_time: no slot before it.
	NotBefore time.Time
	// NotAfter, if set, is the schedule's end_time: no slot after it.
	NotAfter time.Time
}

// Shares divide the target rate between the kinds; they need not sum to 1
// (they are normalised).
type Shares map[Kind]float64

// DefaultShares is the mix of `make bench`: half the executions from
// every-second crons, 5 % on the top-of-minute second (at 3,000/s, 9,000
// jobs firing together every minute), 15 % from minute crons on the other
// seconds, 20 % from interval jobs and 10 % from one-time jobs.
func DefaultShares() Shares {
	return Shares{EverySecond: 0.5, TopOfMinute: 0.05, Minute: 0.15, Interval: 0.2, OneTime: 0.1}
}

// Options size a plan.
type Options struct {
	Rate   float64       // executions per second over the window, on average
	Start  time.Time     // the window's first instant; one-time jobs fall in it
	Window time.Duration // the window's length
	Shares Shares        // default DefaultShares
	// FiringFrom, if set, is the first instant recurring jobs may fire
	// (their schedules' start_time): without it they fire as soon as the
	// trigger holds them, and the backlog of the setup minutes is still in
	// the queues when the window starts.
	FiringFrom time.Time
	// FiringUntil, if set, is the last instant recurring jobs may fire
	// (their schedules' end_time), so that a plan's load stops when its
	// window ends (the capacity ramp's steps).
	FiringUntil time.Time
}

// Plan is the planned jobs and the window they were sized for.
type Plan struct {
	Jobs   []Job
	Start  time.Time
	Window time.Duration
}

// New plans a mix whose slots over [Start, Start+Window) average Rate per
// second. Counts are rounded, so the real rate is Plan.Expected over the
// window divided by its length.
func New(opts Options) (*Plan, error) {
	if opts.Rate <= 0 || opts.Window <= 0 || opts.Start.IsZero() {
		return nil, errors.New("workload: Rate, Start and Window are required")
	}
	shares := opts.Shares
	if shares == nil {
		shares = DefaultShares()
	}
	var sum float64
	for _, k := range Kinds() {
		if shares[k] < 0 {
			return nil, fmt.Errorf("workload: negative share for %s", k)
		}
		sum += shares[k]
	}
	if sum == 0 {
		return nil, errors.New("workload: every share is zero")
	}
	rate := func(k Kind) float64 { return opts.Rate * shares[k] / sum }
	p := &Plan{Start: opts.Start.UTC(), Window: opts.Window}
	add := func(n int, job func(i int) Job) {
		for i := range n {
			j := job(i)
			if j.Kind != OneTime && !opts.FiringFrom.IsZero() {
				j.NotBefore = opts.FiringFrom.UTC()
			}
			if j.Kind != OneTime && !opts.FiringUntil.IsZero() {
				j.NotAfter = opts.FiringUntil.UTC()
			}
			p.Jobs = append(p.Jobs, j)
		}
	}
	add(count(rate(EverySecond)), func(int) Job { return Job{Kind: EverySecond} })
	add(count(rate(TopOfMinute)*60), func(int) Job { return Job{Kind: TopOfMinute} })
	add(count(rate(Minute)*60), func(i int) Job { return Job{Kind: Minute, Second: 1 + i%59} })
	// Anchors are whole seconds (as the registry rounds a creation time)
	// spread over each period, so interval slots do not pile up.
	base := time.Unix(0, 0).UTC()
	for _, every := range intervals {
		period := int(every / time.Second)
		add(count(rate(Interval)/float64(len(intervals))*every.Seconds()), func(i int) Job {
			return Job{Kind: Interval, Every: every, Anchor: base.Add(time.Duration(i%period) * time.Second)}
		})
	}
	oneTime := count(rate(OneTime) * opts.Window.Seconds())
	add(oneTime, func(i int) Job {
		// Evenly over the window, at millisecond instants.
		off := time.Duration(float64(opts.Window) * float64(i) / float64(oneTime)).Truncate(time.Millisecond)
		return Job{Kind: OneTime, At: p.Start.Add(off)}
	})
	return p, nil
}

// Burst plans n one-time jobs all due at the same instant.
func Burst(n int, at time.Time) *Plan {
	p := &Plan{Start: at.UTC(), Window: time.Second, Jobs: make([]Job, n)}
	for i := range p.Jobs {
		p.Jobs[i] = Job{Kind: OneTime, At: at.UTC()}
	}
	return p
}

// Constant plans n jobs of one recurring kind (not OneTime), firing in
// [start, start+window).
func Constant(n int, kind Kind, start time.Time, window time.Duration) *Plan {
	p := &Plan{Start: start.UTC(), Window: window, Jobs: make([]Job, n)}
	for i := range p.Jobs {
		p.Jobs[i] = Job{Kind: kind, Second: 1 + i%59, Every: intervals[0], Anchor: time.Unix(int64(i%5), 0).UTC()}
	}
	return p
}

// Append adds q's jobs after p's (their indexes shift by len(p.Jobs)) and
// widens p's window to cover both.
func (p *Plan) Append(q *Plan) {
	p.Jobs = append(p.Jobs, q.Jobs...)
	end := p.Start.Add(p.Window)
	if e := q.Start.Add(q.Window); e.After(end) {
		end = e
	}
	if p.Start.IsZero() || q.Start.Before(p.Start) {
		p.Start = q.Start
	}
	p.Window = end.Sub(p.Start)
}

func count(x float64) int { return int(math.Round(x)) }

// Counts is the number of jobs of each kind.
func (p *Plan) Counts() map[Kind]int {
	out := map[Kind]int{}
	for _, j := range p.Jobs {
		out[j.Kind]++
	}
	return out
}

// Expected is the number of slots of each kind in [from, to).
func (p *Plan) Expected(from, to time.Time) map[Kind]int {
	out := map[Kind]int{}
	for _, j := range p.Jobs {
		out[j.Kind] += len(j.Slots(from, to))
	}
	return out
}

// Slots are the job's nominal times in [from, to), in order, within its
// NotBefore and NotAfter.
func (j Job) Slots(from, to time.Time) []time.Time {
	if !j.NotBefore.IsZero() && from.Before(j.NotBefore) {
		from = j.NotBefore
	}
	if !j.NotAfter.IsZero() && !to.Before(j.NotAfter) {
		to = j.NotAfter.Add(time.Nanosecond)
	}
	var out []time.Time
	switch j.Kind {
	case EverySecond:
		for t := ceil(from, time.Second); t.Before(to); t = t.Add(time.Second) {
			out = append(out, t)
		}
	case TopOfMinute, Minute:
		sec := time.Duration(j.Second) * time.Second
		if j.Kind == TopOfMinute {
			sec = 0
		}
		for m := from.Truncate(time.Minute); m.Before(to); m = m.Add(time.Minute) {
			if t := m.Add(sec); !t.Before(from) && t.Before(to) {
				out = append(out, t)
			}
		}
	case Interval:
		k := int64(math.Ceil(float64(from.Sub(j.Anchor)) / float64(j.Every)))
		for t := j.Anchor.Add(time.Duration(k) * j.Every); t.Before(to); t = t.Add(j.Every) {
			if !t.Before(from) {
				out = append(out, t)
			}
		}
	case OneTime:
		if !j.At.Before(from) && j.At.Before(to) {
			out = append(out, j.At)
		}
	}
	return out
}

// ceil rounds t up to a multiple of d.
func ceil(t time.Time, d time.Duration) time.Time {
	if r := t.Truncate(d); r.Equal(t) {
		return t
	} else {
		return r.Add(d)
	}
}

// Schedule is the job's schedule as the registry takes it.
func (j Job) Schedule() *registryv1.Schedule {
	s := &registryv1.Schedule{TimeZone: "UTC"}
	switch j.Kind {
	case EverySecond:
		s.Kind = &registryv1.Schedule_Cron{Cron: "* * * * * *"}
	case TopOfMinute:
		s.Kind = &registryv1.Schedule_Cron{Cron: "0 * * * * *"}
	case Minute:
		s.Kind = &registryv1.Schedule_Cron{Cron: strconv.Itoa(j.Second) + " * * * * *"}
	case Interval:
		s.Kind = &registryv1.Schedule_Interval{Interval: &registryv1.Interval{
			Every: durationpb.New(j.Every), AnchorTime: timestamppb.New(j.Anchor),
		}}
	case OneTime:
		s.Kind = &registryv1.Schedule_At{At: timestamppb.New(j.At)}
	}
	if !j.NotBefore.IsZero() {
		s.StartTime = timestamppb.New(j.NotBefore)
	}
	if !j.NotAfter.IsZero() {
		s.EndTime = timestamppb.New(j.NotAfter)
	}
	return s
}

// Request is the CreateJobRequest of job i: an HTTP POST to targetURL/j/i,
// so the target knows which job a delivery belongs to.
func (p *Plan) Request(i int, targetURL string) *registryv1.CreateJobRequest {
	j := p.Jobs[i]
	return &registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: fmt.Sprintf("bench %d", i),
		Labels:      map[string]string{"bench": "mesh", "kind": kindLabel(j.Kind)},
		Schedule:    j.Schedule(),
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method: "POST", Url: targetURL + "/j/" + strconv.Itoa(i), Body: `{"bench":true}`,
		}}},
	}}
}

func kindLabel(k Kind) string {
	return cmp.Or(map[Kind]string{EverySecond: "second", TopOfMinute: "top", Minute: "minute", Interval: "interval", OneTime: "once"}[k], "other")
}
