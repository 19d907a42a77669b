package store

import (
	"context"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
)

// Domain errors; the API maps them to Connect codes.
var (
	// ErrNotFound: no job with that id in the caller's namespace.
	ErrNotFound = errors.New("job not found")
	// ErrEtagMismatch: the job changed since the caller read it.
	ErrEtagMismatch = errors.New("etag does not match the current job")
	// ErrRequestIDReused: a CreateJob request_id is already taken by a job
	// of the namespace (reported only inside a batch, where the new job's
	// fields could differ from the stored one's).
	ErrRequestIDReused = errors.New("request_id already used")
	// ErrNoChange tells Update that the mutation left the job as it was:
	// nothing is written and no event is published.
	ErrNoChange = errors.New("no change")
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// outboxMigration is the version at which the shared outbox table joins the
// registry's own migrations; no file may take it.
const outboxMigration = 2

// Migrations returns the migrations of the registry schema: its own SQL
// files and the outbox table.
func Migrations() ([]migrate.Migration, error) {
	dir, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	files, err := migrate.Load(dir)
	if err != nil {
		return nil, err
	}
	return append(files, migrate.New(outboxMigration, "outbox", outbox.Schema())), nil
}

// Store reads and writes jobs. Safe for concurrent use.
type Store struct {
	pool       *pgxpool.Pool
	propagator propagation.TextMapPropagator
	notify     func()
	now        func() time.Time
	maxJobs    *quota.Quota
}

// Options for New.
type Options struct {
	Pool *pgxpool.Pool
	// Propagator writes the caller's trace context into each event's
	// headers, so consumers continue the trace.
	Propagator propagation.TextMapPropagator
	// Notify is called after a commit that wrote events (to wake the
	// outbox relay early). Optional.
	Notify func()
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// MaxJobs caps the jobs of each namespace; nil means no cap.
	MaxJobs *quota.Quota
}

// New returns a Store.
func New(opts Options) *Store {
	s := &Store{pool: opts.Pool, propagator: opts.Propagator, notify: opts.Notify, now: opts.Now, maxJobs: opts.MaxJobs}
	if s.propagator == nil {
		s.propagator = propagation.TraceContext{}
	}
	if s.notify == nil {
		s.notify = func() {}
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Now returns the store's clock reading, truncated to PostgreSQL's
// microsecond precision so that a time written and read back is equal.
func (s *Store) Now() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// NewJob is a validated job to insert, with its output-only fields (id,
// namespace, create_time) already set by the caller.
type NewJob struct {
	Job       *registryv1.Job
	RequestID string
}

// Create inserts jobs in one transaction with one CREATED event each, all
// or nothing. A job whose request_id the namespace already used is not
// inserted: its slot in the result holds the stored job instead (for a
// single-job call this is the idempotent retry, answered without the
// job's secrets; in a batch of more than one it is ErrRequestIDReused,
// since the batch could differ). The result carries the new jobs' signing
// secrets. Jobs that would take the namespace beyond its MaxJobs quota are
// a *quota.ExceededError, and none is inserted; a replayed request takes no
// room.
func (s *Store) Create(ctx context.Context, namespace string, jobs []NewJob) ([]*registryv1.Job, error) {
	result := make([]*registryv1.Job, len(jobs))
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		fresh, err := s.claimRequestIDs(ctx, tx, namespace, jobs, result)
		if err != nil {
			return err
		}
		if len(fresh) == 0 {
			return nil
		}
		if err := s.checkMaxJobs(ctx, tx, namespace, len(fresh)); err != nil {
			return err
		}
		cols := jobColumns{}
		msgs := make([]outbox.Message, 0, len(fresh))
		for _, i := range fresh {
			job := jobs[i].Job
			job.Version = 1
			job.UpdateTime = job.CreateTime
			job.Etag = etag(job.Version)
			if err := cols.add(job); err != nil {
				return err
			}
			msg, err := s.event(ctx, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, job)
			if err != nil {
				return err
			}
			msgs = append(msgs, msg)
			result[i] = job
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO jobs (id, namespace, display_name, labels, paused, version, spec, signing_secret, create_time, update_time,
				pause_after_dead_letters)
			SELECT id, $1, display_name, labels::jsonb, paused, 1, spec, NULLIF(secret, ''), t, t, pause_after
			FROM unnest($2::uuid[], $3::text[], $4::text[], $5::bool[], $6::bytea[], $7::text[], $8::timestamptz[], $9::int[])
				AS u(id, display_name, labels, paused, spec, secret, t, pause_after)`,
			namespace, cols.ids, cols.names, cols.labels, cols.paused, cols.specs, cols.secrets, cols.times, cols.pauseAfter,
		); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
		return outbox.Write(ctx, tx, msgs...)
	})
	if err != nil {
		return nil, err
	}
	s.notify()
	return result, nil
}

// checkMaxJobs refuses adding jobs beyond the namespace's quota. Creates
// in a namespace take a transaction-scoped advisory lock on it (per schema,
// so registries of different schemas in one database do not contend) and
// count only once they hold it: each counts the jobs of every create that
// committed before it, so concurrent creates cannot together overshoot.
// The count stops at the limit, so its cost is bounded by the quota, not by
// the table. Taken after the request ids are claimed, the lock is held by
// no transaction that waits for another's claim.
func (s *Store) checkMaxJobs(ctx context.Context, tx pgx.Tx, namespace string, adding int) error {
	limit := s.maxJobs.Limit(namespace)
	if limit == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '/jobs/' || $1, 0))`, namespace); err != nil {
		return fmt.Errorf("lock the job count of namespace %s: %w", namespace, err)
	}
	var used int
	// A statement of its own: under READ COMMITTED its snapshot is taken
	// after the lock was granted.
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM jobs WHERE namespace = $1 LIMIT $2) AS j`, namespace, limit).Scan(&used); err != nil {
		return fmt.Errorf("count the jobs of namespace %s: %w", namespace, err)
	}
	return s.maxJobs.Check(namespace, used, adding)
}

// claimRequestIDs records the request ids of jobs and returns the indexes of
// the jobs to insert; for a request id already used it puts the stored job
// into result (single job) or fails (batch).
func (s *Store) claimRequestIDs(ctx context.Context, tx pgx.Tx, namespace string, jobs []NewJob, result []*registryv1.Job) ([]int, error) {
	var reqIDs, jobIDs []string
	for _, j := range jobs {
		if j.RequestID != "" {
			reqIDs = append(reqIDs, j.RequestID)
			jobIDs = append(jobIDs, j.Job.Id)
		}
	}
	fresh := make([]int, 0, len(jobs))
	if len(reqIDs) == 0 {
		for i := range jobs {
			fresh = append(fresh, i)
		}
		return fresh, nil
	}
	// A concurrent transaction inserting the same key makes this wait for
	// it; then ON CONFLICT sees its row, so both callers get the same job.
	rows, err := tx.Query(ctx, `
		INSERT INTO job_requests (namespace, request_id, job_id)
		SELECT $1, r, j FROM unnest($2::text[], $3::uuid[]) AS u(r, j)
		ON CONFLICT (namespace, request_id) DO NOTHING
		RETURNING request_id`, namespace, reqIDs, jobIDs)
	if err != nil {
		return nil, fmt.Errorf("claim request ids: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("claim request ids: %w", err)
	}
	isClaimed := make(map[string]bool, len(claimed))
	for _, r := range claimed {
		isClaimed[r] = true
	}
	for i, j := range jobs {
		if j.RequestID == "" || isClaimed[j.RequestID] {
			fresh = append(fresh, i)
			continue
		}
		if len(jobs) > 1 {
			return nil, fmt.Errorf("%w: %q", ErrRequestIDReused, j.RequestID)
		}
		existing, err := s.getTx(ctx, tx, namespace, "", j.RequestID, false)
		if err != nil {
			return nil, err
		}
		// A replay answers with the job as it is now, never its secrets:
		// they were shown once, to the call that created it, and may
		// have been rotated since.
		redact(existing)
		result[i] = existing
	}
	return fresh, nil
}

// Get returns a job without its signing secret.
func (s *Store) Get(ctx context.Context, namespace, id string) (*registryv1.Job, error) {
	job, err := s.getTx(ctx, s.pool, namespace, id, "", false)
	if err != nil {
		return nil, err
	}
	redact(job)
	return job, nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const selectJob = `SELECT id::text, namespace, display_name, labels, paused, version, spec, coalesce(signing_secret, ''), create_time, update_time FROM jobs`

// getTx reads one job by id or by CreateJob request id, with its secret,
// optionally locking it for update.
func (s *Store) getTx(ctx context.Context, q querier, namespace, id, requestID string, lock bool) (*registryv1.Job, error) {
	var row pgx.Row
	suffix := ""
	if lock {
		suffix = " FOR UPDATE"
	}
	if requestID != "" {
		row = q.QueryRow(ctx, selectJob+` WHERE namespace = $1 AND id = (SELECT job_id FROM job_requests WHERE namespace = $1 AND request_id = $2)`+suffix, namespace, requestID)
	} else {
		if _, err := uuid.Parse(id); err != nil {
			return nil, ErrNotFound
		}
		row = q.QueryRow(ctx, selectJob+` WHERE namespace = $1 AND id = $2`+suffix, namespace, id)
	}
	job, err := scanJob(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return job, err
}

// ListFilter selects jobs for List.
type ListFilter struct {
	Labels map[string]string
	Paused *bool
	// NameContains keeps the jobs whose display name contains it, ignoring
	// case (PostgreSQL's lower()). With it, List examines at most NameScan
	// jobs (after the other filters) and may return a short page, or an
	// empty one, with the id to continue after.
	NameContains string
	NameScan     int
	PageSize     int
	// After is the id the previous page ended at ("" for the first page).
	After string
}

// List returns up to PageSize jobs ordered by id after filter.After, and the
// id to continue after ("" on the last page). Ordering by the primary key
// keeps pages stable while jobs are created and deleted.
func (s *Store) List(ctx context.Context, namespace string, f ListFilter) ([]*registryv1.Job, string, error) {
	after := uuid.Nil.String()
	if f.After != "" {
		after = f.After
	}
	labels := "{}"
	if len(f.Labels) > 0 {
		b, err := json.Marshal(f.Labels)
		if err != nil {
			return nil, "", err
		}
		labels = string(b)
	}
	if f.NameContains != "" {
		return s.listByName(ctx, namespace, after, labels, f)
	}
	// "ORDER BY jobs.id", not "id": the select list's "id::text" is also
	// named id, and ORDER BY would sort by that text, which no index serves
	// (every page would sort the whole namespace).
	rows, err := s.pool.Query(ctx, selectJob+`
		WHERE namespace = $1 AND id > $2::uuid
		  AND ($3::jsonb = '{}'::jsonb OR labels @> $3::jsonb)
		  AND ($4::bool IS NULL OR paused = $4)
		ORDER BY jobs.id LIMIT $5`, namespace, after, labels, f.Paused, f.PageSize+1)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*registryv1.Job, error) { return scanJob(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	next := ""
	if len(jobs) > f.PageSize {
		jobs = jobs[:f.PageSize]
		next = jobs[len(jobs)-1].Id
	}
	for _, j := range jobs {
		redact(j)
	}
	return jobs, next, nil
}

// listByName is List with a name filter. No index serves a substring of a
// name, so it reads the next f.NameScan jobs of the namespace in id order
// (the primary key's order, as List pages), keeps those whose name
// matches, and reads the page's jobs by id. When the window ends before
// the page is full and more jobs may follow, the page ends at the window's
// last job, so the next call goes on from there.
func (s *Store) listByName(ctx context.Context, namespace, after, labels string, f ListFilter) ([]*registryv1.Job, string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT w.id::text, w.matched, w.n FROM (
		    SELECT s.id, strpos(lower(s.display_name), lower($6)) > 0 AS matched,
		           row_number() OVER (ORDER BY s.id) AS rn, count(*) OVER () AS n
		    FROM (SELECT jobs.id, jobs.display_name FROM jobs
		          WHERE namespace = $1 AND id > $2::uuid
		            AND ($3::jsonb = '{}'::jsonb OR labels @> $3::jsonb)
		            AND ($4::bool IS NULL OR paused = $4)
		          ORDER BY jobs.id LIMIT $5) s
		) w
		WHERE w.matched OR w.rn = w.n
		ORDER BY w.id`, namespace, after, labels, f.Paused, f.NameScan, f.NameContains)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs by name: %w", err)
	}
	var ids []string
	var last string
	var scanned int
	var id string
	var matched bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &matched, &scanned}, func() error {
		if matched {
			ids = append(ids, id)
		}
		last = id // the window's last row is always returned, and last
		return nil
	}); err != nil {
		return nil, "", fmt.Errorf("list jobs by name: %w", err)
	}
	next := ""
	switch {
	case len(ids) > f.PageSize:
		ids = ids[:f.PageSize]
		next = ids[len(ids)-1]
	case scanned == f.NameScan:
		next = last
	}
	if len(ids) == 0 {
		return nil, next, nil
	}
	rows, err = s.pool.Query(ctx, selectJob+` WHERE namespace = $1 AND id = ANY($2::uuid[]) ORDER BY jobs.id`, namespace, ids)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs by name: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*registryv1.Job, error) { return scanJob(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list jobs by name: %w", err)
	}
	for _, j := range jobs {
		redact(j)
	}
	return jobs, next, nil
}

