// Package clock is the time source that long-running parts take as a
// dependency, so tests drive time instead of sleeping on the wall clock.
package clock

import (
	"slices"
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
	// AfterFunc calls f once d has passed, unless the Timer it returns is
	// stopped first. Unlike After it holds no goroutine while it waits,
	// and a stopped timer is gone: for a wait that usually ends early.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started, and reports whether
	// it did; false means the call has started (or was stopped before).
	Stop() bool
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// AfterFunc returns time.AfterFunc(d, f): f runs in its own goroutine.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a manually advanced clock. Safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	timers  []*fakeTimer
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// fakeTimer is a pending AfterFunc of a Fake.
type fakeTimer struct {
	clock *Fake
	at    time.Time
	f     func()
}

// Stop removes the timer if it is pending.
func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	for i, p := range t.clock.timers {
		if p == t {
			t.clock.timers = append(t.clock.timers[:i], t.clock.timers[i+1:]...)
			return true
		}
	}
	return false
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

// AfterFunc calls f once the clock is advanced to or past now+d (at once
// for d <= 0). Unlike time.AfterFunc, f runs on the goroutine that
// advances the clock, before Advance or Set returns, so a test knows it
// has run.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{clock: f, f: fn}
	f.mu.Lock()
	if d <= 0 {
		f.mu.Unlock()
		fn()
		return t
	}
	t.at = f.now.Add(d)
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	return t
}

// Advance moves the clock forward by d and fires every waiter and timer
// now due.
func (f *Fake) Advance(d time.Duration) {
	f.Set(f.Now().Add(d))
}

// Set moves the clock to t (which may be earlier, to test clock steps) and
// fires every waiter and timer now due; the timers' functions run after
// the clock is unlocked (they may read it), in the order they are due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
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
	var due []*fakeTimer
	keptTimers := f.timers[:0]
	for _, tm := range f.timers {
		if !tm.at.After(t) {
			due = append(due, tm)
		} else {
			keptTimers = append(keptTimers, tm)
		}
	}
	clear(f.timers[len(keptTimers):])
	f.timers = keptTimers
	f.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	for _, tm := range due {
		tm.f()
	}
}

// Waiters is how many After channels are pending; tests use it to know a
// goroutine is blocked waiting before they advance the clock.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// Timers is how many AfterFunc timers are pending (neither due nor
// stopped).
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
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

// AfterFunc waits d on the base clock.
func (o *Offset) AfterFunc(d time.Duration, f func()) Timer { return o.base.AfterFunc(d, f) }

// Offset returns the current offset.
func (o *Offset) Offset() time.Duration { return time.Duration(o.offset.Load()) }

// Set changes the offset for every later reading.
func (o *Offset) Set(d time.Duration) { o.offset.Store(int64(d)) }
