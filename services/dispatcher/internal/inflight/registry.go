package inflight

import (
	"context"
	"errors"
	"sync"
)

// ErrAborted is the cause of an attempt's context when its execution was
// cancelled.
var ErrAborted = errors.New("execution cancelled")

// Ref names an execution of a namespace. Executions are keyed by both so
// that a cancel of one tenant never reaches another's execution of the
// same id.
type Ref struct {
	Namespace   string
	ExecutionID string
}

// Registry is the attempts in flight on this replica. The zero value is
// not usable: call NewRegistry. Safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	attempts map[Ref]map[*attempt]struct{}
}

type attempt struct{ cancel context.CancelCauseFunc }

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{attempts: map[Ref]map[*attempt]struct{}{}}
}

// Track registers an attempt of ref and returns its context (a child of
// ctx, cancelled with ErrAborted by Abort) and the release to call when the
// attempt is over. Several attempts of one ref may be tracked at once (a
// redelivery racing its original): Abort stops them all.
func (r *Registry) Track(ctx context.Context, ref Ref) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	a := &attempt{cancel: cancel}
	r.mu.Lock()
	set := r.attempts[ref]
	if set == nil {
		set = map[*attempt]struct{}{}
		r.attempts[ref] = set
	}
	set[a] = struct{}{}
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		delete(set, a)
		// set is still the ref's: it leaves the map only once empty.
		if len(set) == 0 {
			delete(r.attempts, ref)
		}
		r.mu.Unlock()
		cancel(nil)
	}
}

// Abort cancels every tracked attempt of ref with ErrAborted and reports
// whether there was one.
func (r *Registry) Abort(ref Ref) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.attempts[ref]
	for a := range set {
		a.cancel(ErrAborted)
	}
	return len(set) > 0
}

// Aborted reports whether ctx, a context returned by Track, was aborted.
func Aborted(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrAborted)
}
