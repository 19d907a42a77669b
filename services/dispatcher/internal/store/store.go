package store

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	"github.com/cronmesh/cronmesh/libs/daypart"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
)

// Domain errors; the API and the drainer map them.
var (
	// ErrNotFound: no dead letter with that id in the caller's namespace
	// (never stored, already redriven or purged, or of another namespace:
	// the cases are not told apart, so a caller learns nothing about other
	// namespaces).
	ErrNotFound = errors.New("dead letter not found")
	// ErrInvalidDeadLetter: a dead letter that can never be stored (an id
	// that is not a UUID, no request, no namespace). Retrying cannot help:
	// the drainer drops it as a poison message.
	ErrInvalidDeadLetter = errors.New("invalid dead letter")
	// ErrInvalidID: an execution id that is not a UUID.
	ErrInvalidID = errors.New("not a valid id")
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the migrations of the dispatcher schema.
func Migrations() ([]migrate.Migration, error) {
	dir, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	return migrate.Load(dir)
}

// Options for New.
type Options struct {
	// Pool reaches the dispatcher schema (through its search_path).
	// Required.
	Pool *pgxpool.Pool
}

// Store is the dispatcher's persistence. Safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store. It fails on a missing Pool; it does not touch the
// database.
func New(opts Options) (*Store, error) {
	if opts.Pool == nil {
		return nil, errors.New("store: Pool is required")
	}
	return &Store{pool: opts.Pool}, nil
}

// DeadLetter is an execution that exhausted its retries or failed with a
// non-retryable error.
type DeadLetter struct {
	// ID is a UUID chosen when the execution died (UUIDv7 from the
	// pipeline, so ids sort roughly by death).
	ID          string
	Namespace   string
	JobID       string
	ExecutionID string
	// Attempt is the last attempt made.
	Attempt     int32
	NominalTime time.Time
	DeadTime    time.Time
	// Reason says why the last attempt failed.
	Reason string
	// ResponseStatus is the last HTTP status, 0 without a response.
	ResponseStatus int32
	// ResponseExcerpt is the start of the last response body.
	ResponseExcerpt string
	// Request is the last attempt's request, signing secret included.
	Request *dispatchv1.DispatchRequest
}

// Validate reports, wrapping ErrInvalidDeadLetter, what keeps d from being
// stored: ids that are not UUIDs, no namespace, no request.
func (d DeadLetter) Validate() error {
	var problems []string
	for _, f := range []struct{ name, value string }{{"id", d.ID}, {"job id", d.JobID}, {"execution id", d.ExecutionID}} {
		if _, err := uuid.Parse(f.value); err != nil {
			problems = append(problems, fmt.Sprintf("%s %q is not a UUID", f.name, f.value))
		}
	}
	if d.Namespace == "" {
		problems = append(problems, "no namespace")
	}
	if d.Request == nil {
		problems = append(problems, "no request")
	}
	if d.DeadTime.IsZero() {
		problems = append(problems, "no dead time")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidDeadLetter, strings.Join(problems, ", "))
	}
	return nil
}

// StripSecret returns a copy of req without the HTTP target's signing
// secret and the values of its secret headers (targetcheck.Redact), for
// showing to API callers. A nil req gives nil.
func StripSecret(req *dispatchv1.DispatchRequest) *dispatchv1.DispatchRequest {
	if req == nil {
		return nil
	}
	out := proto.Clone(req).(*dispatchv1.DispatchRequest)
	targetcheck.Redact(out.GetTarget())
	return out
}

