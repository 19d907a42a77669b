package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Status is the API's ExecutionStatus number of an execution or attempt.
type Status int16

// Statuses, numbered as cronmesh.history.v1.ExecutionStatus.
const (
	StatusRunning   Status = 1
	StatusSucceeded Status = 2
	StatusRetrying  Status = 3
	StatusFailed    Status = 4
	StatusDead      Status = 5
	StatusCancelled Status = 6
	StatusMissed    Status = 7
	StatusSkipped   Status = 8
	StatusBuffered  Status = 9
)

// Kind is a lifecycle event kind, numbered as
// cronmesh.events.v1.ExecutionEventKind.
type Kind int16

// Event kinds.
const (
	KindStarted   Kind = 1
	KindSucceeded Kind = 2
	KindFailed    Kind = 3
	KindDead      Kind = 4
	KindCancelled Kind = 5
	KindMissed    Kind = 6
	KindSkipped   Kind = 7
	KindBuffered  Kind = 8
)

// rank orders the kinds of one attempt: the row of an execution (and of an
// attempt) holds the event with the greatest (attempt, rank), so the final
// state does not depend on the order events arrive in. Any outcome beats
// STARTED; DEAD beats the FAILED of the same last attempt; CANCELLED beats
// a FAILED whose retry it cancelled. 0 means the kind is not recorded.
func (k Kind) rank() int16 {
	switch k {
	case KindStarted, KindBuffered:
		// BUFFERED has attempt 0: the first attempt's STARTED, or a
		// SKIPPED, replaces it.
		return 1
	case KindFailed:
		return 2
	case KindSucceeded:
		return 3
	case KindCancelled:
		return 4
	case KindDead:
		return 5
	case KindMissed, KindSkipped:
		// Alone: no attempt was made (attempt 0).
		return 6
	default:
		return 0
	}
}

// attemptless reports the kinds of a slot that made no attempt (attempt
// 0): a missed slot, and one its overlap policy skipped or buffered. They
// have no attempt row.
func (k Kind) attemptless() bool { return k == KindMissed || k == KindSkipped || k == KindBuffered }

// Event is one lifecycle event, as the ingest writes it.
type Event struct {
	Kind            Kind
	ExecutionID     string
	JobID           string
	Namespace       string
	JobDisplayName  string
	Attempt         int32
	TriggerKind     int16
	NominalTime     time.Time
	OccurTime       time.Time
	FireTime        time.Time // zero when unknown
	StartTime       time.Time // zero when unknown
	Duration        *time.Duration
	ResponseStatus  int32
	ResponseExcerpt string
	Reason          string
	TraceID         string
	RetryScheduled  bool
	RetryDelay      *time.Duration
	// RerunOf is the execution a re-run re-runs; empty otherwise.
	RerunOf string
	// Overridden names what a manual run overrode of its job ("target",
	// "body", "headers"); each name is a plain identifier.
	Overridden []string
}

// status is the API status the event puts an execution (or attempt) in.
func (e *Event) status() Status {
	switch e.Kind {
	case KindStarted:
		return StatusRunning
	case KindSucceeded:
		return StatusSucceeded
	case KindFailed:
		if e.RetryScheduled {
			return StatusRetrying
		}
		return StatusFailed
	case KindDead:
		return StatusDead
	case KindCancelled:
		return StatusCancelled
	case KindSkipped:
		return StatusSkipped
	case KindBuffered:
		return StatusBuffered
	default:
		return StatusMissed
	}
}

// Validate reports an event the history cannot record.
func (e *Event) Validate() error {
	switch {
	case e.Kind.rank() == 0:
		return fmt.Errorf("event kind %d is not recorded", e.Kind)
	case e.ExecutionID == "" || e.JobID == "" || e.Namespace == "":
		return fmt.Errorf("event of execution %q lacks execution_id, job_id or namespace", e.ExecutionID)
	case uuid.Validate(e.ExecutionID) != nil:
		return fmt.Errorf("execution_id %q is not a UUID", e.ExecutionID)
	case e.NominalTime.IsZero():
		return fmt.Errorf("event of execution %s has no nominal_time", e.ExecutionID)
	case !e.Kind.attemptless() && e.Attempt < 1:
		return fmt.Errorf("event of execution %s has attempt %d", e.ExecutionID, e.Attempt)
	}
	return nil
}

