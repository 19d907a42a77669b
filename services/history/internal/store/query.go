package store

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
)

// ListFilter selects executions of one namespace. Zero fields do not
// filter.
type ListFilter struct {
	Namespace    string
	JobID        string
	Statuses     []Status
	TriggerKinds []int16
	// Start is inclusive, End exclusive (nominal time).
	Start, End time.Time
	// Query is a case-insensitive substring of the reason or the excerpt.
	Query string
	// Limit is the page size (> 0).
	Limit int
	// PageToken continues a previous page.
	PageToken string
}

// fingerprint identifies the filter (without the limit and the token), so a
// token is refused when used with other filters: keyset pages of different
// filters do not line up.
func (f *ListFilter) fingerprint() uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%v\x00%v\x00%d\x00%d\x00%s", f.Namespace, f.JobID, f.Statuses, f.TriggerKinds,
		f.Start.UnixMicro(), f.End.UnixMicro(), f.Query)
	return h.Sum64()
}

// cursor is the position after the last row of a page: rows sort by
// (nominal_time, execution_id) descending, a total order on the table's key,
// so the next page starts strictly after it whatever is inserted meanwhile
// (rows inserted before the cursor appear on a later page; rows inserted
// after it were "newer" than the caller's first page and are not shown).
type cursor struct {
	nominal time.Time
	id      uuid.UUID
	filter  uint64
}

// encode is base64url of nominal micros (8), id (16), filter (8).
func (c cursor) encode() string {
	b := make([]byte, 0, 32)
	b = binary.BigEndian.AppendUint64(b, uint64(c.nominal.UnixMicro()))
	b = append(b, c.id[:]...)
	b = binary.BigEndian.AppendUint64(b, c.filter)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		return cursor{}, ErrBadCursor
	}
	var c cursor
	c.nominal = time.UnixMicro(int64(binary.BigEndian.Uint64(b[:8]))).UTC()
	copy(c.id[:], b[8:24])
	c.filter = binary.BigEndian.Uint64(b[24:])
	return c, nil
}

// executionColumns are the columns scanExecution reads.
const executionColumns = `nominal_time, execution_id::text, job_id, job_display_name, trigger_kind, status, attempt,
	fire_time, start_time, duration_us, response_status, response_excerpt, reason, trace_id, update_time,
	rerun_of_execution_id, overridden_fields`

func scanExecution(rows pgx.CollectableRow) (*historyv1.Execution, error) {
	return scanExecutionAnd(rows)
}

// scanExecutionAnd scans executionColumns and then extra.
func scanExecutionAnd(rows pgx.CollectableRow, extra ...any) (*historyv1.Execution, error) {
	var (
		e                   historyv1.Execution
		nominal, update     time.Time
		fire, start         *time.Time
		duration            *int64
		triggerKind, status int16
		overridden          string
	)
	dst := append([]any{&nominal, &e.ExecutionId, &e.JobId, &e.JobDisplayName, &triggerKind, &status, &e.Attempt,
		&fire, &start, &duration, &e.ResponseStatus, &e.ResponseExcerpt, &e.Reason, &e.TraceId, &update,
		&e.RerunOfExecutionId, &overridden}, extra...)
	if err := rows.Scan(dst...); err != nil {
		return nil, err
	}
	if overridden != "" {
		e.OverriddenFields = strings.Split(overridden, ",")
	}
	e.NominalTime = timestamppb.New(nominal)
	e.UpdateTime = timestamppb.New(update)
	e.TriggerKind = dispatchv1.TriggerKind(triggerKind)
	e.Status = historyv1.ExecutionStatus(status)
	if fire != nil {
		e.FireTime = timestamppb.New(*fire)
	}
	if start != nil {
		e.StartTime = timestamppb.New(*start)
	}
	if duration != nil {
		e.Duration = durationpb.New(time.Duration(*duration) * time.Microsecond)
	}
	return &e, nil
}

// likePattern is q as a LIKE pattern matching it anywhere.
func likePattern(q string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(q) + "%"
}

// SearchExpression is the indexed text the search matches (see the
// executions_search index): it must stay identical to the index's.
const SearchExpression = `(reason || E'\n' || response_excerpt)`

