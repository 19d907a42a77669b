package store

import (
	"cmp"
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

// canonicalID is id in PostgreSQL's text form of a uuid (lower case, with
// dashes), so that the batch merges the events of one execution however
// their ids are spelt, and matches the ids the database returns.
func canonicalID(id string) string {
	if u, err := uuid.Parse(id); err == nil {
		return u.String()
	}
	return id
}

func rowOf(e *Event) row {
	return row{
		nominal:        e.NominalTime.UTC().Truncate(time.Microsecond),
		id:             canonicalID(e.ExecutionID),
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
// Go twin of the ON CONFLICT clauses of upsertExecutionsSQL and
// upsertAttemptsSQL; a batch merges its own events first because one
// INSERT cannot update a row twice, and an execution whose latest attempt
// a batch replaces is merged here (see Ingest).
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

// execKey identifies an execution: its slot's nominal time, in
// microseconds as stored, and its canonical id.
type execKey struct {
	nominal int64
	id      string
}

func keyOf(r *row) execKey { return execKey{r.nominal.UnixMicro(), r.id} }

func compareKeys(a, b execKey) int {
	return cmp2(cmp.Compare(a.nominal, b.nominal), strings.Compare(a.id, b.id))
}

// pending is what a batch holds of one execution: all its events merged
// (the execution row's share), and each attempt's events merged.
type pending struct {
	exec     row
	attempts map[int32]row
}

// Ingest records events in one transaction. It is idempotent (an event
// applied twice changes nothing the second time) and the result does not
// depend on the order of events, within the batch or across batches.
// Events older than the retention at now are counted and ignored;
// partitions missing for the others are created first. The events must be
// valid (Validate).
//
// # Where an attempt is stored
//
// The execution row holds the whole state of the execution's latest
// attempt (its status, timing, response, reason and retry delay), so the
// attempts table holds only the attempts that are no longer the latest:
// the common execution of one attempt is one row, inserted by its STARTED
// event and updated once by its outcome. An attempt moves to the attempts
// table when an event of a later attempt replaces it on the execution row,
// and an event of an attempt older than the row's is merged into the
// attempts table directly. Readers (Get) add the latest attempt from the
// execution row. Rows written before migration 0003 also have an attempts
// row for the latest attempt; readers merge it into the one they make, and
// when a later attempt replaces it, the moved state is merged into it.
//
// # Statements
//
// The batch's events of one execution are merged in Go first (one
// statement cannot update a row twice), then written with unnest arrays,
// every execution in key order:
//
//  1. upsertExecutionsSQL inserts the executions that have no row and
//     merges into the others (in SQL, the twin of merge) unless the batch
//     brings a later attempt than the row's: that one must move to the
//     attempts table first, and RETURNING cannot show the values it had.
//     ON CONFLICT DO UPDATE locks every conflicting row, updated or not,
//     so after it this transaction holds the row of every execution in
//     the batch (as an insert of its own or as a row lock). It returns the
//     rows it wrote, with their attempt. A row whose merge would change
//     nothing (a redelivered event) is not rewritten.
//  2. The rows it did not write (a later attempt, an event of another
//     namespace, nothing to change) are read; the statement's snapshot,
//     taken after the locks were granted, sees the version locked, and no
//     one can change it before this transaction ends. merge makes their
//     new state in Go, and rewriteExecutionsSQL writes those that changed;
//     the attempt a later one replaced joins the attempts to write.
//  3. upsertAttemptsSQL merges the attempts older than their execution's
//     latest: the batch's events of them and the replaced attempts.
//
// # Why concurrent writers lose nothing
//
// Several replicas ingest at once, and redeliveries put the events of one
// execution in batches of different replicas. Every transaction that
// writes an execution's attempts holds that execution's row first (step 1,
// an upsert in key order), and keeps it to its commit: the row serialises
// the writers of an execution. A writer that finds it locked waits in step
// 1 until the holder commits, then works from the committed state (an
// upsert re-reads the newest version of a row it waited for; the read of
// step 2 takes a snapshot after that), so the attempt the holder moved to
// the attempts table is there and the one it put on the row is the one
// the waiter replaces or merges into. The rows are locked in one sorted
// sweep per transaction and attempts rows are only written under their
// execution's lock, so two batches cannot deadlock. Replicas of the
// previous version (during a rolling upgrade) also upsert the execution
// row before its attempts in one transaction, so they are serialised the
// same way (but they move no attempt: see ADR 0020). The transaction is
// READ COMMITTED, which steps 1 and 2 rely on.
func (s *Store) Ingest(ctx context.Context, events []Event, now time.Time) (IngestResult, error) {
	var res IngestResult
	cutoff := s.Cutoff(now)
	batch := map[execKey]*pending{}
	days := map[time.Time]bool{}
	for i := range events {
		e := &events[i]
		if e.NominalTime.Before(cutoff) {
			res.Expired++
			continue
		}
		r := rowOf(e)
		k := keyOf(&r)
		p := batch[k]
		if p == nil {
			p = &pending{exec: r, attempts: map[int32]row{}}
			batch[k] = p
		} else {
			p.exec = merge(p.exec, r)
		}
		if !e.Kind.attemptless() {
			if old, ok := p.attempts[r.attempt]; ok {
				p.attempts[r.attempt] = merge(old, r)
			} else {
				p.attempts[r.attempt] = r
			}
		}
		days[day(r.nominal)] = true
		res.Written++
	}
	if len(batch) == 0 {
		return res, nil
	}
	if err := s.ensureDays(ctx, sortedDays(days)); err != nil {
		return IngestResult{}, err
	}
	keys := make([]execKey, 0, len(batch))
	for k := range batch {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		return writeBatch(ctx, tx, keys, batch)
	})
	if err != nil {
		return IngestResult{}, err
	}
	return res, nil
}

// writeBatch is the statements of Ingest; keys are the batch's executions
// in key order. It adds the attempts it moves to batch's (which lives for
// one call of Ingest: a batch retried is merged again from its events).
func writeBatch(ctx context.Context, tx pgx.Tx, keys []execKey, batch map[execKey]*pending) error {
	execs := make([]row, len(keys))
	for i, k := range keys {
		execs[i] = batch[k].exec
	}
	// latest is each execution's latest attempt after the batch; an
	// execution without one (another namespace's) writes nothing more.
	latest := make(map[execKey]int32, len(keys))
	rows, err := tx.Query(ctx, upsertExecutionsSQL, execArgs(execs)...)
	if err != nil {
		return fmt.Errorf("upsert %d executions: %w", len(execs), err)
	}
	var (
		nominal time.Time
		id      string
		attempt int32
	)
	_, err = pgx.ForEachRow(rows, []any{&nominal, &id, &attempt}, func() error {
		latest[execKey{nominal.UnixMicro(), id}] = attempt
		return nil
	})
	if err != nil {
		return fmt.Errorf("upsert %d executions: %w", len(execs), err)
	}

	var locked []execKey
	for _, k := range keys {
		if _, ok := latest[k]; !ok {
			locked = append(locked, k)
		}
	}
	if len(locked) > 0 {
		stored, err := readExecutions(ctx, tx, locked)
		if err != nil {
			return err
		}
		var rewrite []row
		for _, k := range locked {
			p := batch[k]
			old, ok := stored[k]
			if !ok || old.namespace != p.exec.namespace {
				// Another namespace's execution: its events change
				// nothing. (Gone: its day was dropped meanwhile.)
				continue
			}
			n := merge(old, p.exec)
			if !n.equal(&old) {
				rewrite = append(rewrite, n)
			}
			latest[k] = n.attempt
			if old.attempt > 0 && n.attempt > old.attempt {
				// The row's attempt is no longer the latest: it moves to
				// the attempts table, with the batch's events of it.
				moved := old
				if b, ok := p.attempts[old.attempt]; ok {
					moved = merge(moved, b)
				}
				p.attempts[old.attempt] = moved
			}
		}
		if len(rewrite) > 0 {
			if _, err := tx.Exec(ctx, rewriteExecutionsSQL, execArgs(rewrite)...); err != nil {
				return fmt.Errorf("rewrite %d executions: %w", len(rewrite), err)
			}
		}
	}

	var older []row
	for _, k := range keys {
		l, ok := latest[k]
		if !ok {
			continue
		}
		p := batch[k]
		for a, r := range p.attempts {
			if a < l {
				older = append(older, r)
			}
		}
	}
	if len(older) == 0 {
		return nil
	}
	slices.SortFunc(older, func(a, b row) int {
		return cmp2(compareKeys(keyOf(&a), keyOf(&b)), cmp.Compare(a.attempt, b.attempt))
	})
	if _, err := tx.Exec(ctx, upsertAttemptsSQL, attemptArgs(older)...); err != nil {
		return fmt.Errorf("upsert %d attempts: %w", len(older), err)
	}
	return nil
}

// readExecutionsSQL reads the rows of the given keys. The lateral join
// makes it an index probe of the key per execution, whatever the planner
// thinks of the array's size.
const readExecutionsSQL = `
SELECT t.nominal_time, t.execution_id::text, t.namespace, t.job_id, t.job_display_name, t.trigger_kind,
	t.status, t.attempt, t.rank, t.fire_time, t.start_time, t.duration_us, t.response_status,
	t.response_excerpt, t.reason, t.trace_id, t.update_time, t.rerun_of_execution_id, t.overridden_fields,
	t.retry_delay_us
FROM unnest($1::timestamptz[], $2::uuid[]) AS k(nominal_time, execution_id)
CROSS JOIN LATERAL (
	SELECT * FROM executions e WHERE e.nominal_time = k.nominal_time AND e.execution_id = k.execution_id
) t`

func readExecutions(ctx context.Context, tx pgx.Tx, keys []execKey) (map[execKey]row, error) {
	nominals := make([]time.Time, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		nominals[i], ids[i] = time.UnixMicro(k.nominal).UTC(), k.id
	}
	rows, err := tx.Query(ctx, readExecutionsSQL, nominals, ids)
	if err != nil {
		return nil, fmt.Errorf("read %d executions: %w", len(keys), err)
	}
	out := make(map[execKey]row, len(keys))
	var (
		r           row
		status      int16
		fire, start *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&r.nominal, &r.id, &r.namespace, &r.jobID, &r.displayName, &r.triggerKind,
		&status, &r.attempt, &r.rank, &fire, &start, &r.durationUS, &r.responseStatus,
		&r.excerpt, &r.reason, &r.traceID, &r.updateTime, &r.rerunOf, &r.overridden, &r.retryDelayUS}, func() error {
		c := r
		c.nominal, c.updateTime = c.nominal.UTC(), c.updateTime.UTC()
		c.status = Status(status)
		c.fireTime, c.startTime = utcPtr(fire), utcPtr(start)
		out[keyOf(&c)] = c
		// pgx may scan the next row into the values these point at.
		r.durationUS, r.retryDelayUS, fire, start = nil, nil, nil, nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %d executions: %w", len(keys), err)
	}
	return out, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func eqTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// equal reports whether r and o have the same columns.
func (r *row) equal(o *row) bool {
	return r.nominal.Equal(o.nominal) && r.id == o.id && r.namespace == o.namespace && r.jobID == o.jobID &&
		r.displayName == o.displayName && r.triggerKind == o.triggerKind && r.status == o.status &&
		r.attempt == o.attempt && r.rank == o.rank && eqTime(r.fireTime, o.fireTime) &&
		eqTime(r.startTime, o.startTime) && eqPtr(r.durationUS, o.durationUS) &&
		r.responseStatus == o.responseStatus && r.excerpt == o.excerpt && r.reason == o.reason &&
		r.traceID == o.traceID && eqPtr(r.retryDelayUS, o.retryDelayUS) && r.updateTime.Equal(o.updateTime) &&
		r.rerunOf == o.rerunOf && r.overridden == o.overridden
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
		retryDelay  = make([]*int64, n)
	)
	for i, r := range rows {
		nominal[i], id[i], namespace[i], jobID[i], displayName[i] = r.nominal, r.id, r.namespace, r.jobID, r.displayName
		triggerKind[i], status[i], attempt[i], rank[i] = r.triggerKind, int16(r.status), r.attempt, r.rank
		fireTime[i], startTime[i], duration[i], respStatus[i] = r.fireTime, r.startTime, r.durationUS, r.responseStatus
		excerpt[i], reason[i], traceID[i], updateTime[i] = r.excerpt, r.reason, r.traceID, r.updateTime
		rerunOf[i], overridden[i], retryDelay[i] = r.rerunOf, r.overridden, r.retryDelayUS
	}
	return []any{nominal, id, namespace, jobID, displayName, triggerKind, status, attempt, rank,
		fireTime, startTime, duration, respStatus, excerpt, reason, traceID, updateTime, rerunOf, overridden, retryDelay}
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

// assignment is one column's new value in an ON CONFLICT DO UPDATE.
type assignment struct{ col, expr string }

// pick is the winner's value of a column.
func pick(col string) assignment {
	return assignment{col, fmt.Sprintf("CASE WHEN %s THEN excluded.%s ELSE t.%[2]s END", winsSQL, col)}
}

// fill is the winner's value of a column, or the other's when the winner's
// is empty (nullIf: the empty value of the column's type) and same holds.
func fill(col, empty, same string) assignment {
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
	return assignment{col, fmt.Sprintf("CASE WHEN %s THEN %s ELSE %s END", winsSQL, winner, stays)}
}

// doUpdate is "DO UPDATE SET" the assignments, where cond holds and the
// assignments change the row: a merge that changes nothing (a redelivered
// event) writes no row version, though it locks the row all the same.
func doUpdate(cond string, as ...assignment) string {
	set := make([]string, len(as))
	cols := make([]string, len(as))
	exprs := make([]string, len(as))
	for i, a := range as {
		set[i] = a.col + " = " + a.expr
		cols[i] = "t." + a.col
		exprs[i] = a.expr
	}
	where := fmt.Sprintf("(%s)\n\tIS DISTINCT FROM (%s)", strings.Join(cols, ", "), strings.Join(exprs, ",\n\t"))
	if cond != "" {
		where = cond + "\n\tAND " + where
	}
	return "DO UPDATE SET\n\t" + strings.Join(set, ",\n\t") + "\nWHERE " + where
}

const insertExecutionsSQL = `
INSERT INTO executions AS t (nominal_time, execution_id, namespace, job_id, job_display_name, trigger_kind,
	status, attempt, rank, fire_time, start_time, duration_us, response_status, response_excerpt, reason,
	trace_id, update_time, rerun_of_execution_id, overridden_fields, retry_delay_us)
SELECT * FROM unnest($1::timestamptz[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::smallint[],
	$7::smallint[], $8::integer[], $9::smallint[], $10::timestamptz[], $11::timestamptz[], $12::bigint[],
	$13::integer[], $14::text[], $15::text[], $16::text[], $17::timestamptz[], $18::text[], $19::text[],
	$20::bigint[])
ON CONFLICT (nominal_time, execution_id) `

// upsertExecutionsSQL is step 1 of Ingest: insert, or merge unless the
// event brings a later attempt than the row's first one (which must move),
// or belongs to another namespace. It returns the rows it wrote.
var upsertExecutionsSQL = insertExecutionsSQL + doUpdate(
	"t.namespace = excluded.namespace AND (excluded.attempt <= t.attempt OR t.attempt = 0)",
	pick("status"), pick("attempt"), pick("rank"),
	fill("job_display_name", "''", "true"),
	fill("trace_id", "''", "true"),
	fill("rerun_of_execution_id", "''", "true"),
	fill("overridden_fields", "''", "true"),
	fill("fire_time", "", "true"),
	assignment{"trigger_kind", "CASE WHEN t.trigger_kind = 0 THEN excluded.trigger_kind ELSE t.trigger_kind END"},
	fill("start_time", "", sameSQL),
	fill("duration_us", "", sameSQL),
	fill("response_status", "0", sameSQL),
	fill("response_excerpt", "''", sameSQL),
	fill("reason", "''", sameSQL),
	fill("retry_delay_us", "", sameSQL),
	assignment{"update_time", "greatest(t.update_time, excluded.update_time)"},
) + `
RETURNING nominal_time, execution_id::text, attempt`

// rewriteExecutionsSQL is step 2's write: the rows are locked and the
// values are their merged state, so it overwrites them. (An upsert rather
// than UPDATE ... FROM so that it is an index probe per row whatever the
// plan.)
var rewriteExecutionsSQL = insertExecutionsSQL + `DO UPDATE SET
	` + strings.Join(func() []string {
	var out []string
	for _, c := range []string{"job_id", "job_display_name", "trigger_kind", "status", "attempt", "rank",
		"fire_time", "start_time", "duration_us", "response_status", "response_excerpt", "reason", "trace_id",
		"update_time", "rerun_of_execution_id", "overridden_fields", "retry_delay_us"} {
		out = append(out, c+" = excluded."+c)
	}
	return out
}(), ",\n\t")

// upsertAttemptsSQL merges attempts that are no longer their execution's
// latest.
var upsertAttemptsSQL = `
INSERT INTO attempts AS t (nominal_time, execution_id, attempt, status, rank, start_time, duration_us,
	response_status, response_excerpt, reason, retry_delay_us, update_time)
SELECT * FROM unnest($1::timestamptz[], $2::uuid[], $3::integer[], $4::smallint[], $5::smallint[],
	$6::timestamptz[], $7::bigint[], $8::integer[], $9::text[], $10::text[], $11::bigint[], $12::timestamptz[])
ON CONFLICT (nominal_time, execution_id, attempt) ` + doUpdate("",
	pick("status"), pick("rank"),
	fill("start_time", "", "true"),
	fill("duration_us", "", "true"),
	fill("response_status", "0", "true"),
	fill("response_excerpt", "''", "true"),
	fill("reason", "''", "true"),
	fill("retry_delay_us", "", "true"),
	assignment{"update_time", "greatest(t.update_time, excluded.update_time)"},
)
