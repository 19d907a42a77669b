package inflight

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// Defaults of WatcherOptions.
const (
	DefaultPollInterval = 250 * time.Millisecond
	// DefaultOverlap is how far back each read starts before the newest
	// record seen: a cancellation whose transaction took its recorded_at
	// before another's but committed after it is still read.
	DefaultOverlap = 5 * time.Second
	// DefaultRetention matches the dispatcher's cancellation retention:
	// what the janitor deletes from the table is forgotten here too.
	DefaultRetention = 14 * 24 * time.Hour
	// DefaultMaxKnown bounds the memory of the known set (about 100 bytes
	// an entry): past it the pipeline asks the database (see
	// WatcherOptions.MaxKnown).
	DefaultMaxKnown = 1_000_000
	// pageSize bounds one read.
	pageSize = 1000
)

// Feed is where the Watcher reads cancellations; *store.Store is one.
type Feed interface {
	CancellationsSince(ctx context.Context, since time.Time, limit int) ([]store.Cancellation, error)
}

// WatcherOptions for NewWatcher.
type WatcherOptions struct {
	// Feed is read every PollInterval. Required.
	Feed Feed
	// Registry is aborted for every cancellation read. Required.
	Registry *Registry
	// PollInterval, Overlap, Retention: defaults DefaultPollInterval,
	// DefaultOverlap, DefaultRetention.
	PollInterval, Overlap, Retention time.Duration
	// MaxKnown caps the known set. A cancellation that does not fit is
	// not remembered; from then until it is older than Retention, Full
	// is true and the pipeline asks the database about every request
	// instead (correct, one round trip slower).
	// It bounds what a key that cancels made-up ids could make every
	// replica hold. Default DefaultMaxKnown.
	MaxKnown int
	// Clock ticks the polls and ages the known set. Default clock.Real.
	Clock clock.Clock
	// Logger receives failed reads. Nil discards.
	Logger *slog.Logger
}

// Watcher follows the cancellations (see the package documentation).
// Create with NewWatcher, run with Run.
type Watcher struct {
	opts   WatcherOptions
	logger *slog.Logger
	mu     sync.Mutex
	known  map[Ref]time.Time // by when this replica learnt of it
	since  time.Time         // the newest recorded_at read
	// refused is when a cancellation last did not fit the known set; the
	// zero time when none has within the retention.
	refused   time.Time
	pruned    time.Time // when the set was last pruned
	ready     chan struct{}
	readyOnce sync.Once
}

// NewWatcher validates opts and applies the defaults.
func NewWatcher(opts WatcherOptions) (*Watcher, error) {
	switch {
	case opts.Feed == nil:
		return nil, errors.New("inflight: Feed is required")
	case opts.Registry == nil:
		return nil, errors.New("inflight: Registry is required")
	case opts.PollInterval < 0 || opts.Overlap < 0 || opts.Retention < 0 || opts.MaxKnown < 0:
		return nil, errors.New("inflight: durations and MaxKnown must not be negative")
	}
	opts.PollInterval = cmp.Or(opts.PollInterval, DefaultPollInterval)
	opts.Overlap = cmp.Or(opts.Overlap, DefaultOverlap)
	opts.Retention = cmp.Or(opts.Retention, DefaultRetention)
	opts.MaxKnown = cmp.Or(opts.MaxKnown, DefaultMaxKnown)
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	return &Watcher{
		opts:   opts,
		logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		known:  map[Ref]time.Time{},
		ready:  make(chan struct{}),
	}, nil
}

// Ready is closed after the first complete read: from then on Known
// answers for every cancellation recorded before Run started.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Run reads the feed every PollInterval until ctx ends; a failed read is
// logged and tried again at the next tick. It returns nil.
func (w *Watcher) Run(ctx context.Context) error {
	for {
		if err := w.poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.logger.WarnContext(ctx, "reading cancellations failed; in-flight attempts are aborted once it succeeds", slog.Any("error", err))
		} else {
			w.readyOnce.Do(func() { close(w.ready) })
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.opts.Clock.After(w.opts.PollInterval):
		}
	}
}

// poll reads everything recorded since the last read (with the overlap),
// page by page, and applies it.
func (w *Watcher) poll(ctx context.Context) error {
	w.mu.Lock()
	since := w.since
	w.mu.Unlock()
	if !since.IsZero() {
		since = since.Add(-w.opts.Overlap)
	}
	for {
		page, err := w.opts.Feed.CancellationsSince(ctx, since, pageSize)
		if err != nil {
			return err
		}
		now := w.opts.Clock.Now()
		w.mu.Lock()
		// A scan of the whole set holds the lock: once a minute is enough
		// for entries kept for days.
		if now.Sub(w.pruned) >= time.Minute {
			w.pruned = now
			for ref, at := range w.known {
				if now.Sub(at) > w.opts.Retention {
					delete(w.known, ref)
				}
			}
		}
		if !w.refused.IsZero() && now.Sub(w.refused) > w.opts.Retention {
			w.refused = time.Time{}
		}
		for _, c := range page {
			w.remember(Ref{Namespace: c.Namespace, ExecutionID: c.ExecutionID}, now)
			if c.RecordedAt.After(w.since) {
				w.since = c.RecordedAt
			}
		}
		w.mu.Unlock()
		for _, c := range page {
			w.opts.Registry.Abort(Ref{Namespace: c.Namespace, ExecutionID: c.ExecutionID})
		}
		if len(page) < pageSize || !page[len(page)-1].RecordedAt.After(since) {
			return nil
		}
		since = page[len(page)-1].RecordedAt
	}
}

// Cancel makes a cancellation just recorded in the store effective on
// this replica at once: the execution is known cancelled and its attempts
// in flight here are aborted. It reports whether one was. Other replicas
// learn of it from the feed.
func (w *Watcher) Cancel(ref Ref) (abortedHere bool) {
	w.mu.Lock()
	w.remember(ref, w.opts.Clock.Now())
	w.mu.Unlock()
	return w.opts.Registry.Abort(ref)
}

// remember adds ref to the known set if it fits. Called with mu held.
func (w *Watcher) remember(ref Ref, now time.Time) {
	if _, ok := w.known[ref]; ok {
		return
	}
	if len(w.known) >= w.opts.MaxKnown {
		if w.refused.IsZero() {
			w.logger.Warn("too many cancellations to keep in memory; every request is checked against the database until they age out",
				slog.Int("max_known", w.opts.MaxKnown))
		}
		w.refused = now
		return
	}
	w.known[ref] = now
}

// Known reports whether ref is cancelled, as far as this replica has
// read and remembers: a no is certain unless Full.
func (w *Watcher) Known(ref Ref) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.known[ref]
	return ok
}

// Full reports whether a cancellation within the retention did not fit the
// known set (WatcherOptions.MaxKnown): Known's no is then not certain, and
// the database must be asked.
func (w *Watcher) Full() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.refused.IsZero()
}

// Forget drops ref from the known set: its cancellation is no longer in
// the store (a redrive lifts it). The feed adds it again if it is
// cancelled anew.
func (w *Watcher) Forget(ref Ref) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.known, ref)
}

// Registry is the registry the Watcher aborts.
func (w *Watcher) Registry() *Registry { return w.opts.Registry }