// List returns a page of executions newest first and the token of the next
// page ("" on the last). ErrBadCursor for a token not issued for f.
func (s *Store) List(ctx context.Context, f ListFilter) ([]*historyv1.Execution, string, error) {
	if f.Limit <= 0 {
		return nil, "", errors.New("store: List needs a positive Limit")
	}
	fp := f.fingerprint()
	args := []any{f.Namespace}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := []string{"namespace = $1"}
	if f.JobID != "" {
		where = append(where, "job_id = "+arg(f.JobID))
	}
	if len(f.Statuses) > 0 {
		st := make([]int16, len(f.Statuses))
		for i, v := range f.Statuses {
			st[i] = int16(v)
		}
		where = append(where, "status = ANY("+arg(st)+"::smallint[])")
	}
	if len(f.TriggerKinds) > 0 {
		where = append(where, "trigger_kind = ANY("+arg(f.TriggerKinds)+"::smallint[])")
	}
	if !f.Start.IsZero() {
		where = append(where, "nominal_time >= "+arg(f.Start))
	}
	if !f.End.IsZero() {
		where = append(where, "nominal_time < "+arg(f.End))
	}
	if f.Query != "" {
		where = append(where, SearchExpression+" ILIKE "+arg(likePattern(f.Query)))
	}
	if f.PageToken != "" {
		c, err := decodeCursor(f.PageToken)
		if err != nil || c.filter != fp {
			return nil, "", ErrBadCursor
		}
		where = append(where, fmt.Sprintf("(nominal_time, execution_id) < (%s, %s::uuid)", arg(c.nominal), arg(c.id.String())))
	}
	sql := "SELECT " + executionColumns + " FROM executions WHERE " + strings.Join(where, " AND ") +
		" ORDER BY nominal_time DESC, execution_id DESC LIMIT " + arg(f.Limit+1)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list executions: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanExecution)
	if err != nil {
		return nil, "", fmt.Errorf("list executions: %w", err)
	}
	if len(out) <= f.Limit {
		return out, "", nil
	}
	out = out[:f.Limit]
	last := out[len(out)-1]
	return out, cursor{nominal: last.GetNominalTime().AsTime(), id: uuid.MustParse(last.GetExecutionId()), filter: fp}.encode(), nil
}

// Get returns the execution of namespace with id and its attempts, oldest
// first; ErrNotFound when there is none (or it belongs to another
// namespace).
//
// The latest attempt is the execution row's (see Ingest): the attempts
// table holds the earlier ones. An execution written before migration 0003
// also has an attempts row for its latest attempt, merged into the one made
// from the execution row so that it is listed once.
func (s *Store) Get(ctx context.Context, namespace, id string) (*historyv1.Execution, []*historyv1.Attempt, error) {
	if uuid.Validate(id) != nil {
		return nil, nil, ErrNotFound // no execution has a malformed id
	}
	var retryDelay *int64
	rows, err := s.pool.Query(ctx, "SELECT "+executionColumns+", retry_delay_us FROM executions WHERE execution_id = $1 AND namespace = $2", id, namespace)
	if err != nil {
		return nil, nil, fmt.Errorf("get execution: %w", err)
	}
	execs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*historyv1.Execution, error) {
		return scanExecutionAnd(r, &retryDelay)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("get execution: %w", err)
	}
	if len(execs) == 0 {
		return nil, nil, ErrNotFound
	}
	e := execs[0]
	// Attempts beyond the row's are not listed: the versions before 0003
	// wrote the attempts row of an event whose namespace did not match.
	rows, err = s.pool.Query(ctx, `
		SELECT attempt, status, start_time, duration_us, response_status, response_excerpt, reason, retry_delay_us
		FROM attempts WHERE nominal_time = $1 AND execution_id = $2 AND attempt <= $3 ORDER BY attempt`,
		e.GetNominalTime().AsTime(), id, e.GetAttempt())
	if err != nil {
		return nil, nil, fmt.Errorf("get attempts: %w", err)
	}
	attempts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*historyv1.Attempt, error) {
		var (
			a                   historyv1.Attempt
			status              int16
			start               *time.Time
			duration, retryWait *int64
		)
		if err := r.Scan(&a.Attempt, &status, &start, &duration, &a.ResponseStatus, &a.ResponseExcerpt, &a.Reason, &retryWait); err != nil {
			return nil, err
		}
		a.Status = historyv1.ExecutionStatus(status)
		if start != nil {
			a.StartTime = timestamppb.New(*start)
		}
		if duration != nil {
			a.Duration = durationpb.New(time.Duration(*duration) * time.Microsecond)
		}
		if retryWait != nil {
			a.RetryDelay = durationpb.New(time.Duration(*retryWait) * time.Microsecond)
		}
		return &a, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("get attempts: %w", err)
	}
	if e.GetAttempt() < 1 {
		// A missed, skipped or buffered slot: no attempt was made.
		return e, attempts, nil
	}
	latest := latestAttempt(e, retryDelay)
	if n := len(attempts); n > 0 && attempts[n-1].GetAttempt() == latest.GetAttempt() {
		// Written before 0003: the same attempt, merged the same way, and
		// the retry delay the execution row did not have then.
		fillAttempt(latest, attempts[n-1])
		attempts = attempts[:n-1]
	}
	return e, append(attempts, latest), nil
}

