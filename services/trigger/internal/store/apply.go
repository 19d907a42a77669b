package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/ring"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
)

// Applied says what Apply did with an event.
type Applied int

// Outcomes of Apply.
const (
	// Upserted: the job row now holds the event's version.
	Upserted Applied = iota + 1
	// Stale: the store already holds this version or a newer one (a
	// redelivery, or an older event overtaken by a newer one); nothing
	// changed.
	Stale
	// Fired: a run request's manual slot entered the ledger and the outbox.
	Fired
	// DuplicateRun: the run request's slot was already in the ledger (the
	// event was delivered twice); nothing was published again.
	DuplicateRun
	// DroppedRun: the run request is for a job the store knows is deleted.
	DroppedRun
)

// String names the outcome for logs and metric labels.
func (a Applied) String() string {
	switch a {
	case Upserted:
		return "upserted"
	case Stale:
		return "stale"
	case Fired:
		return "fired"
	case DuplicateRun:
		return "duplicate_run"
	case DroppedRun:
		return "dropped_run"
	default:
		return "unknown"
	}
}

// maxApplyAttempts bounds the retries of an upsert that lost the race to
// create a job row (another consumer inserted it concurrently); the second
// attempt always finds the row.
const maxApplyAttempts = 3

// storedJob is what Apply reads of a job row before changing it.
type storedJob struct {
	version     int64
	deleted     bool
	paused      bool
	nextFire    *time.Time
	lastNominal *time.Time
}

// Apply projects one registry job event into the store, idempotently: an
// event is applied only if its version is newer than the stored row's, so a
// redelivered or overtaken event changes nothing (Stale). Several consumers
// may apply events of one job concurrently: the row lock orders them and the
// version decides. now is the consumer's clock: the row's update time, and
// the fire time of a run request's slot.
//
// CREATED, UPDATED, PAUSED and RESUMED store the event's job and its next
// slot (none while paused). DELETED leaves a tombstone (deleted, no spec, no
// next slot) whose version blocks every older event, so a late one cannot
// resurrect the job. The next slot is the schedule's first slot after:
//
//   - CREATED, or any kind for a job the store has no row of: the job's
//     create time (no slot of it was handled yet; the engine's catch-up
//     window decides what is fired late and what is recorded missed);
//   - RESUMED: the event's occur time (slots while paused are not fired);
//   - UPDATED: the event's occur time (a changed schedule takes effect from
//     its next slot), but no later than just before the stored next slot
//     when the stored row was live: a slot already due and not yet committed
//     (the engine lagging, or the trigger down) is not skipped silently by
//     an unrelated update;
//
// and in every case never at or before the newest slot a firing commit
// recorded (last_nominal), so no slot is fired twice by a schedule change.
//
// RUN_REQUESTED does not touch the job row: in one transaction it records
// the manual slot at the request's nominal time (ON CONFLICT DO NOTHING) and
// writes its DispatchRequest, built from the event's job, so a run request
// overtaking the job's CREATED event still fires. A run request for a job
// the store knows is deleted is dropped (DroppedRun); one already recorded is
// DuplicateRun.
//
// An event that can never be applied returns an error wrapping
// ErrInvalidEvent; any other error is the database's and worth a retry.
func (s *Store) Apply(ctx context.Context, ev *eventsv1.JobEvent, now time.Time) (Applied, error) {
	jobID, err := validateEvent(ev)
	if err != nil {
		return 0, err
	}
	if ev.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED {
		return s.applyRun(ctx, ev, jobID, micros(now))
	}
	var out Applied
	for attempt := 1; ; attempt++ {
		retry := false
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			out, retry, err = s.upsert(ctx, tx, ev, jobID, micros(now))
			return err
		})
		if err != nil {
			return 0, err
		}
		if !retry {
			return out, nil
		}
		if attempt == maxApplyAttempts {
			return 0, fmt.Errorf("apply event %s: job %s: row keeps changing under the upsert", ev.GetEventId(), jobID)
		}
	}
}