// InsertDeadLetters stores letters in one statement, skipping any whose
// (execution id, attempt) is already stored, and returns how many it
// inserted. It validates every letter first and writes nothing if one is
// invalid (ErrInvalidDeadLetter): callers validate individually with
// DeadLetter.Validate to keep one bad letter from holding up the others.
// Text is made valid UTF-8 without NUL bytes first (PostgreSQL refuses
// both; a response body may contain anything).
func (s *Store) InsertDeadLetters(ctx context.Context, letters []DeadLetter) (int, error) {
	if len(letters) == 0 {
		return 0, nil
	}
	n := len(letters)
	var (
		ids, jobs, execs   = make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
		namespaces         = make([]string, n)
		attempts, statuses = make([]int32, n), make([]int32, n)
		nominals, deads    = make([]pgtype.Timestamptz, n), make([]time.Time, n)
		reasons, excerpts  = make([]string, n), make([]string, n)
		requests           = make([][]byte, n)
	)
	for i, d := range letters {
		if err := d.Validate(); err != nil {
			return 0, fmt.Errorf("dead letter %d: %w", i, err)
		}
		body, err := proto.Marshal(d.Request)
		if err != nil {
			return 0, fmt.Errorf("%w: encode request of %s: %v", ErrInvalidDeadLetter, d.ID, err)
		}
		ids[i], jobs[i], execs[i] = uuid.MustParse(d.ID), uuid.MustParse(d.JobID), uuid.MustParse(d.ExecutionID)
		namespaces[i], attempts[i], statuses[i] = d.Namespace, d.Attempt, d.ResponseStatus
		if !d.NominalTime.IsZero() {
			nominals[i] = pgtype.Timestamptz{Time: micros(d.NominalTime), Valid: true}
		}
		deads[i] = micros(d.DeadTime)
		reasons[i], excerpts[i] = execevent.CleanText(d.Reason), execevent.CleanText(d.ResponseExcerpt)
		requests[i] = body
	}
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO dead_letters (id, namespace, job_id, execution_id, attempt, nominal_time, dead_time,
			reason, response_status, response_excerpt, request)
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::uuid[], $5::int[], $6::timestamptz[],
			$7::timestamptz[], $8::text[], $9::int[], $10::text[], $11::bytea[])
		ON CONFLICT DO NOTHING`,
		ids, namespaces, jobs, execs, attempts, nominals, deads, reasons, statuses, excerpts, requests)
	if err != nil {
		return 0, fmt.Errorf("insert %d dead letters: %w", n, err)
	}
	return int(tag.RowsAffected()), nil
}

// Cursor is a position in a namespace's dead letters, newest first: a page
// starts after it. The zero Cursor is the start.
type Cursor struct {
	DeadTime time.Time
	ID       string
}

// IsZero reports the start position.
func (c Cursor) IsZero() bool { return c.DeadTime.IsZero() && c.ID == "" }

// ListDeadLetters returns up to limit dead letters of namespace (of jobID
// only, unless it is empty), newest first (ties by id, descending), after
// the cursor; and the cursor of the next page, zero when this is the last.
// A jobID that is not a UUID has no dead letters. Requests carry their
// signing secrets: strip them before showing.
func (s *Store) ListDeadLetters(ctx context.Context, namespace, jobID string, limit int, after Cursor) ([]DeadLetter, Cursor, error) {
	if limit <= 0 {
		return nil, Cursor{}, nil
	}
	var job *uuid.UUID
	if jobID != "" {
		id, err := uuid.Parse(jobID)
		if err != nil {
			return nil, Cursor{}, nil
		}
		job = &id
	}
	// Two spellings so each uses its own index; the cursor condition is a
	// row comparison, which the btree serves as a range start.
	where := "namespace = $1"
	args := []any{namespace}
	if job != nil {
		where += " AND job_id = $2"
		args = append(args, *job)
	}
	if !after.IsZero() {
		id, err := uuid.Parse(after.ID)
		if err != nil {
			return nil, Cursor{}, fmt.Errorf("list dead letters: cursor id %q: %w", after.ID, ErrInvalidID)
		}
		args = append(args, micros(after.DeadTime), id)
		where += fmt.Sprintf(" AND (dead_time, id) < ($%d, $%d)", len(args)-1, len(args))
	}
	args = append(args, limit+1)
	rows, err := s.pool.Query(ctx, `
		SELECT `+deadLetterColumns+` FROM dead_letters WHERE `+where+`
		ORDER BY dead_time DESC, id DESC LIMIT $`+fmt.Sprint(len(args)), args...)
	if err != nil {
		return nil, Cursor{}, fmt.Errorf("list dead letters: %w", err)
	}
	letters, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, Cursor{}, fmt.Errorf("list dead letters: %w", err)
	}
	var next Cursor
	if len(letters) > limit {
		letters = letters[:limit]
		last := letters[limit-1]
		next = Cursor{DeadTime: last.DeadTime, ID: last.ID}
	}
	return letters, next, nil
}

// PurgeDeadLetter deletes the dead letter id of namespace; ErrNotFound when
// there is none (an id that is not a UUID included).
func (s *Store) PurgeDeadLetter(ctx context.Context, namespace, id string) error {
	uid, err := uuid.Parse(id)
	if err != nil {
		return ErrNotFound
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM dead_letters WHERE id = $1 AND namespace = $2`, uid, namespace)
	if err != nil {
		return fmt.Errorf("purge dead letter %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Redrive deletes the dead letter id of namespace and calls publish with
// it, in one transaction that commits only when publish returns nil (the
// new request is on the broker): a failed publish leaves the dead letter.
// It also deletes the execution's cancellation and its completion record
// (see RecordCompleted): a redrive is an explicit request to deliver. ErrNotFound when there is no such dead letter; a
// concurrent redrive of the same one waits for the first and then gets
// ErrNotFound, so one dead letter is redriven once.
func (s *Store) Redrive(ctx context.Context, namespace, id string, publish func(context.Context, DeadLetter) error) (DeadLetter, error) {
	uid, err := uuid.Parse(id)
	if err != nil {
		return DeadLetter{}, ErrNotFound
	}
	var letter DeadLetter
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM dead_letters WHERE id = $1 AND namespace = $2 RETURNING `+deadLetterColumns, uid, namespace)
		if err != nil {
			return fmt.Errorf("take dead letter %s: %w", id, err)
		}
		letters, err := pgx.CollectRows(rows, scanDeadLetter)
		if err != nil {
			return fmt.Errorf("take dead letter %s: %w", id, err)
		}
		if len(letters) == 0 {
			return ErrNotFound
		}
		letter = letters[0]
		if err := uncancel(ctx, tx, []DeadLetter{letter}); err != nil {
			return err
		}
		if err := s.forget(ctx, []DeadLetter{letter}); err != nil {
			return err
		}
		return publish(ctx, letter)
	})
	if err != nil {
		return DeadLetter{}, err
	}
	return letter, nil
}

// RedriveMany takes up to limit dead letters of namespace (of jobID only,
// unless it is empty), oldest first, skipping rows another redrive holds,
// and calls publish with them; publish returns one error per letter, nil
// for each that is on the broker. Those letters are deleted (and their
// executions' cancellations and completion records with them) in the same transaction; the others
// stay. It returns how many were redriven and the first publish error, so
// a caller that got an error may call again for the rest.
func (s *Store) RedriveMany(ctx context.Context, namespace, jobID string, limit int, publish func(context.Context, []DeadLetter) []error) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	where, args := "namespace = $1", []any{namespace}
	if jobID != "" {
		id, err := uuid.Parse(jobID)
		if err != nil {
			return 0, nil
		}
		where += " AND job_id = $2"
		args = append(args, id)
	}
	args = append(args, limit)
	var (
		redriven int
		firstErr error
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT `+deadLetterColumns+` FROM dead_letters WHERE `+where+`
			ORDER BY dead_time, id LIMIT $`+fmt.Sprint(len(args))+` FOR UPDATE SKIP LOCKED`, args...)
		if err != nil {
			return fmt.Errorf("take dead letters: %w", err)
		}
		letters, err := pgx.CollectRows(rows, scanDeadLetter)
		if err != nil {
			return fmt.Errorf("take dead letters: %w", err)
		}
		if len(letters) == 0 {
			return nil
		}
		if err := s.forget(ctx, letters); err != nil {
			return err
		}
		errs := publish(ctx, letters)
		if len(errs) != len(letters) {
			return fmt.Errorf("redrive: publish returned %d results for %d letters", len(errs), len(letters))
		}
		var done []DeadLetter
		var ids []uuid.UUID
		for i, err := range errs {
			if err != nil {
				firstErr = cmpErr(firstErr, err)
				continue
			}
			done = append(done, letters[i])
			ids = append(ids, uuid.MustParse(letters[i].ID))
		}
		if len(ids) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM dead_letters WHERE id = ANY($1::uuid[])`, ids); err != nil {
			return fmt.Errorf("delete redriven dead letters: %w", err)
		}
		if err := uncancel(ctx, tx, done); err != nil {
			return err
		}
		redriven = len(done)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return redriven, firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// uncancel deletes the cancellations of the letters' executions.
func uncancel(ctx context.Context, tx pgx.Tx, letters []DeadLetter) error {
	execs, namespaces := make([]uuid.UUID, len(letters)), make([]string, len(letters))
	for i, d := range letters {
		execs[i], namespaces[i] = uuid.MustParse(d.ExecutionID), d.Namespace
	}
	if _, err := tx.Exec(ctx, `
		DELETE FROM cancellations c USING unnest($1::uuid[], $2::text[]) AS u(e, ns)
		WHERE c.execution_id = u.e AND c.namespace = u.ns`, execs, namespaces); err != nil {
		return fmt.Errorf("delete cancellations of redriven executions: %w", err)
	}
	return nil
}

// ExecutionRef names an execution of a namespace.
type ExecutionRef struct {
	Namespace   string
	ExecutionID string
}

// Cancel records that executionID of namespace is cancelled at now;
// cancelling again changes nothing (the first time stays). ErrInvalidID
// when executionID is not a UUID. The store cannot tell a pending execution
// from an unknown one (it knows neither), so both are recorded.
func (s *Store) Cancel(ctx context.Context, namespace, executionID string, now time.Time) error {
	_, err := s.RecordCancellation(ctx, namespace, executionID, now)
	return err
}

// RecordCancellation is Cancel that also says whether this call recorded
// the cancellation (false: the execution was cancelled already).
func (s *Store) RecordCancellation(ctx context.Context, namespace, executionID string, now time.Time) (bool, error) {
	id, err := uuid.Parse(executionID)
	if err != nil {
		return false, ErrInvalidID
	}
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO cancellations (execution_id, namespace, cancel_time) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, id, namespace, micros(now))
	if err != nil {
		return false, fmt.Errorf("cancel execution %s: %w", executionID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Cancellation is one recorded cancellation, as the feed reads it.
type Cancellation struct {
	ExecutionRef
	// RecordedAt is the database's time of the record: the feed's order.
	RecordedAt time.Time
}

// CancellationsSince returns the cancellations recorded at or after since
// (the database's clock), oldest first, at most limit. The zero since
// reads from the beginning.
func (s *Store) CancellationsSince(ctx context.Context, since time.Time, limit int) ([]Cancellation, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT execution_id, namespace, recorded_at FROM cancellations
		WHERE recorded_at >= $1 ORDER BY recorded_at LIMIT $2`, since, limit)
	if err != nil {
		return nil, fmt.Errorf("read cancellations: %w", err)
	}
	var (
		out []Cancellation
		id  uuid.UUID
		c   Cancellation
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &c.Namespace, &c.RecordedAt}, func() error {
		c.ExecutionID = id.String()
		out = append(out, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read cancellations: %w", err)
	}
	return out, nil
}

// Cancelled reports, for each ref, whether that execution of that
// namespace is cancelled, in one query. A ref whose id is not a UUID is not
// cancelled (Cancel never records one).
func (s *Store) Cancelled(ctx context.Context, refs []ExecutionRef) ([]bool, error) {
	out := make([]bool, len(refs))
	execs, namespaces := make([]uuid.UUID, 0, len(refs)), make([]string, 0, len(refs))
	for _, r := range refs {
		id, err := uuid.Parse(r.ExecutionID)
		if err != nil {
			continue
		}
		execs, namespaces = append(execs, id), append(namespaces, r.Namespace)
	}
	if len(execs) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT c.execution_id, c.namespace FROM cancellations c
		JOIN unnest($1::uuid[], $2::text[]) AS u(e, ns) ON c.execution_id = u.e AND c.namespace = u.ns`,
		execs, namespaces)
	if err != nil {
		return nil, fmt.Errorf("look up cancellations: %w", err)
	}
	found := map[ExecutionRef]bool{}
	var (
		id uuid.UUID
		ns string
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &ns}, func() error {
		found[ExecutionRef{Namespace: ns, ExecutionID: id.String()}] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("look up cancellations: %w", err)
	}
	for i, r := range refs {
		if id, err := uuid.Parse(r.ExecutionID); err == nil {
			out[i] = found[ExecutionRef{Namespace: r.Namespace, ExecutionID: id.String()}]
		}
	}
	return out, nil
}

// DeleteCancellationsBefore deletes cancellations recorded before t and
// returns how many: once no retry of an execution can still be pending
// (the longest retry series is max_retries times the largest tier), its
// cancellation is dead weight.
func (s *Store) DeleteCancellationsBefore(ctx context.Context, t time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM cancellations WHERE cancel_time < $1`, micros(t))
	if err != nil {
		return 0, fmt.Errorf("delete old cancellations: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// AttemptRef names one attempt of an execution.
type AttemptRef struct {
	// NominalTime is the slot's time (the request's nominal_time): with
	// ExecutionID, the key of the execution's completion record.
	NominalTime time.Time
	ExecutionID string
	Attempt     int32
}

// CompletedAttempt is an attempt whose consequences are on the broker.
type CompletedAttempt struct {
	// NominalTime is the slot's time (the request's nominal_time): with
	// ExecutionID, the key of the execution's completion record.
	NominalTime time.Time
	ExecutionID string
	Attempt     int32
	// Final: the execution is over (succeeded or dead).
	Final bool
	// Time the outcome was decided; for a dead attempt, its dead letter's
	// DeadTime (a redrive ignores records up to it).
	Time time.Time
}

// completionKey is the key of an execution's completion record: its slot's
// nominal time (the partition's day) and its id.
type completionKey struct {
	nominal time.Time
	id      uuid.UUID
}

func newCompletionKey(nominal time.Time, executionID string) (completionKey, bool) {
	id, err := uuid.Parse(executionID)
	return completionKey{nominal: micros(nominal), id: id}, err == nil
}

func compareCompletionKeys(a, b completionKey) int {
	return cmp.Or(a.nominal.Compare(b.nominal), bytes.Compare(a.id[:], b.id[:]))
}

// RecordCompleted records done in one statement. Per execution the store
// keeps the highest attempt and whether any was final, so recording the
// same or an older attempt again changes nothing, and so does a record of
// an execution redriven since (Time at or before the dead letter's
// DeadTime: see Redrive). Rows are written in key order, so concurrent
// batches never deadlock. Entries whose id is not a UUID are skipped (the
// pipeline never delivers one).
func (s *Store) RecordCompleted(ctx context.Context, done []CompletedAttempt) error {
	merged := make(map[completionKey]CompletedAttempt, len(done))
	for _, d := range done {
		key, ok := newCompletionKey(d.NominalTime, d.ExecutionID)
		if !ok {
			continue
		}
		m, ok := merged[key]
		if !ok {
			merged[key] = d
			continue
		}
		m.Attempt = max(m.Attempt, d.Attempt)
		m.Final = m.Final || d.Final
		if d.Time.After(m.Time) {
			m.Time = d.Time
		}
		merged[key] = m
	}
	if len(merged) == 0 {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(merged), compareCompletionKeys)
	nominals, ids := make([]time.Time, len(keys)), make([]uuid.UUID, len(keys))
	attempts, finals, times := make([]int32, len(keys)), make([]bool, len(keys)), make([]time.Time, len(keys))
	for i, k := range keys {
		m := merged[k]
		nominals[i], ids[i] = k.nominal, k.id
		attempts[i], finals[i], times[i] = m.Attempt, m.Final, micros(m.Time)
	}
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO completed_attempts AS c (nominal_time, execution_id, attempt, final, done_time)
		SELECT * FROM unnest($1::timestamptz[], $2::uuid[], $3::integer[], $4::boolean[], $5::timestamptz[])
		ON CONFLICT (nominal_time, execution_id) DO UPDATE SET
			attempt = GREATEST(c.attempt, EXCLUDED.attempt),
			final = c.final OR EXCLUDED.final,
			done_time = GREATEST(c.done_time, EXCLUDED.done_time)
		WHERE c.floor_time IS NULL OR EXCLUDED.done_time > c.floor_time`,
		nominals, ids, attempts, finals, times); err != nil {
		return fmt.Errorf("record %d completed attempts: %w", len(keys), err)
	}
	return nil
}

// Completed reports, for each ref, whether that attempt must not be
// delivered again: its execution is over, or this attempt or a later one
// has completed. One query by primary key. A ref whose id is not a UUID is
// not completed.
func (s *Store) Completed(ctx context.Context, refs []AttemptRef) ([]bool, error) {
	out := make([]bool, len(refs))
	idx := make([]int32, 0, len(refs))
	nominals, ids, attempts := make([]time.Time, 0, len(refs)), make([]uuid.UUID, 0, len(refs)), make([]int32, 0, len(refs))
	for i, r := range refs {
		key, ok := newCompletionKey(r.NominalTime, r.ExecutionID)
		if !ok {
			continue
		}
		idx = append(idx, int32(i))
		nominals, ids, attempts = append(nominals, key.nominal), append(ids, key.id), append(attempts, r.Attempt)
	}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT u.i FROM unnest($1::int[], $2::timestamptz[], $3::uuid[], $4::int[]) AS u(i, n, e, a)
		JOIN completed_attempts d ON d.nominal_time = u.n AND d.execution_id = u.e
		WHERE d.final OR d.attempt >= u.a`, idx, nominals, ids, attempts)
	if err != nil {
		return nil, fmt.Errorf("look up completed attempts: %w", err)
	}
	var i int32
	if _, err := pgx.ForEachRow(rows, []any{&i}, func() error {
		if i >= 0 && int(i) < len(out) {
			out[i] = true
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("look up completed attempts: %w", err)
	}
	return out, nil
}

// CheckRef is one attempt about to be delivered.
type CheckRef struct {
	Namespace string
	// NominalTime is the slot's time (the request's nominal_time): with
	// ExecutionID, the key of the execution's completion record.
	NominalTime time.Time
	ExecutionID string
	Attempt     int32
}

// CheckResult is what the pipeline must know before delivering an attempt.
type CheckResult struct {
	// Cancelled: the execution is cancelled (see Cancelled).
	Cancelled bool
	// Completed: the attempt must not be delivered again (see Completed).
	Completed bool
	// Final: the execution is over (succeeded, dead, cancelled in flight
	// or skipped), so a duplicate of it still releases its job's overlap
	// row (the record is written before the release).
	Final bool
}

// Check answers Cancelled and Completed for each ref in one query, the
// look-up the pipeline makes before every attempt. A ref whose id is not a
// UUID is neither.
func (s *Store) Check(ctx context.Context, refs []CheckRef) ([]CheckResult, error) {
	out := make([]CheckResult, len(refs))
	idx := make([]int32, 0, len(refs))
	nominals, execs := make([]time.Time, 0, len(refs)), make([]uuid.UUID, 0, len(refs))
	namespaces, attempts := make([]string, 0, len(refs)), make([]int32, 0, len(refs))
	for i, r := range refs {
		key, ok := newCompletionKey(r.NominalTime, r.ExecutionID)
		if !ok {
			continue
		}
		idx = append(idx, int32(i))
		nominals, execs = append(nominals, key.nominal), append(execs, key.id)
		namespaces, attempts = append(namespaces, r.Namespace), append(attempts, r.Attempt)
	}
	if len(execs) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT u.i,
			EXISTS (SELECT 1 FROM cancellations c WHERE c.execution_id = u.e AND c.namespace = u.ns),
			COALESCE(d.final OR d.attempt >= u.a, false),
			COALESCE(d.final, false)
		FROM unnest($1::int[], $2::timestamptz[], $3::uuid[], $4::text[], $5::int[]) AS u(i, n, e, ns, a)
		LEFT JOIN completed_attempts d ON d.nominal_time = u.n AND d.execution_id = u.e`,
		idx, nominals, execs, namespaces, attempts)
	if err != nil {
		return nil, fmt.Errorf("check attempts: %w", err)
	}
	var (
		i                          int32
		cancelled, complete, final bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&i, &cancelled, &complete, &final}, func() error {
		if i >= 0 && int(i) < len(out) {
			out[i] = CheckResult{Cancelled: cancelled, Completed: complete, Final: final}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("check attempts: %w", err)
	}
	return out, nil
}

// CompletionDaysAhead is how many days after today have partitions of the
// completion records, so that a janitor run missed for a day or two does
// not send a new day's records to the default partition.
const CompletionDaysAhead = 3

// MaintainCompletions applies the completion records' retention at time
// now: a partition for every day from now-retention to CompletionDaysAhead
// days ahead, older days dropped whole, and the default partition (slots
// older than every day kept: old backfills) trimmed of the records done
// before now-retention. A record is therefore kept at least for the
// retention after its slot's time. It returns what it did to the days and
// how many records it trimmed. It is idempotent; replicas running it at
// once queue on an advisory lock.
func (s *Store) MaintainCompletions(ctx context.Context, now time.Time, retention time.Duration) (daypart.Result, int64, error) {
	var schema string
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return daypart.Result{}, 0, fmt.Errorf("maintain completion records: %w", err)
	}
	cutoff := now.Add(-retention)
	days := daypart.Set{Tables: []string{"completed_attempts"}, LockName: "dispatcher.completed_attempts/" + schema}
	res, err := days.Maintain(ctx, s.pool, cutoff, now.AddDate(0, 0, CompletionDaysAhead))
	if err != nil {
		return res, 0, err
	}
	trimmed, err := days.TrimDefault(ctx, s.pool, "done_time", micros(cutoff))
	return res, trimmed, err
}

// forget resets the completion records of the letters' executions: a
// redrive delivers the execution again, from attempt 1. The row is kept
// with its floor at the dead time, because the pipeline's record of the
// dead attempt may still be on its way (it is written after the dead
// letter is confirmed, which the drainer may store first). It commits on
// its own, before the redrive publishes: the redriven request may be
// consumed before the redrive's transaction commits, and must find the
// reset. Should the redrive then fail, the reset is harmless: it only makes
// the dedupe forget an execution that is dead anyway.
func (s *Store) forget(ctx context.Context, letters []DeadLetter) error {
	// One row per execution (a statement may not update a row twice), keyed
	// by the slot time of the letter's request, as the pipeline keys it.
	latest := map[completionKey]time.Time{}
	for _, d := range letters {
		key, _ := newCompletionKey(d.Request.GetNominalTime().AsTime(), d.ExecutionID)
		if t, ok := latest[key]; !ok || d.DeadTime.After(t) {
			latest[key] = d.DeadTime
		}
	}
	keys := slices.SortedFunc(maps.Keys(latest), compareCompletionKeys)
	nominals, execs, deads := make([]time.Time, len(keys)), make([]uuid.UUID, len(keys)), make([]time.Time, len(keys))
	for i, k := range keys {
		nominals[i], execs[i], deads[i] = k.nominal, k.id, micros(latest[k])
	}
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO completed_attempts AS c (nominal_time, execution_id, attempt, final, done_time, floor_time)
		SELECT n, e, 0, false, t, t FROM unnest($1::timestamptz[], $2::uuid[], $3::timestamptz[]) AS u(n, e, t)
		ON CONFLICT (nominal_time, execution_id) DO UPDATE SET attempt = 0, final = false,
			done_time = GREATEST(c.done_time, EXCLUDED.done_time),
			floor_time = GREATEST(c.floor_time, EXCLUDED.floor_time)`, nominals, execs, deads); err != nil {
		return fmt.Errorf("forget completed attempts of redriven executions: %w", err)
	}
	return nil
}

const deadLetterColumns = `id, namespace, job_id, execution_id, attempt, nominal_time, dead_time,
	reason, response_status, response_excerpt, request`

func scanDeadLetter(r pgx.CollectableRow) (DeadLetter, error) {
	var (
		d             DeadLetter
		id, job, exec uuid.UUID
		nominal       *time.Time
		body          []byte
	)
	if err := r.Scan(&id, &d.Namespace, &job, &exec, &d.Attempt, &nominal, &d.DeadTime,
		&d.Reason, &d.ResponseStatus, &d.ResponseExcerpt, &body); err != nil {
		return d, err
	}
	d.ID, d.JobID, d.ExecutionID = id.String(), job.String(), exec.String()
	d.DeadTime = d.DeadTime.UTC()
	if nominal != nil {
		d.NominalTime = nominal.UTC()
	}
	d.Request = &dispatchv1.DispatchRequest{}
	if err := proto.Unmarshal(body, d.Request); err != nil {
		return d, fmt.Errorf("decode request of dead letter %s: %w", d.ID, err)
	}
	return d, nil
}

// micros truncates t to PostgreSQL's precision (and UTC), so that a time
// written and read back compares equal.
func micros(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
