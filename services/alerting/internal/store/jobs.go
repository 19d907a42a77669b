package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/schedule"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
)

// ErrInvalidEvent wraps a job event that can never be applied.
var ErrInvalidEvent = errors.New("invalid job event")

// JobApplied says what ApplyJobEvents did with an event.
type JobApplied int

// The outcomes of ApplyJobEvents.
const (
	// JobUpserted: the row holds the event's version now (or a newer
	// version of the same batch, applied after it).
	JobUpserted JobApplied = iota + 1
	// JobStale: the row holds this version or a newer one already (a
	// redelivery, or an event overtaken by a newer one).
	JobStale
	// JobIgnored: the event does not change a job definition (a run
	// request).
	JobIgnored
)

// JobResult is what ApplyJobEvents did with one event.
type JobResult struct {
	// Applied is the outcome; 0 when Err is set.
	Applied JobApplied
	// Err, when set, wraps ErrInvalidEvent: the event can never be applied
	// and changed nothing. The batch's other events are applied.
	Err error
}

// maxApplyAttempts bounds the retries of a batch that lost a race: an
// insert found a row created since the batch read (by another batch, or a
// placeholder of the evaluator's), or PostgreSQL broke a deadlock by
// aborting this transaction.
const maxApplyAttempts = 3

// errLostRace rolls a batch back: an insert found a row that did not exist
// when the batch read the rows.
var errLostRace = errors.New("a job row was created concurrently")

// ApplyJobEvent applies one registry job event: ApplyJobEvents of one. An
// event that can never be applied returns an error wrapping
// ErrInvalidEvent; any other error is the database's and worth a retry.
func (s *Store) ApplyJobEvent(ctx context.Context, ev *eventsv1.JobEvent, now time.Time) (JobApplied, error) {
	res, err := s.ApplyJobEvents(ctx, []*eventsv1.JobEvent{ev}, now)
	if err != nil {
		return 0, err
	}
	return res[0].Applied, res[0].Err
}

// ApplyJobEvents applies registry job events to the jobs table in one
// transaction, each only if its version is newer than the row's (as the
// trigger's projection does): a redelivered or overtaken event changes
// nothing (JobStale). The events of one job within the batch are applied
// in version order, whatever their order in events, each against the state
// the one before left (the highest version wins; an equal version after the
// first is JobStale), and only the job's final row is written. A deleted
// job keeps its row, flagged, so that an older event arriving after the
// delete cannot bring it back. RUN_REQUESTED events change nothing
// (JobIgnored). The watchdog's next expected slot is recomputed from the
// schedule (libs/jobspec, the code the registry and the trigger use) as
// the first slot after now and after the latest slot seen; a job that has
// run its max_runs has none.
//
// Limited runs follow the trigger's rules: an event that gives a job its
// limit starts its count (runs_seen) from the runs recorded after the
// event's occur time, or from every run recorded while alerting did not
// know the job yet when the event is the job's first; one that changes
// the limit keeps the count; one without a limit, or a delete, clears it.
//
// Concurrent batches lock the rows they read in id order, so they cannot
// deadlock each other; a batch that loses a race to create a row is read
// and applied again.
//
// The result has one entry per event, in the order of events. An event that
// can never be applied (no job id, no positive version, a schedule libs/jobspec
// refuses when the job would be watched) gets a Result whose Err wraps
// ErrInvalidEvent and leaves the others unharmed; an error return is the
// database's, nothing of the batch was written, and the whole batch is
// worth a retry.
func (s *Store) ApplyJobEvents(ctx context.Context, events []*eventsv1.JobEvent, now time.Time) ([]JobResult, error) {
	results := make([]JobResult, len(events))
	changes := make([]jobChange, 0, len(events))
	for i, ev := range events {
		if ev.GetKind() == eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED {
			results[i].Applied = JobIgnored
			continue
		}
		c, err := prepareJobChange(ev)
		if err != nil {
			results[i].Err = err
			continue
		}
		c.index = i
		changes = append(changes, c)
	}
	if len(changes) == 0 {
		return results, nil
	}
	for attempt := 1; ; attempt++ {
		err := s.inTx(ctx, func(tx pgx.Tx) error { return applyJobChanges(ctx, tx, changes, results, now) })
		if err == nil {
			return results, nil
		}
		if !errors.Is(err, errLostRace) && !postgres.IsSerializationFailure(err) {
			return nil, err
		}
		if attempt == maxApplyAttempts {
			return nil, fmt.Errorf("apply %d job events: %w (%d attempts)", len(events), err, attempt)
		}
	}
}