// Mutation changes a job in place (the stored job, secret included). It may
// return ErrNoChange to leave the job untouched.
type Mutation func(job *registryv1.Job) error

// Update locks the job, checks ifMatch against its etag (when not empty), applies mutate, bumps
// the version and writes an event of kind. It returns the job without its
// secret.
func (s *Store) Update(ctx context.Context, namespace, id, ifMatch string, kind eventsv1.JobEventKind, mutate Mutation) (*registryv1.Job, error) {
	var out *registryv1.Job
	changed := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		job, err := s.getTx(ctx, tx, namespace, id, "", true)
		if err != nil {
			return err
		}
		if ifMatch != "" && ifMatch != job.Etag {
			return ErrEtagMismatch
		}
		wasPaused := job.Paused
		if err := mutate(job); errors.Is(err, ErrNoChange) {
			out = job
			return nil
		} else if err != nil {
			return err
		}
		if wasPaused && !job.Paused {
			// A resumed job starts a new streak of dead letters: the
			// ones it was paused for do not pause it again.
			if err := s.restartStreak(ctx, tx, job.Id, s.Now()); err != nil {
				return err
			}
		}
		if err := s.writeUpdate(ctx, tx, job, kind); err != nil {
			return err
		}
		changed = true
		out = job
		return nil
	})
	if err != nil {
		return nil, err
	}
	if changed {
		s.notify()
	}
	redact(out)
	return out, nil
}

