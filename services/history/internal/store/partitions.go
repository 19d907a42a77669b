package store

import (
	"context"
	"fmt"
	"time"

	"github.com/cronmesh/cronmesh/libs/daypart"
)

// MaintainResult says what Maintain changed.
type MaintainResult = daypart.Result

// partitionSet is the store's day-partitioned tables: executions and
// attempts share their days (see libs/daypart).
func (s *Store) partitionSet() daypart.Set {
	return daypart.Set{Tables: []string{"executions", "attempts"}, LockName: "cronmesh.history.partitions/" + s.schema}
}

// Maintain makes the partitions match now: every day from the retention
// cutoff to Ahead days after today exists, and every day wholly older than
// the cutoff is dropped (DROP TABLE of the day's partitions: retention never
// deletes rows, so it costs no vacuum and no bloat). It is idempotent and
// safe to run from several replicas at once.
func (s *Store) Maintain(ctx context.Context, now time.Time) (MaintainResult, error) {
	cutoff := s.Cutoff(now)
	last := day(now).AddDate(0, 0, s.ahead)
	res, err := s.partitionSet().Maintain(ctx, s.pool, cutoff, last)
	if err != nil {
		return MaintainResult{}, err
	}
	s.mu.Lock()
	for _, d := range res.Dropped {
		delete(s.days, d)
	}
	for d := cutoff; !d.After(last); d = d.AddDate(0, 0, 1) {
		s.days[d] = true
	}
	s.mu.Unlock()
	return res, nil
}

// Days returns the days that have partitions, oldest first.
func (s *Store) Days(ctx context.Context) ([]time.Time, error) {
	return s.partitionSet().Days(ctx, s.pool)
}

// ensureDays creates the partitions of days that are missing (an event
// about a slot beyond the days Maintain created ahead, such as a one-off job
// due in a month). Days already known are skipped without a query.
func (s *Store) ensureDays(ctx context.Context, days []time.Time) error {
	s.mu.Lock()
	var missing []time.Time
	for _, d := range days {
		if !s.days[d] {
			missing = append(missing, d)
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	if err := s.partitionSet().Ensure(ctx, s.pool, missing); err != nil {
		return fmt.Errorf("create partitions: %w", err)
	}
	s.mu.Lock()
	for _, d := range missing {
		s.days[d] = true
	}
	s.mu.Unlock()
	return nil
}