// jobChange is an event of a batch, decoded into the row it writes (all
// but the next slot, which depends on the row it finds).
type jobChange struct {
	index       int // in the batch's events
	id          string
	namespace   string
	displayName string
	labels      string // JSON
	version     int64
	deleted     bool
	paused      bool
	schedule    []byte // the protobuf Schedule; nil without one
	created     time.Time
	// maxRuns is the job's limit (0: none) and occur the event's time.
	maxRuns int64
	occur   time.Time
	// sched computes the next slot when watched; the job is not watched
	// when deleted, paused, without a schedule, or with schedErr.
	sched   schedule.Schedule
	watched bool
	// schedErr wraps ErrInvalidEvent when libs/jobspec refused a schedule
	// the job would be watched by. It makes the event invalid only if it
	// is newer than the row: a stale event is stale, as before batching.
	schedErr error
}

// prepareJobChange validates ev and encodes its row. Its error wraps
// ErrInvalidEvent, except a failure to encode.
func prepareJobChange(ev *eventsv1.JobEvent) (jobChange, error) {
	job := ev.GetJob()
	if job.GetId() == "" || ev.GetVersion() <= 0 {
		return jobChange{}, fmt.Errorf("%w: no job id or no positive version", ErrInvalidEvent)
	}
	c := jobChange{
		id: job.GetId(), namespace: job.GetNamespace(), displayName: job.GetDisplayName(),
		version: ev.GetVersion(), deleted: ev.GetKind() == eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED,
		paused: job.GetPaused(), created: job.GetCreateTime().AsTime(),
		maxRuns: max(job.GetMaxRuns(), 0), occur: ev.GetOccurTime().AsTime(),
	}
	if job.GetSchedule() != nil {
		b, err := proto.Marshal(job.GetSchedule())
		if err != nil {
			return jobChange{}, fmt.Errorf("%w: job %s: encode schedule: %v", ErrInvalidEvent, c.id, err)
		}
		c.schedule = b
	}
	labels, err := json.Marshal(job.GetLabels())
	if err != nil {
		return jobChange{}, fmt.Errorf("%w: job %s: encode labels: %v", ErrInvalidEvent, c.id, err)
	}
	c.labels = string(labels)
	if !c.deleted && !c.paused && job.GetSchedule() != nil {
		sched, errs := jobspec.Schedule(job.GetSchedule(), c.created)
		if len(errs) > 0 {
			c.schedErr = fmt.Errorf("%w: job %s: schedule: %v", ErrInvalidEvent, c.id, errs[0])
		} else {
			c.sched, c.watched = sched, true
		}
	}
	return c, nil
}

// storedJobRow is what a batch reads of a job row before changing it.
type storedJobRow struct {
	version    int64
	seen       *time.Time
	maxRuns    int64
	runsSeen   int64
	limitSince *time.Time
}

// runLimit is a job's limit and count as a batch leaves them.
type runLimit struct {
	maxRuns    int64
	runsSeen   int64
	limitSince *time.Time
	// recount: runsSeen is to be counted from limited_runs (after
	// limitSince); clear: the job's limited_runs rows are to go.
	recount, clear bool
}

// next is the limit after c, applied to a job whose limit was l; first
// says c is the first event alerting applies to the job (the job had no
// row, or a placeholder of execution events).
func (l runLimit) next(c *jobChange, first bool) runLimit {
	switch {
	case c.deleted || c.maxRuns == 0:
		return runLimit{clear: true}
	case first:
		// The runs recorded before the job's first event are all its own.
		return runLimit{maxRuns: c.maxRuns, recount: true}
	case l.maxRuns == 0:
		since := c.occur
		return runLimit{maxRuns: c.maxRuns, limitSince: &since, recount: true}
	default:
		l.maxRuns = c.maxRuns
		return l
	}
}

