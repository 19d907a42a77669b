package pipeline

import (
	"fmt"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
)

// DeadlineExceeded begins the reason of every execution dead-lettered by
// its deadline, so that alert rules and readers can match it.
const DeadlineExceeded = "deadline exceeded"

// attemptPastDeadline says why req's attempt must not start at now, or ""
// when it may. The execution deadline binds every attempt, the first
// included (a backlog in the dispatch queue ages a slot as much as
// retries do); the next slot binds only the retries of a series: a
// catch-up slot whose successor is already due is still delivered once.
func attemptPastDeadline(req *dispatchv1.DispatchRequest, now time.Time) string {
	if d := req.GetDeadlineTime(); d != nil && !now.Before(d.AsTime()) {
		return fmt.Sprintf("%s: attempt %d would start at %s, not before the execution deadline %s",
			DeadlineExceeded, req.Attempt, stamp(now), stamp(d.AsTime()))
	}
	if n := req.GetNextSlotTime(); n != nil && SeriesAttempt(req) > 1 && !now.Before(n.AsTime()) {
		return fmt.Sprintf("%s: retry %d would start at %s, not before the job's next slot at %s",
			DeadlineExceeded, req.Attempt, stamp(now), stamp(n.AsTime()))
	}
	return ""
}

// retryPastDeadline says why the retry of req that would start at start is
// not scheduled, or "" when it may be: a retry that could only be dropped
// when it comes back is dead-lettered now, while the last outcome is at
// hand, rather than parked for nothing.
func retryPastDeadline(req *dispatchv1.DispatchRequest, start time.Time) string {
	if d := req.GetDeadlineTime(); d != nil && !start.Before(d.AsTime()) {
		return fmt.Sprintf("%s: the retry would start at %s, not before the execution deadline %s",
			DeadlineExceeded, stamp(start), stamp(d.AsTime()))
	}
	if n := req.GetNextSlotTime(); n != nil && !start.Before(n.AsTime()) {
		return fmt.Sprintf("%s: the retry would start at %s, not before the job's next slot at %s",
			DeadlineExceeded, stamp(start), stamp(n.AsTime()))
	}
	return ""
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
