package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/dispatchreq"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
)

// Limits of Backfill.
const (
	// MaxBackfillSlots is the most slots one Backfill call may cover.
	MaxBackfillSlots = 10_000
	// DefaultBackfillRate (slots per second) applies to a rate <= 0.
	DefaultBackfillRate = 100
	// MaxBackfillRate caps the rate.
	MaxBackfillRate = 1000
	// backfillBatch is the most slots one backfill transaction writes.
	backfillBatch = 100
)

// BackfillResult counts what Backfill did with the slots of its range.
type BackfillResult struct {
	// Fired: slots this call recorded and published.
	Fired int
	// Skipped: slots the ledger already held (fired, missed or backfilled
	// before, by the schedule or another backfill).
	Skipped int
}

// Backfill fires every slot of a live job's schedule in [start, end] that
// the ledger does not hold yet: ledger rows of kind backfill (epoch 0: not
// fenced, the ledger's key dedups) and their DispatchRequests, in
// transactions of at most 100 slots, at most rate fired slots per second on
// the store's clock (rate <= 0 means DefaultBackfillRate; above
// MaxBackfillRate it is capped). Skipped slots cost no rate.
//
// The range is clamped to the present (the clock's now): a backfill never
// fires a slot ahead of its time, which the schedule will fire. More than
// MaxBackfillSlots slots in the range is ErrTooManySlots, found before
// anything is written; end before start is ErrInvalidRange; an unknown,
// deleted or foreign job is ErrNotFound, also when the job is deleted while
// the backfill runs (checked in every transaction, under a share lock on the
// job row, whose current definition the messages carry).
//
// A backfill beyond the namespace's MaxBackfills running at once, on any
// node, is a *quota.ExceededError, found before anything is written (and
// after the checks above, so a wrong request takes no room).
//
// The slots' executions take the overlap policy overlap, or the job's when
// it is OVERLAP_POLICY_UNSPECIFIED.
//
// On an error (including ctx ending while it waits for the rate), the
// result counts what the committed transactions did: a retried call skips
// those slots.
func (s *Store) Backfill(ctx context.Context, namespace, jobID string, start, end time.Time, rate int, overlap registryv1.OverlapPolicy) (BackfillResult, error) {
	var res BackfillResult
	if end.Before(start) {
		return res, ErrInvalidRange
	}
	st, err := s.Job(ctx, namespace, jobID)
	if err != nil {
		return res, err
	}
	if rate <= 0 {
		rate = DefaultBackfillRate
	}
	rate = min(rate, MaxBackfillRate)
	t0 := s.clock.Now()
	if now := micros(t0); end.After(now) {
		end = now
	}
	sched, errs := s.locations.Schedule(st.Job.GetSchedule(), st.Job.GetCreateTime().AsTime())
	if len(errs) > 0 {
		return res, fmt.Errorf("job %s: schedule %s", jobID, errs[0])
	}
	var slots []time.Time
	for after := start.Add(-time.Nanosecond); ; {
		next, ok := sched.Next(after)
		if !ok || next.After(end) {
			break
		}
		if len(slots) == MaxBackfillSlots {
			return res, fmt.Errorf("%w: more than %d in [%s, %s]", ErrTooManySlots, MaxBackfillSlots,
				start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
		}
		slots = append(slots, micros(next))
		after = next
	}
	if len(slots) == 0 {
		return res, nil
	}
	id := uuid.MustParse(jobID)
	lease, err := s.claimBackfill(ctx, namespace, id)
	if err != nil {
		return res, err
	}
	defer lease.release(ctx)
	for len(slots) > 0 {
		if err := s.pace(ctx, t0, res.Fired, rate, lease); err != nil {
			return res, err
		}
		n := min(len(slots), backfillBatch)
		fired, err := s.backfillBatch(ctx, id, slots[:n], overlap)
		if err != nil {
			return res, err
		}
		res.Fired += fired
		res.Skipped += n - fired
		slots = slots[n:]
	}
	return res, nil
}

// pace waits until fired slots are within rate per second since t0,
// renewing lease between batches and at least every backfillRenewEvery of
// a long wait.
func (s *Store) pace(ctx context.Context, t0 time.Time, fired, rate int, lease *backfillLease) error {
	deadline := t0.Add(time.Duration(fired) * time.Second / time.Duration(rate))
	for {
		if err := lease.renew(ctx); err != nil {
			return err
		}
		wait := deadline.Sub(s.clock.Now())
		if wait <= 0 {
			return nil
		}
		if lease != nil {
			wait = min(wait, backfillRenewEvery)
		}
		select {
		case <-s.clock.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("backfill: %w", ctx.Err())
		}
	}
}

// backfillBatch records and publishes the slots the ledger does not hold and
// returns how many.
func (s *Store) backfillBatch(ctx context.Context, id uuid.UUID, slots []time.Time, overlap registryv1.OverlapPolicy) (int, error) {
	fired := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			namespace string
			version   int64
			deleted   bool
			paused    bool
			spec      []byte
		)
		err := tx.QueryRow(ctx, `SELECT namespace, version, deleted, paused, spec FROM jobs WHERE job_id = $1 FOR SHARE`, id).
			Scan(&namespace, &version, &deleted, &paused, &spec)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && deleted) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read job %s: %w", id, err)
		}
		job, err := decodeSpec(spec, id.String(), namespace, version, paused)
		if err != nil {
			return err
		}
		if overlap != registryv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED {
			job.OverlapPolicy = overlap
		}
		now := micros(s.clock.Now())
		var cols ledgerColumns
		for _, nominal := range slots {
			cols.add(id.String(), nominal, firing.Slot{Nominal: nominal, Kind: firing.KindBackfill}, executionID(id.String(), nominal), 0)
		}
		inserted, err := insertLedger(ctx, tx, &cols, now)
		if err != nil {
			return err
		}
		headers := s.traceHeaders(ctx)
		msgs := make([]outbox.Message, 0, len(inserted))
		for i, nominal := range slots {
			if !inserted[cols.execIDs[i]] {
				continue
			}
			msg, err := s.dispatchMessage(job, dispatchreq.Slot{
				JobID: id.String(), Version: version, Nominal: nominal, Fire: now, Kind: TriggerKind(firing.KindBackfill),
			}, headers)
			if err != nil {
				return err
			}
			msgs = append(msgs, msg)
		}
		fired = len(msgs)
		return s.writeOutbox(ctx, tx, msgs...)
	})
	if err != nil {
		return 0, fmt.Errorf("backfill job %s: %w", id, err)
	}
	if fired > 0 {
		s.notify()
	}
	return fired, nil
}