// completed: the job has run its limit.
func (l runLimit) completed() bool { return l.maxRuns > 0 && l.runsSeen >= l.maxRuns }

// jobRowArrays are job rows to write, as column arrays.
type jobRowArrays struct {
	ids, namespaces, names, labels []string
	versions                       []int64
	deleted, paused                []bool
	schedules                      [][]byte
	created                        []time.Time
	next                           []*time.Time
	maxRuns, runsSeen              []int64
	limitSince                     []*time.Time
}

func (r *jobRowArrays) add(c *jobChange, next *time.Time, lim runLimit) {
	r.maxRuns = append(r.maxRuns, lim.maxRuns)
	r.runsSeen = append(r.runsSeen, lim.runsSeen)
	r.limitSince = append(r.limitSince, lim.limitSince)
	r.ids = append(r.ids, c.id)
	r.namespaces = append(r.namespaces, c.namespace)
	r.names = append(r.names, c.displayName)
	r.labels = append(r.labels, c.labels)
	r.versions = append(r.versions, c.version)
	r.deleted = append(r.deleted, c.deleted)
	r.paused = append(r.paused, c.paused)
	r.schedules = append(r.schedules, c.schedule)
	r.created = append(r.created, c.created)
	r.next = append(r.next, next)
}

func (r *jobRowArrays) args() []any {
	return []any{r.ids, r.namespaces, r.names, r.labels, r.versions, r.deleted, r.paused, r.schedules, r.created, r.next,
		r.maxRuns, r.runsSeen, r.limitSince}
}

// applyJobChanges is one attempt of ApplyJobEvents in tx; it fills the
// results of changes.
func applyJobChanges(ctx context.Context, tx pgx.Tx, changes []jobChange, results []JobResult, now time.Time) error {
	byJob := map[string][]int{} // indexes into changes
	for i := range changes {
		byJob[changes[i].id] = append(byJob[changes[i].id], i)
	}
	ids := slices.Sorted(maps.Keys(byJob))
	stored, err := lockJobRows(ctx, tx, ids)
	if err != nil {
		return err
	}
	type write struct {
		id    string
		last  *jobChange
		found bool
		row   storedJobRow
		lim   runLimit
	}
	var writes []write
	for _, id := range ids {
		evs := byJob[id]
		slices.SortStableFunc(evs, func(a, b int) int { return cmp.Compare(changes[a].version, changes[b].version) })
		row, found := stored[id]
		version, hasVersion := row.version, found
		lim := runLimit{maxRuns: row.maxRuns, runsSeen: row.runsSeen, limitSince: row.limitSince}
		first := !found || row.version == 0
		var last *jobChange
		for _, i := range evs {
			c := &changes[i]
			results[c.index] = JobResult{}
			switch {
			case hasVersion && version >= c.version:
				results[c.index].Applied = JobStale
			case c.schedErr != nil:
				results[c.index].Err = c.schedErr
			default:
				results[c.index].Applied = JobUpserted
				version, hasVersion, last = c.version, true, c
				lim = lim.next(c, first)
				first = false
			}
		}
		if last == nil {
			continue
		}
		writes = append(writes, write{id: id, last: last, found: found, row: row, lim: lim})
	}
	lims := make([]*runLimit, len(writes))
	wids := make([]string, len(writes))
	for i := range writes {
		lims[i], wids[i] = &writes[i].lim, writes[i].id
	}
	if err := countRuns(ctx, tx, wids, lims); err != nil {
		return err
	}
	var updates, inserts jobRowArrays
	for _, w := range writes {
		last, row := w.last, w.row
		// Job events do not move seen_through, so the next slot depends
		// only on the last event, the row's seen_through and now.
		var next *time.Time
		if last.watched && !w.lim.completed() {
			after := now
			if row.seen != nil && row.seen.After(after) {
				after = *row.seen
			}
			if t, ok := last.sched.Next(after); ok {
				next = &t
			}
		}
		if w.found {
			updates.add(last, next, w.lim)
		} else {
			inserts.add(last, next, w.lim)
		}
	}
	return writeJobRows(ctx, tx, &updates, &inserts)
}

