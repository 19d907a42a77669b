package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// RepublishAfter is how long a promoted execution's request may wait for
// its publish before the sweep publishes it again: longer than a publish
// with its confirm takes, so that only the request of a replica that died
// (or lost the broker) meanwhile is published twice.
const RepublishAfter = time.Minute

// Decision is what an overlap policy made of a first attempt (Admit).
type Decision int

// Decisions of Admit.
const (
	// Admitted: the execution is the job's active one; deliver it.
	Admitted Decision = iota + 1
	// Skipped: another execution is in progress (AdmitResult.Other); do
	// not deliver this one.
	Skipped
	// Buffered: the execution waits in the job's row for the one in
	// progress to end; do not deliver it now.
	Buffered
	// AlreadyBuffered: a redelivery of the buffered execution; nothing to
	// do.
	AlreadyBuffered
	// CancelledOther: the execution in progress (AdmitResult.Other) is
	// cancelled (recorded in cancellations) and this one is active;
	// deliver it, and abort the other's attempt in flight.
	CancelledOther
)

// String names d for logs and metrics.
func (d Decision) String() string {
	switch d {
	case Admitted:
		return "admitted"
	case Skipped:
		return "skipped"
	case Buffered:
		return "buffered"
	case AlreadyBuffered:
		return "already_buffered"
	case CancelledOther:
		return "cancelled_other"
	default:
		return "unknown"
	}
}

// Admission is a first attempt of an execution whose overlap policy is
// not ALLOW.
type Admission struct {
	Request *dispatchv1.DispatchRequest
	// Trace is the request's trace context (its message headers), kept
	// with a buffered request so that its delivery stays in its trace.
	Trace map[string]string
	Now   time.Time
	// Span is how long the execution may hold the job: its row is stale
	// at Now + Span (or, for a buffered one, that long after its
	// promotion).
	Span time.Duration
}

// AdmitResult is Admit's answer.
type AdmitResult struct {
	Decision Decision
	// Other is the execution in progress that made the decision (Skipped,
	// Buffered, AlreadyBuffered, CancelledOther).
	Other string
	// Promoted, if not nil, is a request the caller must publish to the
	// dispatch exchange and then confirm with MarkPublished: a buffered
	// execution promoted because the active one was stale, or a promoted
	// one that had not been published when CANCEL_OTHER replaced it (it
	// is then dropped as cancelled where it is consumed, which records
	// its end).
	Promoted *Promoted
}

// Promoted is a buffered execution that became its job's active one and
// must be published to the dispatch exchange.
type Promoted struct {
	Namespace   string
	JobID       string
	ExecutionID string
	Request     *dispatchv1.DispatchRequest
	Trace       map[string]string
}

// ActiveRef names a job's active execution.
type ActiveRef struct {
	Namespace   string
	JobID       string
	ExecutionID string
}

// activeRow is a locked row of active_executions.
type activeRow struct {
	execution    uuid.UUID
	staleAfter   time.Time
	pending      []byte
	pendingTrace map[string]string
	buffered     *uuid.UUID
	bufRequest   []byte
	bufTrace     map[string]string
}

// OverlapReason is the cancellation reason CANCEL_OTHER records for the
// execution it cancels in favour of executionID.
func OverlapReason(executionID string) string {
	return "cancelled by overlap policy: execution " + executionID
}

