package pipeline

import (
	"context"
	"sync"
	"time"
)

// senderIdle is how long a sender goroutine may wait for an attempt
// before it exits; senderSweep is how often that is checked.
const (
	senderIdle  = 10 * time.Second
	senderSweep = time.Second
)

// senders makes the attempts' sending (deliver.Attempt.Make, down through
// net/http) on goroutines kept for it, the most recently idle first.
//
// A request is handled on a goroutine of its own, which starts with a
// small stack; grown on the way down into the HTTP transport, that stack
// is doubled and copied several times, each copy walking every frame
// below it (runtime.newstack was 11 % of the dispatcher's CPU in a profile
// of the mix at 2,000/s, 2026-12-07). A sender's stack has grown to what
// sending takes. It keeps it only while it is busy or briefly idle: the
// collector halves the stack of a goroutine that uses less than a quarter
// of it when scanned, which an idle goroutine always does. Handing each
// attempt to the most recently idle sender keeps the busy few warm and
// lets the rest go idle long enough to exit; goroutines kept for whole
// requests instead (which are held until their slot, shallow) lost their
// stacks while held and cost more than they saved (docs/benchmarks,
// 2026-12-07).
//
// At most as many attempts are sent at once as there are delivery slots,
// so the senders number at most that many.
type senders struct {
	mu   sync.Mutex
	idle []*sender // by the time they went idle, the most recent last
	// stopped is set by stop: no sender is made or kept after it.
	stopped bool
}

type sender struct {
	attempts chan func()
	since    time.Time
}

// send runs f on an idle sender, or on a new one if none is idle.
func (s *senders) send(f func()) {
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		w := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		w.attempts <- f
		return
	}
	s.mu.Unlock()
	go s.work(&sender{attempts: make(chan func(), 1)}, f)
}

func (s *senders) work(w *sender, f func()) {
	for f != nil {
		f()
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return
		}
		w.since = time.Now()
		s.idle = append(s.idle, w)
		s.mu.Unlock()
		f = <-w.attempts // nil: sweep or stop let it go
	}
}

// sweep lets go of the senders idle longer than idle (at now).
func (s *senders) sweep(now time.Time, idle time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < len(s.idle) && now.Sub(s.idle[n].since) > idle {
		close(s.idle[n].attempts)
		n++
	}
	s.idle = append(s.idle[:0], s.idle[n:]...)
}

// run sweeps the idle senders until ctx ends, then stops them all. The
// pipeline's workers, which send, have returned by then.
func (s *senders) run(ctx context.Context) {
	t := time.NewTicker(senderSweep)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			s.sweep(now, senderIdle)
		case <-ctx.Done():
			s.stop()
			return
		}
	}
}

func (s *senders) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for _, w := range s.idle {
		close(w.attempts)
	}
	s.idle = nil
}

// len is how many senders are idle.
func (s *senders) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.idle)
}
