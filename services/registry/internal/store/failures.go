package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/outbox"
)

// PauseOnFailureKeyID is Job.paused_by_key_id (and the job event's key id)
// of a pause on failure: the registry paused the job itself, no API key
// did.
const PauseOnFailureKeyID = "pause-on-failure"

// Outcome is the end of one execution, as the pause on failure needs it.
type Outcome struct {
	Namespace, JobID string
	NominalTime      time.Time
	// Dead: dead-lettered; otherwise succeeded.
	Dead bool
}

// RecordOutcome counts o towards its job's pause on failure and pauses the
// job when it reaches the job's pause_after_dead_letters, with a PAUSED
// event; it reports whether it paused the job. A success ends the streak; a
// dead letter extends it unless the job has no pause_after_dead_letters, is
// gone, or the execution is not after the streak's start (a success or a
// resume since). Redelivered outcomes change nothing: each execution counts
// once, and a paused job is not paused again. Safe to call again after a
// failure: the count and the pause are one transaction.
func (s *Store) RecordOutcome(ctx context.Context, o Outcome) (bool, error) {
	if _, err := uuid.Parse(o.JobID); err != nil {
		return false, nil // not a job of this registry
	}
	// The job may have lost the option since the slot fired: one read, no
	// transaction, no lock.
	var limit int32
	if job, err := s.getTx(ctx, s.pool, o.Namespace, o.JobID, "", false); errors.Is(err, ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	} else if limit = job.PauseAfterDeadLetters; limit <= 0 {
		return false, nil
	}
	paused := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if !o.Dead {
			return s.restartStreak(ctx, tx, o.JobID, o.NominalTime)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO dead_lettered_executions (job_id, nominal_time)
			SELECT $1, $2 WHERE $2 > coalesce((SELECT since FROM dead_letter_streaks WHERE job_id = $1), '-infinity')
			ON CONFLICT DO NOTHING`, o.JobID, o.NominalTime); err != nil {
			return fmt.Errorf("record dead letter: %w", err)
		}
		count := func() (int32, error) {
			var n int32
			err := tx.QueryRow(ctx, `SELECT count(*) FROM dead_lettered_executions WHERE job_id = $1`, o.JobID).Scan(&n)
			if err != nil {
				return 0, fmt.Errorf("count dead letters: %w", err)
			}
			return n, nil
		}
		if n, err := count(); err != nil || n < limit {
			return err
		}
		// Locked, read and counted again: a concurrent update (a resume,
		// which restarts the streak, or a new threshold) committed before
		// the lock is seen here, and one after it waits for this pause.
		job, err := s.getTx(ctx, tx, o.Namespace, o.JobID, "", true)
		if errors.Is(err, ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		n, err := count()
		if err != nil {
			return err
		}
		if job.Paused || job.PauseAfterDeadLetters <= 0 || n < job.PauseAfterDeadLetters {
			return nil
		}
		job.Paused = true
		job.PauseReason = fmt.Sprintf("paused after %d consecutive dead-lettered executions (pause_after_dead_letters)", n)
		job.PauseTime = timestamppb.New(s.Now())
		job.PausedByKeyId = PauseOnFailureKeyID
		ctx := apikey.WithPrincipal(ctx, apikey.Principal{Namespace: job.Namespace, KeyID: PauseOnFailureKeyID})
		if err := s.writeUpdate(ctx, tx, job, eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED); err != nil {
			return err
		}
		paused = true
		return nil
	})
	if err != nil {
		return false, err
	}
	if paused {
		s.notify()
	}
	return paused, nil
}

// restartStreak starts the job's streak after since (a success's nominal
// time, or a resume) and forgets the dead letters before it.
func (s *Store) restartStreak(ctx context.Context, tx pgx.Tx, jobID string, since time.Time) error {
	if _, err := tx.Exec(ctx, `
		INSERT INTO dead_letter_streaks (job_id, since) VALUES ($1, $2)
		ON CONFLICT (job_id) DO UPDATE SET since = greatest(dead_letter_streaks.since, excluded.since)`, jobID, since); err != nil {
		return fmt.Errorf("restart dead letter streak: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		DELETE FROM dead_lettered_executions WHERE job_id = $1 AND nominal_time <= (SELECT since FROM dead_letter_streaks WHERE job_id = $1)`, jobID); err != nil {
		return fmt.Errorf("forget dead letters: %w", err)
	}
	return nil
}

// writeUpdate stores the changed job with its version bumped and writes
// its event of kind, in tx.
func (s *Store) writeUpdate(ctx context.Context, tx pgx.Tx, job *registryv1.Job, kind eventsv1.JobEventKind) error {
	job.Version++
	job.UpdateTime = timestamppb.New(s.Now())
	cols := jobColumns{}
	if err := cols.add(job); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `
		UPDATE jobs SET display_name = $3, labels = $4::jsonb, paused = $5, version = $6, spec = $7,
			signing_secret = NULLIF($8, ''), update_time = $9, pause_after_dead_letters = $10
		WHERE namespace = $1 AND id = $2`,
		job.Namespace, job.Id, cols.names[0], cols.labels[0], cols.paused[0], job.Version, cols.specs[0], cols.secrets[0], job.UpdateTime.AsTime(),
		cols.pauseAfter[0])
	if err != nil {
		return fmt.Errorf("update job: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return ErrNotFound
	}
	job.Etag = etag(job.Version)
	msg, err := s.event(ctx, kind, job)
	if err != nil {
		return err
	}
	return outbox.Write(ctx, tx, msg)
}