// countRuns carries out what the batch's limits ask of limited_runs: the
// rows of a job that lost its limit go; a job that got one counts its rows
// after its limitSince (and drops those at or before it).
func countRuns(ctx context.Context, tx pgx.Tx, ids []string, lims []*runLimit) error {
	var clear, recount []string
	var since []*time.Time
	var recounted []*runLimit
	for i, l := range lims {
		switch {
		case l.clear:
			clear = append(clear, ids[i])
		case l.recount:
			recount, since, recounted = append(recount, ids[i]), append(since, l.limitSince), append(recounted, l)
		}
	}
	if len(clear) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM limited_runs WHERE job_id = ANY($1::text[])`, clear); err != nil {
			return fmt.Errorf("forget the runs of %d jobs: %w", len(clear), err)
		}
	}
	if len(recount) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `
		DELETE FROM limited_runs l USING unnest($1::text[], $2::timestamptz[]) AS u(id, since)
		WHERE l.job_id = u.id AND l.nominal_time <= u.since`, recount, since); err != nil {
		return fmt.Errorf("count the runs of %d jobs: %w", len(recount), err)
	}
	rows, err := tx.Query(ctx, `
		SELECT u.i, (SELECT count(*) FROM limited_runs l WHERE l.job_id = u.id)
		FROM unnest($1::text[]) WITH ORDINALITY AS u(id, i)`, recount)
	if err != nil {
		return fmt.Errorf("count the runs of %d jobs: %w", len(recount), err)
	}
	var i, n int64
	_, err = pgx.ForEachRow(rows, []any{&i, &n}, func() error {
		recounted[i-1].runsSeen = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("count the runs of %d jobs: %w", len(recount), err)
	}
	return nil
}

// lockJobRows reads and locks the rows of ids (sorted, so that concurrent
// batches lock in one order and cannot deadlock each other). A job without
// a row is absent from the map.
func lockJobRows(ctx context.Context, tx pgx.Tx, ids []string) (map[string]storedJobRow, error) {
	rows, err := tx.Query(ctx, `
		SELECT id, version, seen_through, max_runs, runs_seen, limit_since
		FROM jobs WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, ids)
	if err != nil {
		return nil, fmt.Errorf("read %d jobs: %w", len(ids), err)
	}
	stored := make(map[string]storedJobRow, len(ids))
	var (
		id  string
		row storedJobRow
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &row.version, &row.seen, &row.maxRuns, &row.runsSeen, &row.limitSince}, func() error {
		stored[id] = row
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %d jobs: %w", len(ids), err)
	}
	return stored, nil
}

