package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronmesh/cronmesh/libs/clock"
)

// backlog counts the requests waiting for a delivery slot, and holds back
// the publishing of lifecycle events while any is waiting.
//
// Cron's load comes in crowds: thousands of slots due on one second, held
// by the dispatcher until it and then delivered as fast as the slots turn
// over. Each delivery's consequences (its events' publish and confirm,
// then the history's, alerting's and the registry's decoding and writes,
// the completion record, the acknowledgement) cost the machine more than
// the delivery itself. Published as the first deliveries end, they take
// the cores from the crowd's later deliveries, and the crowd reaches its
// targets later. Held until no request waits for a slot, they run once the
// crowd is delivered. The events' consumers see them later by as much, and
// the messages are acknowledged later; nothing is delivered later.
//
// A backlog that does not clear (slow targets holding every slot, or a
// crowd larger than the deliveries of maxHold) holds the events back for
// maxHold once, then lets them through until it has cleared.
type backlog struct {
	clock   clock.Clock
	maxHold time.Duration
	gauge   prometheus.Gauge

	mu      sync.Mutex
	waiting int
	// released is closed while the events may be published: no request
	// is waiting, or the backlog has held them for maxHold.
	released chan struct{}
	timer    clock.Timer
}

func newBacklog(c clock.Clock, maxHold time.Duration, gauge prometheus.Gauge) *backlog {
	released := make(chan struct{})
	close(released)
	return &backlog{clock: c, maxHold: maxHold, gauge: gauge, released: released}
}

// enter counts a request that waits for a delivery slot. The first one
// holds the events back, for maxHold at most.
func (b *backlog) enter() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting++
	b.gauge.Inc()
	if b.waiting > 1 || b.maxHold <= 0 || !isClosed(b.released) {
		return
	}
	b.released = make(chan struct{})
	held := b.released
	b.timer = b.clock.AfterFunc(b.maxHold, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.released == held {
			b.release()
		}
	})
}

// leave uncounts a request that took its slot or stopped waiting. The
// last one lets the events through.
func (b *backlog) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting--
	b.gauge.Dec()
	if b.waiting == 0 {
		b.release()
	}
}

// release lets the events through; b.mu is held.
func (b *backlog) release() {
	if isClosed(b.released) {
		return
	}
	close(b.released)
	b.timer.Stop()
}

// wait returns once the events may be published, or ctx is done, and says
// how long it waited.
func (b *backlog) wait(ctx context.Context) time.Duration {
	b.mu.Lock()
	released := b.released
	b.mu.Unlock()
	if isClosed(released) {
		return 0
	}
	start := time.Now()
	select {
	case <-released:
	case <-ctx.Done():
	}
	return time.Since(start)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
