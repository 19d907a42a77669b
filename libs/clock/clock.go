// Package clock is the time source that long-running parts take as a
// dependency, so tests drive time instead of sleeping on the wall clock.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time and waits. Real uses the system clock (with Go's
// monotonic reading, so durations between two Now calls ignore wall-clock
// steps); Fake is moved by tests.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a manually advanced clock. Safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a Fake clock reading now.
func NewFake(now time.Time) *Fake { return &Fake{now: now} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After returns a channel that fires when the clock is advanced to or past
// now+d; at once for d <= 0.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	at := f.now.Add(d)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: at, ch: ch})
	return ch
}

// Advance moves the clock forward by d and fires every waiter now due.
func (f *Fake) Advance(d time.Duration) {
	f.Set(f.Now().Add(d))
}

// Set moves the clock to t (which may be earlier, to test clock steps) and
// fires every waiter now due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(t) {
			w.ch <- t
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
}

// Waiters is how many After channels are pending; tests use it to know a
// goroutine is blocked waiting before they advance the clock.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// Offset is a clock that reads its base shifted by an offset that may be
// changed while it runs (Set). Durations are the base's: After waits on the
// base, and two readings of Now subtract to the elapsed time (the offset is
// added to the monotonic reading as well) unless Set ran between them.
// The trigger uses it twice: to inject a skewed clock in fault-injection
// tests, and to correct a node's clock to PostgreSQL's.
type Offset struct {
	base   Clock
	offset atomic.Int64 // nanoseconds
}

// NewOffset returns base shifted by d.
func NewOffset(base Clock, d time.Duration) *Offset {
	o := &Offset{base: base}
	o.offset.Store(int64(d))
	return o
}

// Now returns the base's time plus the offset.
func (o *Offset) Now() time.Time { return o.base.Now().Add(o.Offset()) }

// After waits d on the base clock.
func (o *Offset) After(d time.Duration) <-chan time.Time { return o.base.After(d) }

// Offset returns the current offset.
func (o *Offset) Offset() time.Duration { return time.Duration(o.offset.Load()) }

// Set changes the offset for every later reading.
func (o *Offset) Set(d time.Duration) { o.offset.Store(int64(d)) }