// writeJobRows writes a batch's rows: updates of the rows it locked,
// inserts of new ones (both in id order, as the ids were sorted). An insert
// that finds a row (created since the batch read) returns errLostRace, so
// the batch is rolled back and read again.
func writeJobRows(ctx context.Context, tx pgx.Tx, updates, inserts *jobRowArrays) error {
	if len(updates.ids) > 0 {
		// The rows are locked and older: the updates cannot miss.
		if _, err := tx.Exec(ctx, `
			UPDATE jobs SET namespace = u.namespace, display_name = u.name, labels = u.labels::jsonb,
			    version = u.version, deleted = u.deleted, paused = u.paused, schedule = u.schedule,
			    create_time = u.created, next_slot = u.next, check_time = u.next,
			    max_runs = u.max_runs, runs_seen = u.runs_seen, limit_since = u.limit_since
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bool[], $7::bool[],
			            $8::bytea[], $9::timestamptz[], $10::timestamptz[], $11::bigint[], $12::bigint[], $13::timestamptz[])
			    AS u(id, namespace, name, labels, version, deleted, paused, schedule, created, next, max_runs, runs_seen, limit_since)
			WHERE jobs.id = u.id AND jobs.version < u.version`, updates.args()...); err != nil {
			return fmt.Errorf("update %d jobs: %w", len(updates.ids), err)
		}
	}
	if len(inserts.ids) > 0 {
		tag, err := tx.Exec(ctx, `
			INSERT INTO jobs (id, namespace, display_name, labels, version, deleted, paused, schedule, create_time, next_slot, check_time,
			    max_runs, runs_seen, limit_since)
			SELECT u.id, u.namespace, u.name, u.labels::jsonb, u.version, u.deleted, u.paused, u.schedule, u.created, u.next, u.next,
			    u.max_runs, u.runs_seen, u.limit_since
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bool[], $7::bool[],
			            $8::bytea[], $9::timestamptz[], $10::timestamptz[], $11::bigint[], $12::bigint[], $13::timestamptz[])
			    AS u(id, namespace, name, labels, version, deleted, paused, schedule, created, next, max_runs, runs_seen, limit_since)
			ON CONFLICT (id) DO NOTHING`, inserts.args()...)
		if err != nil {
			return fmt.Errorf("insert %d jobs: %w", len(inserts.ids), err)
		}
		if int(tag.RowsAffected()) < len(inserts.ids) {
			return errLostRace
		}
	}
	return nil
}

// watched is a job the watchdog looks at.
type watched struct {
	id, namespace, name string
	labels              map[string]string
	sched               schedule.Schedule
	next                time.Time
	seen                *time.Time
	// maxRuns and runsSeen: see runLimit.
	maxRuns, runsSeen int64
}

// WatchResult counts what one Watch pass did.
type WatchResult struct {
	// Checked is how many jobs were due for a look.
	Checked int
	// Missed is how many of them had no event for their slot.
	Missed int
	Opened int
}