// latestAttempt is the attempt the execution row holds (its own copies of
// the times, so the response shares no message between the two).
func latestAttempt(e *historyv1.Execution, retryDelayUS *int64) *historyv1.Attempt {
	a := &historyv1.Attempt{
		Attempt:         e.GetAttempt(),
		Status:          e.GetStatus(),
		ResponseStatus:  e.GetResponseStatus(),
		ResponseExcerpt: e.GetResponseExcerpt(),
		Reason:          e.GetReason(),
	}
	if e.StartTime != nil {
		a.StartTime = timestamppb.New(e.GetStartTime().AsTime())
	}
	if e.Duration != nil {
		a.Duration = durationpb.New(e.GetDuration().AsDuration())
	}
	if retryDelayUS != nil {
		a.RetryDelay = durationpb.New(time.Duration(*retryDelayUS) * time.Microsecond)
	}
	return a
}

// fillAttempt fills what a lacks from b, an older record of the same
// attempt.
func fillAttempt(a, b *historyv1.Attempt) {
	if a.StartTime == nil {
		a.StartTime = b.GetStartTime()
	}
	if a.Duration == nil {
		a.Duration = b.GetDuration()
	}
	if a.ResponseStatus == 0 {
		a.ResponseStatus = b.GetResponseStatus()
	}
	if a.ResponseExcerpt == "" {
		a.ResponseExcerpt = b.GetResponseExcerpt()
	}
	if a.Reason == "" {
		a.Reason = b.GetReason()
	}
	if a.RetryDelay == nil {
		a.RetryDelay = b.GetRetryDelay()
	}
}

// Stats summarises a job's executions with nominal time in [start, end).
type Stats struct {
	LastRun                                    *historyv1.Execution // nil when none
	Runs, Successes, Failures, Missed, Skipped int64
	// Percentiles of the finished executions' latest-attempt durations;
	// nil when none finished.
	P50, P95, P99 *time.Duration
}

// JobStats computes Stats for the job of namespace.
func (s *Store) JobStats(ctx context.Context, namespace, jobID string, start, end time.Time) (Stats, error) {
	var st Stats
	var pct []float64
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE status NOT IN (7, 8, 9)),
		       count(*) FILTER (WHERE status = 2),
		       count(*) FILTER (WHERE status IN (4, 5)),
		       count(*) FILTER (WHERE status = 7),
		       count(*) FILTER (WHERE status = 8),
		       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY duration_us)
		           FILTER (WHERE status IN (2, 4, 5) AND duration_us IS NOT NULL)
		FROM executions
		WHERE namespace = $1 AND job_id = $2 AND nominal_time >= $3 AND nominal_time < $4`,
		namespace, jobID, start, end).Scan(&st.Runs, &st.Successes, &st.Failures, &st.Missed, &st.Skipped, &pct)
	if err != nil {
		return Stats{}, fmt.Errorf("job stats: %w", err)
	}
	if len(pct) == 3 {
		ds := make([]*time.Duration, 3)
		for i, us := range pct {
			d := time.Duration(us * float64(time.Microsecond))
			ds[i] = &d
		}
		st.P50, st.P95, st.P99 = ds[0], ds[1], ds[2]
	}
	rows, err := s.pool.Query(ctx, "SELECT "+executionColumns+` FROM executions
		WHERE namespace = $1 AND job_id = $2 AND status NOT IN (7, 8, 9) ORDER BY nominal_time DESC, execution_id DESC LIMIT 1`, namespace, jobID)
	if err != nil {
		return Stats{}, fmt.Errorf("job stats: last run: %w", err)
	}
	last, err := pgx.CollectRows(rows, scanExecution)
	if err != nil {
		return Stats{}, fmt.Errorf("job stats: last run: %w", err)
	}
	if len(last) > 0 {
		st.LastRun = last[0]
	}
	return st, nil
}

// ValidStatus reports whether s is a status executions can have.
func ValidStatus(s Status) bool {
	return slices.Contains([]Status{StatusRunning, StatusSucceeded, StatusRetrying, StatusFailed, StatusDead, StatusCancelled, StatusMissed, StatusSkipped, StatusBuffered}, s)
}
