package pipeline

import (
	"sync/atomic"
	"time"
)

// handlerIdle is how long a handler goroutine waits for the next request
// before it exits.
const handlerIdle = 10 * time.Second

// handlers runs the requests of packed messages, each on its own
// goroutine, on goroutines that outlive them. Handling a request is deep
// (the trace context's extraction, the HTTP transport, the confirms), and
// a fresh goroutine grows its stack to that depth by doubling and copying
// it several times: 11 % of the dispatcher's CPU in a profile of the mix
// at 2,000/s (runtime.newstack, 2026-12-07), with a goroutine per request.
// A goroutine that already handled one starts the next on the stack it
// grew. Nothing bounds how many run at once (a request may be held until
// its slot, or wait for a delivery slot, and the others must not wait
// behind it); one that finds nothing to do for handlerIdle exits.
type handlers struct {
	tasks chan func()
	idle  time.Duration
	// live is how many handler goroutines exist, for the tests.
	live atomic.Int64
}

func newHandlers(idle time.Duration) *handlers {
	return &handlers{tasks: make(chan func()), idle: idle}
}

// Go runs f on an idle handler goroutine, or on a new one if none is
// idle.
func (h *handlers) Go(f func()) {
	select {
	case h.tasks <- f:
	default:
		h.live.Add(1)
		go h.work(f)
	}
}

func (h *handlers) work(f func()) {
	defer h.live.Add(-1)
	idle := time.NewTimer(h.idle)
	defer idle.Stop()
	for {
		f()
		f = nil // not kept alive while waiting
		idle.Reset(h.idle)
		select {
		case f = <-h.tasks:
		case <-idle.C:
			return
		}
	}
}
