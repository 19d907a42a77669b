// Package eventmix makes the lifecycle events of attempts as the
// dispatcher emits them, for the benchmarks that feed a consumer of
// cronmesh.executions (history, alerting) without a dispatcher. Since
// ADR 0021 an attempt emits its outcome alone unless it is still running
// after the dispatcher's --started-event-after, when a STARTED precedes
// it; the outcome carries every field a STARTED would. A Mix says which
// share of attempts is that slow, so a benchmark measures production's
// events per execution, and SlowShare 1 gives the mix of reports made
// before ADR 0021 (a STARTED and an outcome per attempt).
//
// The events are libs/execevent's, as the dispatcher makes them, with the
// trace context its emit adds.
package eventmix

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/execevent"
)

// DefaultSlowShare is the share of slow attempts a benchmark assumes
// unless told otherwise: most webhooks answer in milliseconds.
const DefaultSlowShare = 0.01

// SlowShareUsage documents the --slow-share flag, in the same words in
// every benchmark that has it.
const SlowShareUsage = "the share of attempts slower than the dispatcher's --started-event-after, which also emit STARTED (0 to 1; 1: a STARTED and an outcome per attempt, the mix before ADR 0021)"

// Attempt durations for generated attempts: a quick one ends before the
// dispatcher's --started-event-after (250 ms by default), a slow one
// after it, so that an event's duration agrees with the mix.
const (
	QuickDuration = 35 * time.Millisecond
	SlowDuration  = 400 * time.Millisecond
)

// Mix says which attempts of a run are slow.
type Mix struct {
	// SlowShare is the share of attempts, 0 to 1, that emit a STARTED
	// before their outcome.
	SlowShare float64
}

// NewMix is the mix of slowShare, which must be within [0, 1].
func NewMix(slowShare float64) (Mix, error) {
	if math.IsNaN(slowShare) || slowShare < 0 || slowShare > 1 {
		return Mix{}, fmt.Errorf("--slow-share %v: must be within 0 and 1", slowShare)
	}
	return Mix{SlowShare: slowShare}, nil
}

// Slow reports whether attempt i (numbered from 0 in the order the run
// makes them) is slow. The slow attempts are spread evenly: exactly
// SlowCount(n) of the first n are slow, whatever n.
func (m Mix) Slow(i int) bool { return m.SlowCount(i+1) > m.SlowCount(i) }

// SlowCount is how many of the first n attempts are slow: n × SlowShare,
// rounded down.
func (m Mix) SlowCount(n int) int { return int(math.Floor(float64(n) * m.SlowShare)) }

// Events is how many events the first n attempts emit: one each, and a
// STARTED more for each slow one.
func (m Mix) Events(n int) int { return n + m.SlowCount(n) }

// Describe says the mix in a report's words, so that a reader can compare
// an events/s figure with a report made under another mix.
func (m Mix) Describe() string {
	if m.SlowShare == 1 {
		return "a STARTED and an outcome per execution (--slow-share 1, the mix before ADR 0021: every attempt announced)"
	}
	return fmt.Sprintf("an outcome per execution, preceded by a STARTED for %s of them (--slow-share %v: the attempts slower than the dispatcher's --started-event-after, ADR 0021); reports before ADR 0021 used a STARTED and an outcome per execution (--slow-share 1)",
		percent(m.SlowShare), m.SlowShare)
}

func percent(share float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", share*100), "0"), ".") + " %"
}

// Attempt is one attempt of an execution as the dispatcher knows it when
// the attempt ends.
type Attempt struct {
	// Request is the dispatch message the attempt serves: the events copy
	// its execution, job, times, trigger kind, labels and rerun fields.
	Request *dispatchv1.DispatchRequest
	// Start is when the request went out; Duration how long it took.
	Start    time.Time
	Duration time.Duration
	// Outcome is the kind of the outcome event: SUCCEEDED, FAILED or DEAD
	// (a CANCELLED or an expired DEAD follows no attempt and carries no
	// start, which this package does not make).
	Outcome eventsv1.ExecutionEventKind
	// Retry is, for a FAILED, the delay before the next attempt; 0: none
	// scheduled.
	Retry time.Duration
	// Status and Excerpt are the target's response; Reason the outcome's
	// reason (empty for a success).
	Status  int
	Excerpt string
	Reason  string
	// Trace is the attempt's trace: both of its events carry it.
	Trace Trace
}

// Trace is an attempt's trace context as the dispatcher passes it on
// when its trace is not sampled (the usual case without export): the
// trace id, and a traceparent of the dispatcher's span, flagged not
// sampled.
type Trace struct {
	ID          string // 32 hex digits
	TraceParent string
}

// NewTrace is a fresh unsampled trace context.
func NewTrace() Trace {
	var b [24]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:16])
	return Trace{ID: id, TraceParent: "00-" + id + "-" + hex.EncodeToString(b[16:]) + "-00"}
}

// Events is the attempt's events in the order the dispatcher emits them:
// its STARTED when slow, then its outcome.
func Events(a Attempt, slow bool) []*eventsv1.ExecutionEvent {
	if slow {
		return []*eventsv1.ExecutionEvent{Started(a), Outcome(a)}
	}
	return []*eventsv1.ExecutionEvent{Outcome(a)}
}

// Started is the attempt's STARTED event, which the dispatcher stamps
// with the attempt's start as its start and occur time whenever it emits
// it.
func Started(a Attempt) *eventsv1.ExecutionEvent {
	return withTrace(execevent.New(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, a.Request, a.Start,
		execevent.Attempt{Start: a.Start}, "", a.Trace.ID), a.Trace)
}

// Outcome is the attempt's outcome event, at the attempt's end. Like the
// dispatcher's, it carries the start time, so that a consumer that sees
// no STARTED knows all a STARTED would have said.
func Outcome(a Attempt) *eventsv1.ExecutionEvent {
	return withTrace(execevent.New(a.Outcome, a.Request, a.Start.Add(a.Duration), execevent.Attempt{
		Start: a.Start, Duration: a.Duration, Status: a.Status, Excerpt: a.Excerpt, Retry: a.Retry,
	}, a.Reason, a.Trace.ID), a.Trace)
}

// withTrace adds the trace context the dispatcher's emit adds to every
// event of an attempt.
func withTrace(ev *eventsv1.ExecutionEvent, t Trace) *eventsv1.ExecutionEvent {
	if t.TraceParent != "" {
		ev.TraceContext = map[string]string{"traceparent": t.TraceParent}
	}
	return ev
}
