package firing

import "time"

// PaceWindow is how far back a node looks for its usual second: the slots
// it committed per second of firing time over the last PaceWindow.
const PaceWindow = 10 * time.Second

// pace counts the jobs a node committed per second of firing time, over
// the seconds of the last PaceWindow. It is what makes a crowd a spike
// (Options.CrowdFactor): the engine's heap holds each job's next slot
// only, so a node with thousands of every-second crons holds all of them
// in the next second and none in the seconds after, and the heap alone
// cannot tell that second from a burst. What the node has been committing
// can: the same thousands, every second. Not safe for concurrent use; the
// engine's loop owns it.
//
// The counts are a ring of one entry per second, long enough for the
// window behind now and the lookahead in front of it (a crowd commits its
// second ahead), so it never grows and a count older than the ring holds
// is dropped on arrival.
type pace struct {
	since time.Time // the run's start: seconds before it were not counted
	ring  []paceSecond
}

type paceSecond struct {
	unix int64 // the second this entry counts; 0: none yet
	jobs int
}

// newPace returns a pace for a run started at since whose commits reach
// up to lookahead ahead of now.
func newPace(since time.Time, lookahead time.Duration) *pace {
	return &pace{since: since, ring: make([]paceSecond, int((PaceWindow+lookahead)/time.Second)+2)}
}

// add counts one committed job whose slot fires at fireAt.
func (p *pace) add(fireAt time.Time) {
	sec := fireAt.Unix()
	s := &p.ring[int(uint64(sec)%uint64(len(p.ring)))]
	switch {
	case s.unix == sec:
		s.jobs++
	case s.unix < sec:
		*s = paceSecond{unix: sec, jobs: 1}
	}
}

// usual is the mean number of jobs committed per second of firing time
// over the whole seconds of the last PaceWindow before now's second, or
// since the run started if that is later; 0 before a whole second has
// passed. Seconds without commits count as 0, so a burst after a quiet
// time is a spike.
func (p *pace) usual(now time.Time) float64 {
	end := now.Unix()                                                // now's second, still being committed, is not counted
	from := max(end-int64(PaceWindow/time.Second), p.since.Unix()+1) // the run's first second is partial
	if end <= from {
		return 0
	}
	total := 0
	for _, s := range p.ring {
		if s.unix >= from && s.unix < end {
			total += s.jobs
		}
	}
	return float64(total) / float64(end-from)
}