// row is the merged state of one execution or one attempt, in the columns
// both tables share (attempts ignore the execution-only ones).
type row struct {
	nominal        time.Time
	id             string
	namespace      string
	jobID          string
	displayName    string
	triggerKind    int16
	status         Status
	attempt        int32
	rank           int16
	fireTime       *time.Time
	startTime      *time.Time
	durationUS     *int64
	responseStatus int32
	excerpt        string
	reason         string
	traceID        string
	retryDelayUS   *int64
	updateTime     time.Time
	rerunOf        string
	overridden     string // the names joined by commas
}

func micros(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	us := d.Microseconds()
	return &us
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC().Truncate(time.Microsecond)
	return &t
}

func rowOf(e *Event) row {
	return row{
		nominal:        e.NominalTime.UTC().Truncate(time.Microsecond),
		id:             e.ExecutionID,
		namespace:      e.Namespace,
		jobID:          e.JobID,
		displayName:    e.JobDisplayName,
		triggerKind:    e.TriggerKind,
		status:         e.status(),
		attempt:        e.Attempt,
		rank:           e.Kind.rank(),
		fireTime:       timePtr(e.FireTime),
		startTime:      timePtr(e.StartTime),
		durationUS:     micros(e.Duration),
		responseStatus: e.ResponseStatus,
		excerpt:        e.ResponseExcerpt,
		reason:         e.Reason,
		traceID:        e.TraceID,
		retryDelayUS:   micros(e.RetryDelay),
		updateTime:     e.OccurTime.UTC().Truncate(time.Microsecond),
		rerunOf:        e.RerunOf,
		overridden:     strings.Join(e.Overridden, ","),
	}
}

// wins reports whether n takes the row over from o: a later attempt, or a
// greater rank in the same attempt. Equal keys are the same event (a
// duplicate) or carry the same state, so neither wins and nothing changes.
func wins(n, o *row) bool {
	if n.attempt != o.attempt {
		return n.attempt > o.attempt
	}
	return n.rank > o.rank
}

func orPtr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

func orStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// merge is the state after both rows' events: the winner's state, with the
// fields it lacks filled from the other where they describe the same thing
// (the attempt's response and timing only from the same attempt). It is the
// Go twin of the ON CONFLICT clause of upsertSQL; a batch merges its own
// events first because one INSERT cannot update a row twice.
func merge(a, b row) row {
	w, l := a, b
	if wins(&b, &a) {
		w, l = b, a
	}
	w.displayName = orStr(w.displayName, l.displayName)
	w.fireTime = orPtr(w.fireTime, l.fireTime)
	w.traceID = orStr(w.traceID, l.traceID)
	w.rerunOf = orStr(w.rerunOf, l.rerunOf)
	w.overridden = orStr(w.overridden, l.overridden)
	if w.triggerKind == 0 {
		w.triggerKind = l.triggerKind
	}
	if w.attempt == l.attempt {
		w.startTime = orPtr(w.startTime, l.startTime)
		w.durationUS = orPtr(w.durationUS, l.durationUS)
		if w.responseStatus == 0 {
			w.responseStatus = l.responseStatus
		}
		w.excerpt = orStr(w.excerpt, l.excerpt)
		w.reason = orStr(w.reason, l.reason)
		w.retryDelayUS = orPtr(w.retryDelayUS, l.retryDelayUS)
	}
	if l.updateTime.After(w.updateTime) {
		w.updateTime = l.updateTime
	}
	return w
}

// IngestResult counts what Ingest did with a batch.
type IngestResult struct {
	// Written is the number of events handed to the database (after
	// merging the batch's events of the same execution in memory).
	Written int
	// Expired is the number of events ignored because their nominal time
	// is older than the retention.
	Expired int
}

type execKey struct {
	nominal time.Time
	id      string
}

type attemptKey struct {
	execKey
	attempt int32
}

