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
type pace struct {
	since  time.Time // the run's start: seconds before it were not counted
	counts map[int64]int
}

func newPace(since time.Time) *pace {
	return &pace{since: since, counts: make(map[int64]int)}
}

// add counts one committed job whose slot fires at fireAt.
func (p *pace) add(fireAt time.Time) {
	p.counts[fireAt.Unix()]++
}

// usual is the mean number of jobs committed per second of firing time
// over the whole seconds of the last PaceWindow before now's second, or
// since the run started if that is later; 0 before a whole second has
// passed. Seconds without commits count as 0, so a burst after a quiet
// time is a spike. It also drops the counts older than the window.
func (p *pace) usual(now time.Time) float64 {
	end := now.Unix() // now's second, still being committed, is not counted
	from := end - int64(PaceWindow/time.Second)
	if s := p.since.Unix() + 1; s > from { // the run's first second is partial
		from = s
	}
	total := 0
	for sec, n := range p.counts {
		switch {
		case sec < end-int64(PaceWindow/time.Second):
			delete(p.counts, sec)
		case sec >= from && sec < end:
			total += n
		}
	}
	if end <= from {
		return 0
	}
	return float64(total) / float64(end-from)
}
