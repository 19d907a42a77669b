package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BackfillQuota is the quota name of concurrent backfills, in
// quota_refusals_total and QuotaFailure details.
const BackfillQuota = "concurrent_backfills"

const (
	// backfillLeaseTTL is how long a running backfill's row outlives its
	// last renewal: the longest a dead node's backfill keeps counting.
	backfillLeaseTTL = time.Minute
	// backfillRenewEvery is how often a running backfill renews its row,
	// between batches and while it waits for its rate.
	backfillRenewEvery = backfillLeaseTTL / 3
	// backfillReleaseTimeout bounds the delete of the row when the
	// backfill ends, also when its caller has gone.
	backfillReleaseTimeout = 5 * time.Second
)

// backfillLease is a running backfill's row in the backfills table; a nil
// *backfillLease (no quota) does nothing.
type backfillLease struct {
	store     *Store
	id        uuid.UUID
	namespace string
	jobID     uuid.UUID
	start     time.Time
	renewed   time.Time
}

// claimBackfill records a backfill of jobID about to run in namespace, or
// returns a *quota.ExceededError when the namespace already runs its
// MaxBackfills. Claims of a namespace take a transaction-scoped advisory
// lock on it, drop the expired rows of dead nodes and count the others, so
// concurrent claims on any node cannot together overshoot. No quota: no
// row, and a nil lease.
func (s *Store) claimBackfill(ctx context.Context, namespace string, jobID uuid.UUID) (*backfillLease, error) {
	limit := s.maxBackfills.Limit(namespace)
	if limit == 0 {
		return nil, nil
	}
	now := s.clock.Now()
	l := &backfillLease{store: s, id: uuid.Must(uuid.NewV7()), namespace: namespace, jobID: jobID, start: now, renewed: now}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '/backfills/' || $1, 0))`, namespace); err != nil {
			return fmt.Errorf("lock the backfills of namespace %s: %w", namespace, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM backfills WHERE namespace = $1 AND expire_time <= $2`, namespace, now); err != nil {
			return fmt.Errorf("drop expired backfills: %w", err)
		}
		var running int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM backfills WHERE namespace = $1`, namespace).Scan(&running); err != nil {
			return fmt.Errorf("count running backfills: %w", err)
		}
		if err := s.maxBackfills.Check(namespace, running, 1); err != nil {
			return err
		}
		return l.write(ctx, tx, now)
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// write inserts or renews the lease's row to expire backfillLeaseTTL after
// now. An upsert: a row that expired and was dropped while its backfill
// still ran (a database slower than the TTL) comes back.
func (l *backfillLease) write(ctx context.Context, q execer, now time.Time) error {
	_, err := q.Exec(ctx, `
		INSERT INTO backfills (id, namespace, job_id, node_id, start_time, expire_time)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (id) DO UPDATE SET expire_time = EXCLUDED.expire_time`,
		l.id, l.namespace, l.jobID, l.store.nodeID, l.start, now.Add(backfillLeaseTTL))
	if err != nil {
		return fmt.Errorf("record running backfill: %w", err)
	}
	return nil
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// renew pushes the row's expiry ahead once backfillRenewEvery has passed
// since the last renewal.
func (l *backfillLease) renew(ctx context.Context) error {
	if l == nil {
		return nil
	}
	now := l.store.clock.Now()
	if now.Sub(l.renewed) < backfillRenewEvery {
		return nil
	}
	if err := l.write(ctx, l.store.pool, now); err != nil {
		return err
	}
	l.renewed = now
	return nil
}

// release deletes the row, also when ctx has ended (the caller went away);
// if that fails the row expires.
func (l *backfillLease) release(ctx context.Context) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backfillReleaseTimeout)
	defer cancel()
	_, _ = l.store.pool.Exec(ctx, `DELETE FROM backfills WHERE id = $1`, l.id)
}
