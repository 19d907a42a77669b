package pipeline

import (
	"context"
	"sync"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/execevent"
)

// startAnnouncement is the STARTED event of one attempt: emitted when the
// attempt starts, or by a timer once it has run Options.StartedEventAfter,
// or never if the attempt ends first. settle closes it, so the event is
// either emitted before settle returns (and settle returns its confirm,
// which the message's acknowledgement waits for) or not at all: never
// after the outcome, never unawaited.
type startAnnouncement struct {
	timer clock.Timer // nil: emitted at the start

	mu      sync.Mutex
	settled bool
	// confirm is the emitted event's confirm; nil while not emitted.
	confirm <-chan error
}

// announceStart emits req's STARTED event (start time start), at once
// when Options.StartedEventAfter is zero, else once the attempt has run
// that long on the pipeline's clock, unless settle is called before. ctx
// is the message's context: the timer emits in the attempt's trace.
func (p *Pipeline) announceStart(ctx context.Context, req *dispatchv1.DispatchRequest, start time.Time, traceID string) *startAnnouncement {
	a := &startAnnouncement{}
	emit := func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.settled {
			// The timer fired as the attempt ended: its outcome tells.
			return
		}
		// The occur time is the start, as if emitted then: the event
		// says the attempt started at start, whenever it is sent.
		a.confirm = p.emit(ctx, execevent.New(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, req, start, execevent.Attempt{Start: start}, "", traceID))
		p.metrics.startedEvents.Inc()
	}
	if p.opts.StartedEventAfter <= 0 {
		emit()
		return a
	}
	a.timer = p.opts.Clock.AfterFunc(p.opts.StartedEventAfter, emit)
	return a
}

// settle stops the announcement once the attempt has ended and returns
// the confirm of the STARTED it emitted, nil if it emitted none. A timer
// firing concurrently either emitted before settle took the lock (its
// confirm is returned) or finds it settled and emits nothing.
func (a *startAnnouncement) settle() <-chan error {
	if a.timer != nil {
		a.timer.Stop()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settled = true
	return a.confirm
}
