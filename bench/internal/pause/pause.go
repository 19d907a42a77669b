// Package pause waits on the wall clock for as long as the run's context
// lasts: the benchmarks' sleeps.
package pause

import (
	"context"
	"time"
)

// For waits d, or until ctx is done (its error then).
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Until waits until the wall clock reaches at, or until ctx is done.
func Until(ctx context.Context, at time.Time) error { return For(ctx, time.Until(at)) }