// Admit applies a first attempt's overlap policy (SKIP, BUFFER_ONE or
// CANCEL_OTHER; any other value admits) against its job's active
// execution, in one transaction holding the job's row lock, so that of
// concurrent first attempts of one job exactly one becomes active:
//
//   - no active execution, or this one (a redelivery, or a promoted
//     buffered one arriving): Admitted, and it is active;
//   - this one is the buffered one: AlreadyBuffered;
//   - an active execution past its stale_after is released first (its
//     buffered one, if any, promoted: AdmitResult.Promoted), then the
//     policy applies to what is left;
//   - SKIP: Skipped. BUFFER_ONE: Buffered when nothing waits yet, else
//     Skipped. CANCEL_OTHER: the active execution's cancellation is
//     recorded (reason OverlapReason) and this one replaces it:
//     CancelledOther. A buffered execution keeps waiting.
func (s *Store) Admit(ctx context.Context, a Admission) (AdmitResult, error) {
	req := a.Request
	job, errJob := uuid.Parse(req.GetJobId())
	exec, errExec := uuid.Parse(req.GetExecutionId())
	if errJob != nil || errExec != nil {
		return AdmitResult{}, fmt.Errorf("admit: %w", ErrInvalidID)
	}
	ns, now := req.GetNamespace(), micros(a.Now)
	var res AdmitResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = AdmitResult{}
		for {
			tag, err := tx.Exec(ctx, `
				INSERT INTO active_executions (namespace, job_id, execution_id, started_at, stale_after)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, ns, job, exec, now, micros(now.Add(a.Span)))
			if err != nil {
				return fmt.Errorf("take the job's active row: %w", err)
			}
			if tag.RowsAffected() == 1 {
				res.Decision = Admitted
				return nil
			}
			row, ok, err := lockActive(ctx, tx, ns, job)
			if err != nil {
				return err
			}
			if !ok {
				continue // released since the insert looked: take it
			}
			switch {
			case row.execution == exec:
				res.Decision = Admitted
				return nil
			case row.buffered != nil && *row.buffered == exec:
				res.Decision, res.Other = AlreadyBuffered, row.execution.String()
				return nil
			}
			if !now.Before(row.staleAfter) {
				promoted, err := finish(ctx, tx, ns, job, row, now)
				if err != nil {
					return err
				}
				if promoted == nil {
					continue // deleted: take it
				}
				res.Promoted = promoted
				row = activeRow{execution: uuid.MustParse(promoted.ExecutionID), pending: []byte{1}}
			}
			res.Other = row.execution.String()
			switch req.GetOverlapPolicy() {
			case registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP:
				res.Decision = Skipped
			case registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE:
				if row.buffered != nil {
					res.Decision = Skipped
					return nil
				}
				body, err := proto.Marshal(req)
				if err != nil {
					return fmt.Errorf("encode the buffered request: %w", err)
				}
				if _, err := tx.Exec(ctx, `
					UPDATE active_executions SET buffered_execution_id = $3, buffered_request = $4,
						buffered_trace = $5, buffered_span_us = $6
					WHERE namespace = $1 AND job_id = $2`, ns, job, exec, body, a.Trace, a.Span.Microseconds()); err != nil {
					return fmt.Errorf("buffer execution %s: %w", exec, err)
				}
				res.Decision = Buffered
			case registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER:
				if _, err := tx.Exec(ctx, `
					INSERT INTO cancellations (execution_id, namespace, cancel_time, reason) VALUES ($1, $2, $3, $4)
					ON CONFLICT DO NOTHING`, row.execution, ns, now, OverlapReason(exec.String())); err != nil {
					return fmt.Errorf("cancel execution %s: %w", row.execution, err)
				}
				if row.pending != nil && res.Promoted == nil {
					// Never published: published now, it is dropped as
					// cancelled where it is consumed, which records it.
					p, err := promotedFrom(ns, job, row.execution, row.pending, row.pendingTrace)
					if err != nil {
						return err
					}
					res.Promoted = p
				}
				if _, err := tx.Exec(ctx, `
					UPDATE active_executions SET execution_id = $3, started_at = $4, stale_after = $5,
						pending_request = NULL, pending_trace = NULL, publish_after = NULL
					WHERE namespace = $1 AND job_id = $2`, ns, job, exec, now, micros(now.Add(a.Span))); err != nil {
					return fmt.Errorf("make execution %s active: %w", exec, err)
				}
				res.Decision = CancelledOther
			default:
				res.Decision, res.Other = Admitted, ""
			}
			return nil
		}
	})
	if err != nil {
		return AdmitResult{}, fmt.Errorf("admit execution %s: %w", req.GetExecutionId(), err)
	}
	return res, nil
}

// Release ends executionID's hold on its job, at its final outcome
// (succeeded, dead-lettered, cancelled, past its deadline): the job's row
// is deleted, or, when an execution is buffered, handed to it, which the
// caller must publish (the returned Promoted) and confirm with
// MarkPublished. A release of an execution that does not hold its job (it
// was never active, was replaced, or was released already) changes
// nothing and returns nil.
func (s *Store) Release(ctx context.Context, ref ActiveRef, now time.Time) (*Promoted, error) {
	job, errJob := uuid.Parse(ref.JobID)
	exec, errExec := uuid.Parse(ref.ExecutionID)
	if errJob != nil || errExec != nil {
		return nil, nil
	}
	var promoted *Promoted
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		promoted = nil
		row, ok, err := lockActive(ctx, tx, ref.Namespace, job)
		if err != nil || !ok || row.execution != exec {
			return err
		}
		promoted, err = finish(ctx, tx, ref.Namespace, job, row, micros(now))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release execution %s: %w", ref.ExecutionID, err)
	}
	return promoted, nil
}

// MarkPublished records that a promoted execution's request is on the
// broker: the sweep no longer publishes it. It changes nothing when the
// execution no longer holds its job.
func (s *Store) MarkPublished(ctx context.Context, ref ActiveRef) error {
	job, errJob := uuid.Parse(ref.JobID)
	exec, errExec := uuid.Parse(ref.ExecutionID)
	if errJob != nil || errExec != nil {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `
		UPDATE active_executions SET pending_request = NULL, pending_trace = NULL, publish_after = NULL
		WHERE namespace = $1 AND job_id = $2 AND execution_id = $3`, ref.Namespace, job, exec); err != nil {
		return fmt.Errorf("mark execution %s published: %w", ref.ExecutionID, err)
	}
	return nil
}

// Unpublished returns up to limit promoted executions whose publish was
// not confirmed within RepublishAfter (publish_after at or before now),
// and moves their publish_after another RepublishAfter ahead, so that
// replicas sweeping at once do not take the same ones.
func (s *Store) Unpublished(ctx context.Context, now time.Time, limit int) ([]Promoted, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE active_executions a SET publish_after = $2
		FROM (SELECT namespace, job_id FROM active_executions
			WHERE pending_request IS NOT NULL AND publish_after <= $1
			ORDER BY publish_after LIMIT $3 FOR UPDATE SKIP LOCKED) due
		WHERE a.namespace = due.namespace AND a.job_id = due.job_id
		RETURNING a.namespace, a.job_id, a.execution_id, a.pending_request, a.pending_trace`,
		micros(now), micros(now.Add(RepublishAfter)), limit)
	if err != nil {
		return nil, fmt.Errorf("read unpublished promotions: %w", err)
	}
	var (
		out        []Promoted
		ns         string
		job, exec  uuid.UUID
		body       []byte
		traceState map[string]string
	)
	if _, err := pgx.ForEachRow(rows, []any{&ns, &job, &exec, &body, &traceState}, func() error {
		p, err := promotedFrom(ns, job, exec, body, traceState)
		if err != nil {
			return err
		}
		out = append(out, *p)
		traceState = nil
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read unpublished promotions: %w", err)
	}
	return out, nil
}

// StaleActive returns up to limit active executions past their
// stale_after at now, for the sweep to Release.
func (s *Store) StaleActive(ctx context.Context, now time.Time, limit int) ([]ActiveRef, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT namespace, job_id, execution_id FROM active_executions
		WHERE stale_after <= $1 ORDER BY stale_after LIMIT $2`, micros(now), limit)
	if err != nil {
		return nil, fmt.Errorf("read stale active executions: %w", err)
	}
	var (
		out       []ActiveRef
		ns        string
		job, exec uuid.UUID
	)
	if _, err := pgx.ForEachRow(rows, []any{&ns, &job, &exec}, func() error {
		out = append(out, ActiveRef{Namespace: ns, JobID: job.String(), ExecutionID: exec.String()})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read stale active executions: %w", err)
	}
	return out, nil
}

// Active is a job's row of active_executions, as Active reads it.
type Active struct {
	ExecutionID string
	StartedAt   time.Time
	StaleAfter  time.Time
	// Unpublished: a promoted execution whose publish is not confirmed.
	Unpublished bool
	// Buffered is the execution waiting, "" when none.
	Buffered string
}

// Active reads jobID's active execution; false when none.
func (s *Store) Active(ctx context.Context, namespace, jobID string) (Active, bool, error) {
	job, err := uuid.Parse(jobID)
	if err != nil {
		return Active{}, false, nil
	}
	var (
		a        Active
		exec     uuid.UUID
		buffered *uuid.UUID
	)
	err = s.pool.QueryRow(ctx, `
		SELECT execution_id, started_at, stale_after, pending_request IS NOT NULL, buffered_execution_id
		FROM active_executions WHERE namespace = $1 AND job_id = $2`, namespace, job).
		Scan(&exec, &a.StartedAt, &a.StaleAfter, &a.Unpublished, &buffered)
	if errors.Is(err, pgx.ErrNoRows) {
		return Active{}, false, nil
	}
	if err != nil {
		return Active{}, false, fmt.Errorf("read the active execution of job %s: %w", jobID, err)
	}
	a.ExecutionID = exec.String()
	a.StartedAt, a.StaleAfter = a.StartedAt.UTC(), a.StaleAfter.UTC()
	if buffered != nil {
		a.Buffered = buffered.String()
	}
	return a, true, nil
}

// CancelReason is the reason recorded with executionID's cancellation: ""
// for one made through CancelExecution, or when there is none.
func (s *Store) CancelReason(ctx context.Context, namespace, executionID string) (string, error) {
	id, err := uuid.Parse(executionID)
	if err != nil {
		return "", nil
	}
	var reason string
	err = s.pool.QueryRow(ctx, `SELECT reason FROM cancellations WHERE execution_id = $1 AND namespace = $2`, id, namespace).Scan(&reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the cancellation of %s: %w", executionID, err)
	}
	return reason, nil
}

// lockActive reads and locks the job's row; false when there is none.
func lockActive(ctx context.Context, tx pgx.Tx, ns string, job uuid.UUID) (activeRow, bool, error) {
	var r activeRow
	err := tx.QueryRow(ctx, `
		SELECT execution_id, stale_after, pending_request, pending_trace,
			buffered_execution_id, buffered_request, buffered_trace
		FROM active_executions WHERE namespace = $1 AND job_id = $2 FOR UPDATE`, ns, job).
		Scan(&r.execution, &r.staleAfter, &r.pending, &r.pendingTrace, &r.buffered, &r.bufRequest, &r.bufTrace)
	if errors.Is(err, pgx.ErrNoRows) {
		return activeRow{}, false, nil
	}
	if err != nil {
		return activeRow{}, false, fmt.Errorf("lock the job's active row: %w", err)
	}
	return r, true, nil
}

// finish ends the locked row's active execution: the row is deleted, or
// its buffered execution becomes the active one, unpublished until
// MarkPublished (returned, for the caller to publish).
func finish(ctx context.Context, tx pgx.Tx, ns string, job uuid.UUID, row activeRow, now time.Time) (*Promoted, error) {
	if row.buffered == nil {
		if _, err := tx.Exec(ctx, `DELETE FROM active_executions WHERE namespace = $1 AND job_id = $2`, ns, job); err != nil {
			return nil, fmt.Errorf("release the job's active row: %w", err)
		}
		return nil, nil
	}
	p, err := promotedFrom(ns, job, *row.buffered, row.bufRequest, row.bufTrace)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `
		UPDATE active_executions SET execution_id = buffered_execution_id, started_at = $3::timestamptz,
			stale_after = $3::timestamptz + buffered_span_us * interval '1 microsecond', pending_request = buffered_request, pending_trace = buffered_trace,
			publish_after = $4, buffered_execution_id = NULL, buffered_request = NULL, buffered_trace = NULL,
			buffered_span_us = NULL
		WHERE namespace = $1 AND job_id = $2`, ns, job, now, now.Add(RepublishAfter)); err != nil {
		return nil, fmt.Errorf("promote buffered execution %s: %w", *row.buffered, err)
	}
	return p, nil
}

func promotedFrom(ns string, job, exec uuid.UUID, body []byte, traceState map[string]string) (*Promoted, error) {
	req := &dispatchv1.DispatchRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		return nil, fmt.Errorf("decode the request of execution %s: %w", exec, err)
	}
	return &Promoted{Namespace: ns, JobID: job.String(), ExecutionID: exec.String(), Request: req, Trace: traceState}, nil
}
