package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
)

// Page sizes of ListSlots.
const (
	DefaultSlotPageSize = 50
	MaxSlotPageSize     = 1000
)

// SlotRecord is one ledger row.
type SlotRecord struct {
	ExecutionID string
	Nominal     time.Time
	// Record is when the slot was committed (fired) or recorded missed.
	Record time.Time
	Kind   firing.SlotKind
	// Epoch is the partition epoch of the commit; 0 for manual and backfill
	// slots, which are not fenced.
	Epoch int64
	// Reason is why a missed slot was not fired.
	Reason string
}

// SlotPage is a page of a job's ledger and the job's count of runs
// against its max_runs, read in one statement: a slot the page shows is
// counted, and a counted run in the page's range is shown.
type SlotPage struct {
	Slots []SlotRecord
	// Next is the value of before for the following page; zero on the
	// last page.
	Next time.Time
	// MaxRuns is the job's limit (0: none), RunsFired its count.
	MaxRuns, RunsFired int64
}

// Completed says whether the job has run its max_runs.
func (p SlotPage) Completed() bool { return p.MaxRuns > 0 && p.RunsFired >= p.MaxRuns }

// ListSlots is Slots without the count.
func (s *Store) ListSlots(ctx context.Context, namespace, jobID string, pageSize int, before time.Time) (slots []SlotRecord, next time.Time, err error) {
	page, err := s.Slots(ctx, namespace, jobID, pageSize, before)
	return page.Slots, page.Next, err
}

// Slots returns one page of the ledger of a live job of namespace,
// newest nominal time first: the slots strictly older than before (the zero
// time: from the newest), at most pageSize of them (<= 0 means
// DefaultSlotPageSize, more than MaxSlotPageSize is capped). next is the
// value of before for the following page, zero on the last page. Keyset
// pagination on the ledger's primary key: a page costs one index range scan
// however deep it is, and slots recorded meanwhile never shift later pages.
// ErrNotFound when the job is unknown, deleted or of another namespace.
func (s *Store) Slots(ctx context.Context, namespace, jobID string, pageSize int, before time.Time) (SlotPage, error) {
	var page SlotPage
	id, err := uuid.Parse(jobID)
	if err != nil {
		return page, ErrNotFound
	}
	if pageSize <= 0 {
		pageSize = DefaultSlotPageSize
	}
	pageSize = min(pageSize, MaxSlotPageSize)
	// One round trip: the job row (for the namespace check) left-joined to
	// the page, one row with NULLs when the page is empty.
	rows, err := s.pool.Query(ctx, `
		SELECT l.execution_id::text, l.nominal_time, l.record_time, l.kind, l.epoch, l.reason, j.max_runs, j.runs_fired
		FROM jobs j
		LEFT JOIN LATERAL (
			SELECT execution_id, nominal_time, record_time, kind, epoch, reason FROM ledger
			WHERE ledger.job_id = j.job_id AND ($3::timestamptz IS NULL OR nominal_time < $3)
			ORDER BY nominal_time DESC LIMIT $4
		) AS l ON true
		WHERE j.job_id = $1 AND j.namespace = $2 AND NOT j.deleted`,
		id, namespace, nullTime(before), pageSize+1)
	if err != nil {
		return page, fmt.Errorf("list slots of job %s: %w", jobID, err)
	}
	found := false
	slots, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SlotRecord, error) {
		found = true
		var (
			rec             SlotRecord
			execID, reason  pgtype.Text
			nominal, record pgtype.Timestamptz
			kind            pgtype.Int2
			epoch           pgtype.Int8
		)
		// Every row carries the job's count: the last one read stays.
		if err := r.Scan(&execID, &nominal, &record, &kind, &epoch, &reason, &page.MaxRuns, &page.RunsFired); err != nil {
			return rec, err
		}
		rec = SlotRecord{
			ExecutionID: execID.String, Nominal: nominal.Time.UTC(), Record: record.Time.UTC(),
			Kind: firing.SlotKind(kind.Int16), Epoch: epoch.Int64, Reason: reason.String,
		}
		return rec, nil
	})
	if err != nil {
		return SlotPage{}, fmt.Errorf("list slots of job %s: %w", jobID, err)
	}
	if !found {
		return SlotPage{}, ErrNotFound
	}
	if len(slots) == 1 && slots[0].ExecutionID == "" {
		page.Slots = []SlotRecord{} // the job has no slot yet
		return page, nil
	}
	if len(slots) > pageSize {
		slots = slots[:pageSize]
		page.Next = slots[pageSize-1].Nominal
	}
	page.Slots = slots
	return page, nil
}