// upsert applies a job-changing event in tx. retry reports that the row did
// not exist when read but did when inserted (a concurrent consumer created
// it): the caller runs the transaction again, reading that row this time.
func (s *Store) upsert(ctx context.Context, tx pgx.Tx, ev *eventsv1.JobEvent, jobID uuid.UUID, now time.Time) (Applied, bool, error) {
	var st storedJob
	err := tx.QueryRow(ctx, `
		SELECT version, deleted, paused, next_fire_at, last_nominal FROM jobs WHERE job_id = $1 FOR UPDATE`, jobID).
		Scan(&st.version, &st.deleted, &st.paused, &st.nextFire, &st.lastNominal)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, false, fmt.Errorf("read job %s: %w", jobID, err)
	}
	if found && st.version >= ev.Version {
		return Stale, false, nil
	}
	var stored *storedJob
	if found {
		stored = &st
	}
	job := ev.Job
	deleted := ev.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED
	paused := job.Paused || ev.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED
	var next *time.Time
	spec := []byte{} // a tombstone keeps no definition, and no secret
	if !deleted {
		if spec, err = encodeSpec(job); err != nil {
			return 0, false, err
		}
		if !paused {
			if next, err = s.nextFire(ev, stored); err != nil {
				return 0, false, err
			}
		}
	}
	args := []any{jobID, job.Namespace, ring.Partition(jobID.String(), s.partitions), ev.Version, deleted, paused, spec, next, now}
	if found {
		// The row is locked and older: the update cannot miss.
		if _, err := tx.Exec(ctx, `
			UPDATE jobs SET namespace = $2, partition = $3, version = $4, deleted = $5, paused = $6,
				spec = $7, next_fire_at = $8, update_time = $9
			WHERE job_id = $1 AND version < $4`, args...); err != nil {
			return 0, false, fmt.Errorf("update job %s: %w", jobID, err)
		}
		return Upserted, false, nil
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO jobs (job_id, namespace, partition, version, deleted, paused, spec, next_fire_at, update_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (job_id) DO NOTHING`, args...)
	if err != nil {
		return 0, false, fmt.Errorf("insert job %s: %w", jobID, err)
	}
	return Upserted, tag.RowsAffected() == 0, nil
}

// nextFire computes the nominal time of the job's next slot after the event
// (see Apply for the rules), truncated to microseconds; nil when the
// schedule has no slot left.
func (s *Store) nextFire(ev *eventsv1.JobEvent, stored *storedJob) (*time.Time, error) {
	job := ev.Job
	created := job.GetCreateTime().AsTime()
	sched, errs := s.locations.Schedule(job.GetSchedule(), created)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: event %s: job %s: schedule %s", ErrInvalidEvent, ev.GetEventId(), job.GetId(), errs[0])
	}
	occur := ev.GetOccurTime().AsTime()
	after := created
	switch {
	case stored == nil || ev.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED:
		// No slot of the job was handled yet.
	case ev.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED:
		after = occur
	default:
		after = occur
		live := !stored.deleted && !stored.paused && stored.nextFire != nil
		if live && stored.nextFire.Add(-time.Nanosecond).Before(after) {
			after = stored.nextFire.Add(-time.Nanosecond)
		}
	}
	if stored != nil && stored.lastNominal != nil && stored.lastNominal.After(after) {
		after = *stored.lastNominal
	}
	next, ok := sched.Next(after)
	if !ok {
		return nil, nil
	}
	next = micros(next)
	return &next, nil
}

// applyRun fires a run request's manual slot.
func (s *Store) applyRun(ctx context.Context, ev *eventsv1.JobEvent, jobID uuid.UUID, now time.Time) (Applied, error) {
	nominal := micros(ev.GetRunRequest().GetNominalTime().AsTime())
	job := ev.Job
	out := Fired
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var deleted bool
		err := tx.QueryRow(ctx, `SELECT deleted FROM jobs WHERE job_id = $1`, jobID).Scan(&deleted)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read job %s: %w", jobID, err)
		}
		if deleted {
			// A tombstone always has a higher version than any run request
			// of the job: requests are refused after the delete.
			out = DroppedRun
			return nil
		}
		execID := executionID(jobID.String(), nominal)
		tag, err := tx.Exec(ctx, `
			INSERT INTO ledger (job_id, nominal_time, kind, execution_id, record_time, epoch)
			VALUES ($1, $2, $3, $4, $5, 0) ON CONFLICT DO NOTHING`,
			jobID, nominal, int16(firing.KindManual), execID, now)
		if err != nil {
			return fmt.Errorf("record manual slot of job %s: %w", jobID, err)
		}
		if tag.RowsAffected() == 0 {
			out = DuplicateRun
			return nil
		}
		msg, err := s.dispatchMessage(job, jobID.String(), ev.Version, nominal, now, firing.KindManual, s.traceHeaders(ctx))
		if err != nil {
			return err
		}
		return outbox.Write(ctx, tx, msg)
	})
	if err != nil {
		return 0, err
	}
	if out == Fired {
		s.notify()
	}
	return out, nil
}

// validateEvent checks what Apply relies on and returns the job id.
func validateEvent(ev *eventsv1.JobEvent) (uuid.UUID, error) {
	invalid := func(format string, args ...any) (uuid.UUID, error) {
		return uuid.Nil, fmt.Errorf("%w: event %s: %s", ErrInvalidEvent, ev.GetEventId(), fmt.Sprintf(format, args...))
	}
	if ev == nil {
		return uuid.Nil, fmt.Errorf("%w: nil event", ErrInvalidEvent)
	}
	job := ev.GetJob()
	if job == nil {
		return invalid("no job")
	}
	id, err := uuid.Parse(job.GetId())
	if err != nil {
		return invalid("job id %q is not a UUID", job.GetId())
	}
	if job.GetNamespace() == "" {
		return invalid("job %s has no namespace", id)
	}
	if ev.Version <= 0 {
		return invalid("job %s: version %d is not positive", id, ev.Version)
	}
	switch ev.Kind {
	case eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED:
		if ev.GetRunRequest().GetNominalTime().CheckValid() != nil {
			return invalid("run request for job %s without a valid nominal time", id)
		}
		if err := validTarget(job); err != nil {
			return invalid("run request for job %s: %v", id, err)
		}
	case eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED,
		eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED, eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED:
		if job.GetCreateTime().CheckValid() != nil {
			return invalid("job %s without a valid create time", id)
		}
		if ev.Kind != eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED && ev.GetOccurTime().CheckValid() != nil {
			return invalid("job %s: no valid occur time", id)
		}
	case eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED:
	default:
		return invalid("job %s: unknown kind %v", id, ev.Kind)
	}
	return id, nil
}

// validTarget: a dispatch request without a target could never be
// delivered.
func validTarget(job *registryv1.Job) error {
	if job.GetTarget().GetKind() == nil {
		return errors.New("no target")
	}
	return nil
}