// Ingest records events in one transaction: each execution's row and each
// attempt's row is inserted or merged. It is idempotent (an event applied
// twice changes nothing the second time) and the result does not depend on
// the order of events, within the batch or across batches. Events older
// than the retention at now are counted and ignored; partitions missing for
// the others are created first. The events must be valid (Validate).
func (s *Store) Ingest(ctx context.Context, events []Event, now time.Time) (IngestResult, error) {
	var res IngestResult
	cutoff := s.Cutoff(now)
	execs := map[execKey]row{}
	attempts := map[attemptKey]row{}
	days := map[time.Time]bool{}
	for i := range events {
		e := &events[i]
		if e.NominalTime.Before(cutoff) {
			res.Expired++
			continue
		}
		r := rowOf(e)
		k := execKey{r.nominal, r.id}
		if old, ok := execs[k]; ok {
			execs[k] = merge(old, r)
		} else {
			execs[k] = r
		}
		if !e.Kind.attemptless() {
			ak := attemptKey{k, r.attempt}
			if old, ok := attempts[ak]; ok {
				attempts[ak] = merge(old, r)
			} else {
				attempts[ak] = r
			}
		}
		days[day(r.nominal)] = true
		res.Written++
	}
	if len(execs) == 0 {
		return res, nil
	}
	if err := s.ensureDays(ctx, sortedDays(days)); err != nil {
		return IngestResult{}, err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Rows in key order: concurrent batches that touch the same
		// executions lock them in the same order and cannot deadlock.
		er := sortedRows(execs, func(a, b execKey) int {
			return cmp2(a.nominal.Compare(b.nominal), strings.Compare(a.id, b.id))
		})
		if _, err := tx.Exec(ctx, upsertExecutionsSQL, execArgs(er)...); err != nil {
			return fmt.Errorf("upsert %d executions: %w", len(er), err)
		}
		if len(attempts) > 0 {
			ar := sortedRows(attempts, func(a, b attemptKey) int {
				return cmp2(cmp2(a.nominal.Compare(b.nominal), strings.Compare(a.id, b.id)), int(a.attempt-b.attempt))
			})
			if _, err := tx.Exec(ctx, upsertAttemptsSQL, attemptArgs(ar)...); err != nil {
				return fmt.Errorf("upsert %d attempts: %w", len(ar), err)
			}
		}
		return nil
	})
	if err != nil {
		return IngestResult{}, err
	}
	return res, nil
}