// Delete removes the job (checking ifMatch against its etag when not
// empty) and writes a DELETED event carrying the job as it
// was, with the version bumped so that consumers order it after every
// earlier change.
func (s *Store) Delete(ctx context.Context, namespace, id, ifMatch string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		job, err := s.getTx(ctx, tx, namespace, id, "", true)
		if err != nil {
			return err
		}
		if ifMatch != "" && ifMatch != job.Etag {
			return ErrEtagMismatch
		}
		if _, err := tx.Exec(ctx, `DELETE FROM jobs WHERE namespace = $1 AND id = $2`, namespace, job.Id); err != nil {
			return fmt.Errorf("delete job: %w", err)
		}
		job.Version++
		job.Etag = etag(job.Version)
		job.UpdateTime = timestamppb.New(s.Now())
		msg, err := s.event(ctx, eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED, job)
		if err != nil {
			return err
		}
		return outbox.Write(ctx, tx, msg)
	})
	if err != nil {
		return err
	}
	s.notify()
	return nil
}

// RunOverride changes the job of a run request (its secrets included) for
// that run only, and says what it overrode ("target", "body", "headers");
// an error aborts the run.
type RunOverride func(job *registryv1.Job) ([]string, error)

// Run records a manual run of the job and writes its RUN_REQUESTED event,
// whose job is the stored one changed by override (nil: none); the stored
// job is not changed. The nominal time is now, or 1 µs after the job's
// previous manual run when two requests share a microsecond, so each
// manual run is its own slot. A repeated requestID returns the first
// call's nominal time and writes nothing. rerunOf is the execution the run
// re-runs (RerunExecution), carried by the event; empty for RunJob.
func (s *Store) Run(ctx context.Context, namespace, id, requestID string, override RunOverride, rerunOf string) (time.Time, error) {
	var nominal time.Time
	wrote := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if requestID != "" {
			err := tx.QueryRow(ctx, `SELECT nominal_time FROM run_requests WHERE namespace = $1 AND request_id = $2`,
				namespace, requestID).Scan(&nominal)
			if err == nil {
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("read run request: %w", err)
			}
		}
		if _, err := uuid.Parse(id); err != nil {
			return ErrNotFound
		}
		err := tx.QueryRow(ctx, `
			UPDATE jobs SET last_run_time = GREATEST($3::timestamptz, last_run_time + interval '1 microsecond')
			WHERE namespace = $1 AND id = $2 RETURNING last_run_time`, namespace, id, s.Now()).Scan(&nominal)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return fmt.Errorf("record run: %w", err)
		}
		if requestID != "" {
			tag, err := tx.Exec(ctx, `
				INSERT INTO run_requests (namespace, request_id, job_id, nominal_time) VALUES ($1, $2, $3, $4)
				ON CONFLICT (namespace, request_id) DO NOTHING`, namespace, requestID, id, nominal)
			if err != nil {
				return fmt.Errorf("record run request: %w", err)
			}
			if tag.RowsAffected() == 0 {
				// A concurrent call with the same key won: roll back ours and
				// let the caller retry to read the winner's nominal time.
				return errConcurrentRun
			}
		}
		job, err := s.getTx(ctx, tx, namespace, id, "", false)
		if err != nil {
			return err
		}
		var overrides []string
		if override != nil {
			if overrides, err = override(job); err != nil {
				return err
			}
		}
		msg, err := s.runEvent(ctx, job, &eventsv1.RunRequest{
			NominalTime: timestamppb.New(nominal),
			RequestId:   requestID,
		}, overrides, rerunOf)
		if err != nil {
			return err
		}
		wrote = true
		return outbox.Write(ctx, tx, msg)
	})
	if errors.Is(err, errConcurrentRun) {
		return s.Run(ctx, namespace, id, requestID, override, rerunOf)
	}
	if err != nil {
		return time.Time{}, err
	}
	if wrote {
		s.notify()
	}
	return nominal.UTC(), nil
}