// Watch is one pass of the missed-schedule watchdog: it takes up to limit
// jobs whose next expected slot is at least the smallest missed-schedule
// tolerance old (the partial index on check_time finds them), and for
// each: if an execution event for that slot (or a later one) arrived, it
// moves on to the next slot; if none did, every missed-schedule rule that
// watches the job and whose tolerance has passed opens an incident (one per
// rule and job), and the job moves past the slots missed so far. A rule
// with a longer tolerance still waiting makes the job due again when it
// passes. A job that has run its max_runs is no longer watched. The rows
// are locked (SKIP LOCKED), so replicas share the work.
func (s *Store) Watch(ctx context.Context, set *rules.Set, now time.Time, limit int) (WatchResult, error) {
	var res WatchResult
	minTol := set.MinTolerance
	if minTol <= 0 {
		return res, nil // no missed-schedule rule: nothing to watch for
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id, namespace, display_name, labels, schedule, create_time, next_slot, seen_through, max_runs, runs_seen
			FROM jobs WHERE check_time <= $1
			ORDER BY check_time LIMIT $2 FOR UPDATE SKIP LOCKED`, now.Add(-minTol), limit)
		if err != nil {
			return err
		}
		var jobs []watched
		var w watched
		var labels, schedBytes []byte
		var created time.Time
		_, err = pgx.ForEachRow(rows, []any{&w.id, &w.namespace, &w.name, &labels, &schedBytes, &created, &w.next, &w.seen, &w.maxRuns, &w.runsSeen}, func() error {
			j := w
			if err := json.Unmarshal(labels, &j.labels); err != nil {
				return err
			}
			spec := &registryv1.Schedule{}
			if err := proto.Unmarshal(schedBytes, spec); err != nil {
				return err
			}
			sched, errs := jobspec.Schedule(spec, created)
			if len(errs) > 0 {
				return fmt.Errorf("job %s: schedule: %v", j.id, errs[0])
			}
			j.sched = sched
			jobs = append(jobs, j)
			return nil
		})
		if err != nil {
			return err
		}
		res.Checked = len(jobs)
		ids := make([]string, 0, len(jobs))
		nexts := make([]*time.Time, 0, len(jobs))
		checks := make([]*time.Time, 0, len(jobs))
		for _, j := range jobs {
			next, check, opened, missed, err := s.watchOne(ctx, tx, set, j, now, minTol)
			if err != nil {
				return err
			}
			if missed {
				res.Missed++
			}
			res.Opened += opened
			ids = append(ids, j.id)
			nexts = append(nexts, next)
			checks = append(checks, check)
		}
		if len(ids) == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `
			UPDATE jobs SET next_slot = u.next, check_time = u.chk
			FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS u(id, next, chk)
			WHERE jobs.id = u.id`, ids, nexts, checks)
		return err
	})
	return res, err
}

// watchOne decides one due job: its new next slot and check time (nil when
// the schedule has no slot left), and the incidents it opened.
func (s *Store) watchOne(ctx context.Context, tx pgx.Tx, set *rules.Set, j watched, now time.Time, minTol time.Duration) (next, check *time.Time, opened int, missed bool, err error) {
	advance := func(after time.Time) (*time.Time, *time.Time) {
		t, ok := j.sched.Next(after)
		if !ok {
			return nil, nil
		}
		return &t, &t
	}
	if (runLimit{maxRuns: j.maxRuns, runsSeen: j.runsSeen}).completed() {
		// The job has run its max_runs: the trigger fires no more slots
		// of it, and none is missing. A raised limit sets it watched again.
		return nil, nil, 0, false, nil
	}
	if j.seen != nil && !j.seen.Before(j.next) {
		// The slot (or a later one) fired: wait for the slot after the
		// latest seen.
		next, check = advance(*j.seen)
		return next, check, 0, false, nil
	}
	var waiting time.Duration // the shortest tolerance not passed yet
	for _, r := range set.Matching(j.namespace, j.id, j.labels) {
		if r.Kind != rules.MissedSchedule {
			continue
		}
		if now.Before(j.next.Add(r.Tolerance)) {
			if waiting == 0 || r.Tolerance < waiting {
				waiting = r.Tolerance
			}
			continue
		}
		missed = true
		slot := j.next
		ruleID, err := uuid.Parse(r.ID)
		if err != nil {
			return nil, nil, 0, false, err
		}
		cut, err := manualCut(ctx, tx, ruleID, j.id)
		if err != nil {
			return nil, nil, 0, false, err
		}
		if rules.Dismissed(slot, cut) {
			continue // part of what a person resolved by hand
		}
		summary := fmt.Sprintf("no execution for the slot at %s within %s: the trigger tier may be down or stuck",
			slot.UTC().Format(time.RFC3339), r.Tolerance)
		ok, err := s.open(ctx, tx, r, j.namespace, j.id, j.name, &slot, summary, now)
		if err != nil {
			return nil, nil, 0, false, err
		}
		if ok {
			opened++
		}
	}
	if waiting > 0 {
		// Look again when the next rule's tolerance passes (the query
		// subtracts the smallest tolerance from now).
		t := j.next.Add(waiting - minTol)
		return &j.next, &t, opened, missed, nil
	}
	// Every slot up to now-minTol is as unseen as this one; skip past them
	// (their incident, if any, is open already).
	after := j.next
	if cut := now.Add(-minTol); cut.After(after) {
		after = cut
	}
	next, check = advance(after)
	return next, check, opened, missed, nil
}

// NoSuccess opens a no-success incident for each job a NoSuccess rule
// watches that has had no success within the rule's window (counted from
// the latest of its last success, its creation, the rule's creation and
// the last manual resolution of an incident of the rule and job), up to
// limit per rule.
//
// The manual resolution's part stays in the query, not in rules.Decide:
// the sweep is not a decision on a batch of events but a search of every
// job the rule watches, and the window's start (greatest of the four
// times) is what lets PostgreSQL return only the jobs past their window,
// LIMIT bounded, instead of every watched job to be judged in Go each
// sweep. Its incidents have no slot, so rules.Dismissed has nothing to
// judge there.
func (s *Store) NoSuccess(ctx context.Context, set *rules.Set, now time.Time, limit int) (int, error) {
	opened := 0
	for _, r := range set.All() {
		if r.Kind != rules.NoSuccess || r.Disabled {
			continue
		}
		ruleID, err := uuid.Parse(r.ID)
		if err != nil {
			continue
		}
		selector := r.Labels
		if selector == nil {
			// A rule without a label selector watches every job: JSON null
			// would be contained in no job's labels.
			selector = map[string]string{}
		}
		labels, err := json.Marshal(selector)
		if err != nil {
			return opened, err
		}
		ids := []string{} // not nil: pgx sends a nil slice as NULL, and cardinality(NULL) matches nothing
		for id := range r.JobIDs {
			ids = append(ids, id)
		}
		cut := now.Add(-r.Within)
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `
				SELECT j.id, j.display_name FROM jobs j
				WHERE j.namespace = $1 AND NOT j.deleted AND NOT j.paused AND j.version > 0
				  AND j.labels @> $2 AND (cardinality($3::text[]) = 0 OR j.id = ANY($3))
				  AND greatest(j.last_success_time, j.create_time, $4,
				      (SELECT max(m.resolve_time) FROM incidents m WHERE m.rule_id = $6 AND m.job_id = j.id AND m.resolved_by <> '')) < $5
				  AND NOT EXISTS (SELECT 1 FROM incidents i WHERE i.rule_id = $6 AND i.job_id = j.id AND i.state <> 3)
				LIMIT $7`, r.Namespace, labels, ids, r.CreateTime, cut, ruleID, limit)
			if err != nil {
				return err
			}
			type job struct{ id, name string }
			list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (job, error) {
				var j job
				return j, row.Scan(&j.id, &j.name)
			})
			if err != nil {
				return err
			}
			for _, j := range list {
				ok, err := s.open(ctx, tx, r, r.Namespace, j.id, j.name, nil,
					fmt.Sprintf("no successful execution for %s", r.Within), now)
				if err != nil {
					return err
				}
				if ok {
					opened++
				}
			}
			return nil
		})
		if err != nil {
			return opened, err
		}
	}
	return opened, nil
}

// Prune deletes, up to limit rows of each, what no longer matters and is
// older than before: recorded events that only guard against redelivery
// (missed and late slots), failures no longer counted (at or before the
// job's latest success), the records of counted runs of limited jobs (a
// week older than before; counted in events), and sent notifications. Failures after a job's
// latest success are kept however old: they are the running count of a
// rule that may not have reached its threshold yet (a daily job failing
// for ten days).
func (s *Store) Prune(ctx context.Context, before time.Time, limit int) (events, notifications int64, err error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM execution_events WHERE ctid IN (
		    SELECT e.ctid FROM execution_events e LEFT JOIN jobs j ON j.id = e.job_id
		    WHERE e.seen_time < $1 AND (NOT (e.failed OR e.skipped) OR e.nominal_time <= j.last_success_nominal)
		    LIMIT $2)`, before, limit)
	if err != nil {
		return 0, 0, fmt.Errorf("prune events: %w", err)
	}
	events = tag.RowsAffected()
	// A run's record guards its count against the later events of the
	// same execution, which come at most as late as the last retry of
	// the longest retry policy (ten retries a day apart): a week more
	// than the events' retention covers it.
	tag, err = s.pool.Exec(ctx, `
		DELETE FROM limited_runs WHERE ctid IN (
		    SELECT ctid FROM limited_runs WHERE nominal_time < $1::timestamptz - interval '7 days' LIMIT $2)`, before, limit)
	if err != nil {
		return events, 0, fmt.Errorf("prune runs: %w", err)
	}
	events += tag.RowsAffected()
	tag, err = s.pool.Exec(ctx, `
		DELETE FROM notifications WHERE id IN (
		    SELECT id FROM notifications WHERE sent_time < $1 LIMIT $2)`, before, limit)
	if err != nil {
		return events, 0, fmt.Errorf("prune notifications: %w", err)
	}
	return events, tag.RowsAffected(), nil
}