func cmp2(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func sortedDays(m map[time.Time]bool) []time.Time {
	out := make([]time.Time, 0, len(m))
	for d := range m {
		out = append(out, d)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

func sortedRows[K comparable](m map[K]row, compare func(a, b K) int) []row {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compare)
	out := make([]row, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

func execArgs(rows []row) []any {
	n := len(rows)
	var (
		nominal     = make([]time.Time, n)
		id          = make([]string, n)
		namespace   = make([]string, n)
		jobID       = make([]string, n)
		displayName = make([]string, n)
		triggerKind = make([]int16, n)
		status      = make([]int16, n)
		attempt     = make([]int32, n)
		rank        = make([]int16, n)
		fireTime    = make([]*time.Time, n)
		startTime   = make([]*time.Time, n)
		duration    = make([]*int64, n)
		respStatus  = make([]int32, n)
		excerpt     = make([]string, n)
		reason      = make([]string, n)
		traceID     = make([]string, n)
		updateTime  = make([]time.Time, n)
		rerunOf     = make([]string, n)
		overridden  = make([]string, n)
	)
	for i, r := range rows {
		nominal[i], id[i], namespace[i], jobID[i], displayName[i] = r.nominal, r.id, r.namespace, r.jobID, r.displayName
		triggerKind[i], status[i], attempt[i], rank[i] = r.triggerKind, int16(r.status), r.attempt, r.rank
		fireTime[i], startTime[i], duration[i], respStatus[i] = r.fireTime, r.startTime, r.durationUS, r.responseStatus
		excerpt[i], reason[i], traceID[i], updateTime[i] = r.excerpt, r.reason, r.traceID, r.updateTime
		rerunOf[i], overridden[i] = r.rerunOf, r.overridden
	}
	return []any{nominal, id, namespace, jobID, displayName, triggerKind, status, attempt, rank,
		fireTime, startTime, duration, respStatus, excerpt, reason, traceID, updateTime, rerunOf, overridden}
}

func attemptArgs(rows []row) []any {
	n := len(rows)
	var (
		nominal    = make([]time.Time, n)
		id         = make([]string, n)
		attempt    = make([]int32, n)
		status     = make([]int16, n)
		rank       = make([]int16, n)
		startTime  = make([]*time.Time, n)
		duration   = make([]*int64, n)
		respStatus = make([]int32, n)
		excerpt    = make([]string, n)
		reason     = make([]string, n)
		retryDelay = make([]*int64, n)
		updateTime = make([]time.Time, n)
	)
	for i, r := range rows {
		nominal[i], id[i], attempt[i], status[i], rank[i] = r.nominal, r.id, r.attempt, int16(r.status), r.rank
		startTime[i], duration[i], respStatus[i], excerpt[i], reason[i] = r.startTime, r.durationUS, r.responseStatus, r.excerpt, r.reason
		retryDelay[i], updateTime[i] = r.retryDelayUS, r.updateTime
	}
	return []any{nominal, id, attempt, status, rank, startTime, duration, respStatus, excerpt, reason, retryDelay, updateTime}
}

// The ON CONFLICT clauses are merge in SQL: W is "the new event wins", S
// "same attempt". A winner's missing field is filled from the stored row
// (and the other way round) only where both describe the same thing.
const (
	winsSQL = "(excluded.attempt, excluded.rank) > (t.attempt, t.rank)"
	sameSQL = "excluded.attempt = t.attempt"
)

// pick is the winner's value of a column.
func pick(col string) string {
	return fmt.Sprintf("%[1]s = CASE WHEN %[2]s THEN excluded.%[1]s ELSE t.%[1]s END", col, winsSQL)
}

// fill is the winner's value of a column, or the other's when the winner's
// is empty (nullIf: the empty value of the column's type) and same holds.
func fill(col, empty, same string) string {
	nw, od := "excluded."+col, "t."+col
	if empty != "" {
		nw = fmt.Sprintf("NULLIF(%s, %s)", nw, empty)
		od = fmt.Sprintf("NULLIF(%s, %s)", od, empty)
	}
	c := func(a, b string) string {
		if empty != "" {
			return fmt.Sprintf("COALESCE(%s, %s, %s)", a, b, empty)
		}
		return fmt.Sprintf("COALESCE(%s, %s)", a, b)
	}
	winner := fmt.Sprintf("CASE WHEN %s THEN %s ELSE excluded.%s END", same, c(nw, od), col)
	stays := fmt.Sprintf("CASE WHEN %s THEN %s ELSE t.%s END", same, c(od, nw), col)
	return fmt.Sprintf("%s = CASE WHEN %s THEN %s ELSE %s END", col, winsSQL, winner, stays)
}

var upsertExecutionsSQL = `
INSERT INTO executions AS t (nominal_time, execution_id, namespace, job_id, job_display_name, trigger_kind,
	status, attempt, rank, fire_time, start_time, duration_us, response_status, response_excerpt, reason,
	trace_id, update_time, rerun_of_execution_id, overridden_fields)
SELECT * FROM unnest($1::timestamptz[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::smallint[],
	$7::smallint[], $8::integer[], $9::smallint[], $10::timestamptz[], $11::timestamptz[], $12::bigint[],
	$13::integer[], $14::text[], $15::text[], $16::text[], $17::timestamptz[], $18::text[], $19::text[])
ON CONFLICT (nominal_time, execution_id) DO UPDATE SET
	` + strings.Join([]string{
	pick("status"), pick("attempt"), pick("rank"),
	fill("job_display_name", "''", "true"),
	fill("trace_id", "''", "true"),
	fill("rerun_of_execution_id", "''", "true"),
	fill("overridden_fields", "''", "true"),
	fill("fire_time", "", "true"),
	"trigger_kind = CASE WHEN t.trigger_kind = 0 THEN excluded.trigger_kind ELSE t.trigger_kind END",
	fill("start_time", "", sameSQL),
	fill("duration_us", "", sameSQL),
	fill("response_status", "0", sameSQL),
	fill("response_excerpt", "''", sameSQL),
	fill("reason", "''", sameSQL),
	"update_time = greatest(t.update_time, excluded.update_time)",
}, ",\n\t") + `
WHERE t.namespace = excluded.namespace`

var upsertAttemptsSQL = `
INSERT INTO attempts AS t (nominal_time, execution_id, attempt, status, rank, start_time, duration_us,
	response_status, response_excerpt, reason, retry_delay_us, update_time)
SELECT * FROM unnest($1::timestamptz[], $2::uuid[], $3::integer[], $4::smallint[], $5::smallint[],
	$6::timestamptz[], $7::bigint[], $8::integer[], $9::text[], $10::text[], $11::bigint[], $12::timestamptz[])
ON CONFLICT (nominal_time, execution_id, attempt) DO UPDATE SET
	` + strings.Join([]string{
	pick("status"), pick("rank"),
	fill("start_time", "", "true"),
	fill("duration_us", "", "true"),
	fill("response_status", "0", "true"),
	fill("response_excerpt", "''", "true"),
	fill("reason", "''", "true"),
	fill("retry_delay_us", "", "true"),
	"update_time = greatest(t.update_time, excluded.update_time)",
}, ",\n\t")