var errConcurrentRun = errors.New("concurrent run request with the same id")

// PreviousRun returns the job and nominal time of the manual run that
// requestID of namespace already made (RunJob and RerunExecution share the
// keys); found is false when the key is unused.
func (s *Store) PreviousRun(ctx context.Context, namespace, requestID string) (jobID string, nominal time.Time, found bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT job_id::text, nominal_time FROM run_requests WHERE namespace = $1 AND request_id = $2`,
		namespace, requestID).Scan(&jobID, &nominal)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, false, nil
	}
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("read run request: %w", err)
	}
	return jobID, nominal.UTC(), true, nil
}

// runEvent is the RUN_REQUESTED event of a manual run of job (its target
// already the run's): what it overrode and the execution it re-runs.
func (s *Store) runEvent(ctx context.Context, job *registryv1.Job, run *eventsv1.RunRequest, overrides []string, rerunOf string) (outbox.Message, error) {
	return s.message(ctx, &eventsv1.JobEvent{
		Kind:               eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED,
		Job:                job,
		RunRequest:         run,
		RunOverrides:       overrides,
		RerunOfExecutionId: rerunOf,
	})
}

func (s *Store) event(ctx context.Context, kind eventsv1.JobEventKind, job *registryv1.Job) (outbox.Message, error) {
	return s.message(ctx, &eventsv1.JobEvent{Kind: kind, Job: job})
}

// message fills ev's id, version, time and key id and makes it an outbox
// message.
func (s *Store) message(ctx context.Context, ev *eventsv1.JobEvent) (outbox.Message, error) {
	job := ev.Job
	ev.EventId = uuid.Must(uuid.NewV7()).String()
	ev.Version = job.Version
	ev.OccurTime = timestamppb.New(s.Now())
	// The principal rides on ctx from the API key middleware, so every
	// change records its key without each method of the store taking it.
	if p, ok := apikey.PrincipalFrom(ctx); ok {
		ev.KeyId = p.KeyID
	}
	payload, err := proto.Marshal(ev)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("encode event: %w", err)
	}
	headers := map[string]string{}
	s.propagator.Inject(ctx, propagation.MapCarrier(headers))
	return outbox.Message{
		AggregateID: job.Id,
		RoutingKey:  broker.JobRoutingKey(ev.Kind),
		MessageID:   ev.EventId,
		Payload:     payload,
		Headers:     headers,
	}, nil
}

func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// jobColumns is jobs laid out as column arrays for one INSERT ... unnest.
type jobColumns struct {
	ids, names, labels, secrets []string
	paused                      []bool
	specs                       [][]byte
	times                       []time.Time
	// pauseAfter fills the column pause_after_dead_letters. This registry
	// reads the option from the spec; registries that looked the pausing
	// jobs up by the column may run beside it during a rolling upgrade.
	pauseAfter []int32
}

func (c *jobColumns) add(job *registryv1.Job) error {
	labels, err := json.Marshal(job.Labels)
	if err != nil {
		return fmt.Errorf("encode labels: %w", err)
	}
	if job.Labels == nil {
		labels = []byte("{}")
	}
	secret := ""
	spec := proto.Clone(job).(*registryv1.Job)
	if h := spec.GetTarget().GetHttp(); h != nil {
		secret, h.SigningSecret = h.SigningSecret, ""
	}
	// Output-only fields live in their own columns.
	spec.Id, spec.Namespace, spec.Etag, spec.Version = "", "", "", 0
	spec.CreateTime, spec.UpdateTime = nil, nil
	b, err := proto.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode job: %w", err)
	}
	c.ids = append(c.ids, job.Id)
	c.names = append(c.names, job.DisplayName)
	c.labels = append(c.labels, string(labels))
	c.paused = append(c.paused, job.Paused)
	c.specs = append(c.specs, b)
	c.secrets = append(c.secrets, secret)
	c.times = append(c.times, job.CreateTime.AsTime())
	c.pauseAfter = append(c.pauseAfter, job.PauseAfterDeadLetters)
	return nil
}

func scanJob(row pgx.Row) (*registryv1.Job, error) {
	var (
		id, namespace, name, secret string
		labels                      map[string]string
		paused                      bool
		version                     int64
		spec                        []byte
		created, updated            time.Time
	)
	if err := row.Scan(&id, &namespace, &name, &labels, &paused, &version, &spec, &secret, &created, &updated); err != nil {
		return nil, err
	}
	job := &registryv1.Job{}
	if err := proto.Unmarshal(spec, job); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", id, err)
	}
	job.Id, job.Namespace, job.DisplayName, job.Labels, job.Paused = id, namespace, name, labels, paused
	job.Version, job.Etag = version, etag(version)
	job.CreateTime, job.UpdateTime = timestamppb.New(created), timestamppb.New(updated)
	if h := job.GetTarget().GetHttp(); h != nil {
		h.SigningSecret = secret
	}
	return job, nil
}

// redact removes what must never leave the registry after creation: the
// signing secret and the secret header values.
func redact(job *registryv1.Job) {
	targetcheck.Redact(job.GetTarget())
}

// etag is opaque to clients; deriving it from the version makes every
// committed change produce a new one.
func etag(version int64) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "v%d", version))
}
