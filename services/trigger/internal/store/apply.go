package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/trace"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/dispatchreq"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/postgres"
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

// maxApplyAttempts bounds the retries of a batch that lost a race: an
// insert found the row another consumer created concurrently (the next
// attempt reads that row), or PostgreSQL broke a deadlock with another
// transaction that locks job rows in another order by aborting this one.
const maxApplyAttempts = 3

// storedJob is what the apply reads of a job row before changing it, and
// the state it holds after each applied event of a batch.
type storedJob struct {
	version     int64
	deleted     bool
	paused      bool
	nextFire    *time.Time
	lastNominal *time.Time
	maxRuns     int64
	runsFired   int64
	// recountSince, set when an event of the batch gave the job its limit,
	// is that event's occur time: runsFired is then the ledger's count of
	// runs after it, read once the batch's events are applied.
	recountSince *time.Time
}

// completed: the job reached its limit and fires no more.
func (st *storedJob) completed() bool {
	return st.maxRuns > 0 && st.runsFired >= st.maxRuns
}

// Event is one job event of a batch given to ApplyBatch.
type Event struct {
	// Event is the registry's job event.
	Event *eventsv1.JobEvent
	// Trace is the span the event's effects continue: the DispatchRequest
	// of a run request's manual slot carries it in its headers. When it is
	// not valid, the span of ApplyBatch's ctx is used.
	Trace trace.SpanContext
}

// Result is what ApplyBatch did with one event.
type Result struct {
	// Applied is the outcome; 0 when Err is set.
	Applied Applied
	// Err, when set, wraps ErrInvalidEvent: the event can never be applied
	// and changed nothing. The batch's other events are applied.
	Err error
}

// Apply projects one registry job event into the store: ApplyBatch of one
// event, whose trace is the span of ctx. An event that can never be
// applied returns an error wrapping ErrInvalidEvent; any other error is
// the database's and worth a retry.
func (s *Store) Apply(ctx context.Context, ev *eventsv1.JobEvent, now time.Time) (Applied, error) {
	res, err := s.ApplyBatch(ctx, []Event{{Event: ev}}, now)
	if err != nil {
		return 0, err
	}
	return res[0].Applied, res[0].Err
}

// ApplyBatch projects registry job events into the store in one
// transaction, idempotently: an event is applied only if its version is
// newer than the job's stored version, so a redelivered or overtaken event
// changes nothing (Stale). The events of one job within the batch are
// applied in version order, whatever their order in events, each against
// the state the one before left (the highest version wins; an equal
// version after the first is Stale), and only the job's final state is
// written. Several consumers may apply batches concurrently: the batch
// locks the rows it reads, in job id order, and the version decides. now
// is the consumer's clock: the rows' update time, and the fire time of a
// run request's slot.
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
// Limited runs (Job.max_runs): the row keeps the limit and runs_fired, the
// scheduled and catch-up runs fired since the job got its limit. An event
// that gives an unlimited job a limit starts the count with the runs the
// ledger holds after the event's occur time (slots fired under the older
// version while the event was on its way; none for a new job); one that
// changes a limit keeps the count; one without a limit clears it. A job
// whose count has reached its limit has no next slot (completed), so a
// limit lowered to the runs fired completes it, and a limit raised above
// them resumes it from its next slot after the update, as the rules above
// give for a job with no next slot.
//
// Limited runs (Job.max_runs): the row keeps the limit and runs_fired, the
// scheduled and catch-up runs fired since the job got its limit. An event
// that gives an unlimited job a limit starts the count with the runs the
// ledger holds after the event's occur time (slots fired under the older
// version while the event was on its way; none for a new job); one that
// changes a limit keeps the count; one without a limit clears it. A job
// whose count has reached its limit has no next slot (completed), so a
// limit lowered to the runs fired completes it, and a limit raised above
// them resumes it from its next slot after the update, as the rules above
// give for a job with no next slot.
//
// RUN_REQUESTED does not touch the job row: after the batch's job changes,
// in the same transaction, it records the manual slot at the request's
// nominal time (ON CONFLICT DO NOTHING) and writes its DispatchRequest,
// built from the event's job, so a run request overtaking the job's CREATED
// event still fires. A run request for a job that is deleted (in the store
// or by a DELETED event of the same batch) is dropped (DroppedRun); one
// already recorded, or requested twice in the batch, is DuplicateRun.
//
// The result has one entry per event, in the order of events. An event that
// can never be applied gets a Result whose Err wraps ErrInvalidEvent and
// leaves the others unharmed; an error return is the database's, nothing
// of the batch was written, and the whole batch is worth a retry.
func (s *Store) ApplyBatch(ctx context.Context, events []Event, now time.Time) ([]Result, error) {
	now = micros(now)
	results := make([]Result, len(events))
	b := &batch{events: events, results: results, ids: make([]uuid.UUID, len(events))}
	for i, e := range events {
		id, err := validateEvent(e.Event)
		if err != nil {
			results[i].Err = err
			continue
		}
		b.ids[i] = id
		b.valid = append(b.valid, i)
	}
	if len(b.valid) == 0 {
		return results, nil
	}
	for attempt := 1; ; attempt++ {
		var fired bool
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			fired, err = s.applyBatch(ctx, tx, b, now)
			return err
		})
		if err == nil {
			if fired {
				s.notify()
			}
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

// pgUUID is id as pgx encodes it without a detour through its text form
// (uuid.UUID is a driver.Valuer that returns a string).
func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgUUID(id)
	}
	return out
}

// errLostRace rolls a batch back: an insert found a row that did not exist
// when the batch read the rows.
var errLostRace = errors.New("a job row was created concurrently")

// batch is ApplyBatch's input and output across attempts.
type batch struct {
	events  []Event
	results []Result
	ids     []uuid.UUID // the job id of each valid event
	valid   []int       // indexes of the events that passed validation
}

// jobRows are job rows to write, as column arrays.
type jobRows struct {
	ids        []pgtype.UUID
	namespaces []string
	partitions []int32
	versions   []int64
	deleted    []bool
	paused     []bool
	specs      [][]byte
	next       []pgtype.Timestamptz
	maxRuns    []int64
	runsFired  []int64
}

func (r *jobRows) add(id uuid.UUID, w *jobWrite) {
	r.ids = append(r.ids, pgUUID(id))
	r.namespaces = append(r.namespaces, w.namespace)
	r.partitions = append(r.partitions, int32(w.partition))
	r.versions = append(r.versions, w.state.version)
	r.deleted = append(r.deleted, w.state.deleted)
	r.paused = append(r.paused, w.state.paused)
	r.specs = append(r.specs, w.spec)
	var next pgtype.Timestamptz
	if w.state.nextFire != nil {
		next = pgtype.Timestamptz{Time: *w.state.nextFire, Valid: true}
	}
	r.next = append(r.next, next)
	r.maxRuns = append(r.maxRuns, w.state.maxRuns)
	r.runsFired = append(r.runsFired, w.state.runsFired)
}

// jobWrite is the row one applied event leaves.
type jobWrite struct {
	state     storedJob
	namespace string
	partition int
	spec      []byte
}

// applyBatch is one attempt of ApplyBatch in tx; it fills b.results and
// says whether a manual slot was fired.
func (s *Store) applyBatch(ctx context.Context, tx pgx.Tx, b *batch, now time.Time) (bool, error) {
	byJob := map[uuid.UUID][]int{}
	var runs []int
	for _, i := range b.valid {
		b.results[i] = Result{}
		if b.events[i].Event.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED {
			runs = append(runs, i)
		}
		byJob[b.ids[i]] = append(byJob[b.ids[i]], i)
	}
	ids := slices.SortedFunc(maps.Keys(byJob), func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	state, err := s.lockJobs(ctx, tx, ids)
	if err != nil {
		return false, err
	}

	// Each job's changes in version order, against the state the previous
	// one left; only the last applied is written.
	type write struct {
		id    uuid.UUID
		w     *jobWrite
		found bool
	}
	var writes []write
	for _, id := range ids {
		evs := slices.DeleteFunc(slices.Clone(byJob[id]), func(i int) bool {
			return b.events[i].Event.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED
		})
		slices.SortStableFunc(evs, func(i, j int) int { return cmp.Compare(b.events[i].Event.Version, b.events[j].Event.Version) })
		_, found := state[id]
		var last *jobWrite
		for _, i := range evs {
			ev := b.events[i].Event
			if cur := state[id]; cur != nil && cur.version >= ev.Version {
				b.results[i].Applied = Stale
				continue
			}
			w, err := s.change(ev, id, state[id])
			if err != nil {
				b.results[i].Err = err
				continue
			}
			b.results[i].Applied = Upserted
			state[id], last = &w.state, w
		}
		if last != nil {
			writes = append(writes, write{id: id, w: last, found: found})
		}
	}
	var recount []*jobWrite
	var recountIDs []uuid.UUID
	for _, wr := range writes {
		if wr.w.state.recountSince != nil {
			recount = append(recount, wr.w)
			recountIDs = append(recountIDs, wr.id)
		}
	}
	if err := recountRuns(ctx, tx, recountIDs, recount); err != nil {
		return false, err
	}
	var updates, inserts jobRows
	for _, wr := range writes {
		if wr.w.state.completed() {
			wr.w.state.nextFire = nil
		}
		if wr.found {
			updates.add(wr.id, wr.w)
		} else {
			inserts.add(wr.id, wr.w)
		}
	}
	if err := s.writeJobs(ctx, tx, &updates, &inserts, now); err != nil {
		return false, err
	}
	return s.fireRuns(ctx, tx, b, runs, state, now)
}

// lockJobs reads and locks the rows of ids (sorted, so that concurrent
// batches lock in one order and cannot deadlock each other). A job without
// a row is absent from the map.
func (s *Store) lockJobs(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (map[uuid.UUID]*storedJob, error) {
	rows, err := tx.Query(ctx, `
		SELECT job_id, version, deleted, paused, next_fire_at, last_nominal, max_runs, runs_fired FROM jobs
		WHERE job_id = ANY($1::uuid[]) ORDER BY job_id FOR UPDATE`, pgUUIDs(ids))
	if err != nil {
		return nil, fmt.Errorf("read %d jobs: %w", len(ids), err)
	}
	state := make(map[uuid.UUID]*storedJob, len(ids))
	var (
		id pgtype.UUID
		st storedJob
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &st.version, &st.deleted, &st.paused, &st.nextFire, &st.lastNominal, &st.maxRuns, &st.runsFired}, func() error {
		row := st
		state[uuid.UUID(id.Bytes)] = &row
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %d jobs: %w", len(ids), err)
	}
	return state, nil
}

// change is the row ev leaves on a job whose current state is cur (nil: no
// row). Its error wraps ErrInvalidEvent.
func (s *Store) change(ev *eventsv1.JobEvent, id uuid.UUID, cur *storedJob) (*jobWrite, error) {
	job := ev.Job
	w := &jobWrite{
		namespace: job.Namespace,
		partition: ring.Partition(id.String(), s.partitions),
		spec:      []byte{}, // a tombstone keeps no definition, and no secret
		state: storedJob{
			version: ev.Version,
			deleted: ev.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED,
			paused:  job.Paused || ev.Kind == eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED,
		},
	}
	if cur != nil {
		w.state.lastNominal = cur.lastNominal
		w.state.maxRuns, w.state.runsFired, w.state.recountSince = cur.maxRuns, cur.runsFired, cur.recountSince
	}
	if w.state.deleted {
		return w, nil
	}
	limit(&w.state, ev, cur)
	spec, err := encodeSpec(job)
	if err != nil {
		// Deterministic: a retry would fail the same way.
		return nil, fmt.Errorf("%w: event %s: %v", ErrInvalidEvent, ev.GetEventId(), err)
	}
	w.spec = spec
	if !w.state.paused {
		if w.state.nextFire, err = s.nextFire(ev, cur); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// limit sets the run limit of st, the state ev leaves on a job whose state
// was cur (nil: no row), and its count: kept while the job keeps a limit,
// cleared without one, and started when ev gives the job its limit (for a
// job that had a row, from the runs the ledger holds after ev's occur
// time: see recountRuns).
func limit(st *storedJob, ev *eventsv1.JobEvent, cur *storedJob) {
	st.maxRuns = ev.GetJob().GetMaxRuns()
	switch {
	case st.maxRuns <= 0:
		st.maxRuns, st.runsFired, st.recountSince = 0, 0, nil
	case cur == nil || cur.deleted:
		// The trigger has fired nothing of the job yet.
		st.runsFired, st.recountSince = 0, nil
	case cur.maxRuns <= 0:
		since := micros(ev.GetOccurTime().AsTime())
		st.runsFired, st.recountSince = 0, &since
	}
}

// recountRuns sets the count of each write in ws (of the job ids, in the
// same order) to the scheduled and catch-up slots in the ledger after its
// recountSince: the runs fired since the event that gave the job its
// limit, some of them committed under the job's older version before the
// projection applied the event. Usually none; one query for the batch.
func recountRuns(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, ws []*jobWrite) error {
	if len(ws) == 0 {
		return nil
	}
	since := make([]time.Time, len(ws))
	for i, w := range ws {
		since[i] = *w.state.recountSince
	}
	rows, err := tx.Query(ctx, `
		SELECT u.i, (SELECT count(*) FROM ledger l
			WHERE l.job_id = u.id AND l.nominal_time > u.since AND l.kind = ANY($3::smallint[]))
		FROM unnest($1::uuid[], $2::timestamptz[]) WITH ORDINALITY AS u(id, since, i)`,
		pgUUIDs(ids), since, []int16{int16(firing.KindScheduled), int16(firing.KindCatchUp)})
	if err != nil {
		return fmt.Errorf("count the runs of %d jobs: %w", len(ws), err)
	}
	var (
		i int64
		n int64
	)
	_, err = pgx.ForEachRow(rows, []any{&i, &n}, func() error {
		ws[i-1].state.runsFired = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("count the runs of %d jobs: %w", len(ws), err)
	}
	for _, w := range ws {
		w.state.recountSince = nil
	}
	return nil
}

// writeJobs writes the batch's job rows: updates of the rows it locked,
// inserts of new ones, and notifies their partitions (notifyChanges). An insert that finds a row (another consumer
// created it since the batch read) returns errLostRace, so the batch is
// rolled back and read again.
func (s *Store) writeJobs(ctx context.Context, tx pgx.Tx, updates, inserts *jobRows, now time.Time) error {
	if len(updates.ids) > 0 {
		// The rows are locked and older: the updates cannot miss.
		if _, err := tx.Exec(ctx, `
			UPDATE jobs SET namespace = u.namespace, partition = u.partition, version = u.version,
				deleted = u.deleted, paused = u.paused, spec = u.spec, next_fire_at = u.next, update_time = $9,
				max_runs = u.max_runs, runs_fired = u.runs_fired
			FROM unnest($1::uuid[], $2::text[], $3::int[], $4::bigint[], $5::bool[], $6::bool[], $7::bytea[], $8::timestamptz[],
					$10::bigint[], $11::bigint[])
				AS u(job_id, namespace, partition, version, deleted, paused, spec, next, max_runs, runs_fired)
			WHERE jobs.job_id = u.job_id AND jobs.version < u.version`,
			updates.ids, updates.namespaces, updates.partitions, updates.versions, updates.deleted, updates.paused,
			updates.specs, updates.next, now, updates.maxRuns, updates.runsFired); err != nil {
			return fmt.Errorf("update %d jobs: %w", len(updates.ids), err)
		}
	}
	if len(inserts.ids) > 0 {
		// In job id order (the arrays are), so that concurrent batches
		// inserting the same new jobs wait for each other in one order.
		tag, err := tx.Exec(ctx, `
			INSERT INTO jobs (job_id, namespace, partition, version, deleted, paused, spec, next_fire_at, update_time,
				max_runs, runs_fired)
			SELECT u.job_id, u.namespace, u.partition, u.version, u.deleted, u.paused, u.spec, u.next, $9::timestamptz,
				u.max_runs, u.runs_fired
			FROM unnest($1::uuid[], $2::text[], $3::int[], $4::bigint[], $5::bool[], $6::bool[], $7::bytea[], $8::timestamptz[],
					$10::bigint[], $11::bigint[])
				AS u(job_id, namespace, partition, version, deleted, paused, spec, next, max_runs, runs_fired)
			ON CONFLICT (job_id) DO NOTHING`,
			inserts.ids, inserts.namespaces, inserts.partitions, inserts.versions, inserts.deleted, inserts.paused,
			inserts.specs, inserts.next, now, inserts.maxRuns, inserts.runsFired)
		if err != nil {
			return fmt.Errorf("insert %d jobs: %w", len(inserts.ids), err)
		}
		if int(tag.RowsAffected()) < len(inserts.ids) {
			return errLostRace
		}
	}
	// The engines hold the due jobs in memory and read most partitions
	// only for their new slots: tell them to read these whole again.
	return notifyChanges(ctx, tx, updates.partitions, inserts.partitions)
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

// fireRuns records the manual slots of the batch's run requests (runs,
// indexes into b.events, in arrival order) and writes their
// DispatchRequests. state is the jobs' state after the batch's changes. It
// says whether any slot was fired.
func (s *Store) fireRuns(ctx context.Context, tx pgx.Tx, b *batch, runs []int, state map[uuid.UUID]*storedJob, now time.Time) (bool, error) {
	type slot struct {
		id      uuid.UUID
		nominal int64 // Unix microseconds
	}
	var (
		ids      []uuid.UUID
		nominals []time.Time
		execIDs  []string
		first    = map[slot]int{} // the event that requested each slot
	)
	for _, i := range runs {
		id := b.ids[i]
		if st := state[id]; st != nil && st.deleted {
			// A tombstone always has a higher version than any run request
			// of the job: requests are refused after the delete.
			b.results[i].Applied = DroppedRun
			continue
		}
		nominal := micros(b.events[i].Event.GetRunRequest().GetNominalTime().AsTime())
		key := slot{id, nominal.UnixMicro()}
		if _, dup := first[key]; dup {
			b.results[i].Applied = DuplicateRun
			continue
		}
		first[key] = i
		ids = append(ids, id)
		nominals = append(nominals, nominal)
		execIDs = append(execIDs, executionID(id.String(), nominal))
	}
	if len(ids) == 0 {
		return false, nil
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO ledger (job_id, nominal_time, kind, execution_id, record_time, epoch)
		SELECT id, nominal, $4, exec, $5, 0
		FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[]) AS u(id, nominal, exec)
		ON CONFLICT DO NOTHING
		RETURNING job_id, nominal_time`, pgUUIDs(ids), nominals, execIDs, int16(firing.KindManual), now)
	if err != nil {
		return false, fmt.Errorf("record %d manual slots: %w", len(ids), err)
	}
	recorded := map[slot]bool{}
	var (
		id      pgtype.UUID
		nominal time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &nominal}, func() error {
		recorded[slot{uuid.UUID(id.Bytes), nominal.UnixMicro()}] = true
		return nil
	}); err != nil {
		return false, fmt.Errorf("record %d manual slots: %w", len(ids), err)
	}
	var msgs []outbox.Message
	for _, i := range runs {
		if b.results[i].Applied != 0 {
			continue
		}
		e := b.events[i]
		nominal := micros(e.Event.GetRunRequest().GetNominalTime().AsTime())
		if !recorded[slot{b.ids[i], nominal.UnixMicro()}] {
			b.results[i].Applied = DuplicateRun
			continue
		}
		tctx := ctx
		if e.Trace.IsValid() {
			tctx = trace.ContextWithSpanContext(ctx, e.Trace)
		}
		msg, err := s.dispatchMessage(e.Event.Job, dispatchreq.Slot{
			JobID: b.ids[i].String(), Version: e.Event.Version, Nominal: nominal, Fire: now, Kind: TriggerKind(firing.KindManual),
			// The history shows which execution a run re-runs and what of
			// the job it overrode.
			RerunOf: e.Event.GetRerunOfExecutionId(), Overridden: e.Event.GetRunOverrides(),
		}, s.traceHeaders(tctx))
		if err != nil {
			return false, err
		}
		msgs = append(msgs, msg)
		b.results[i].Applied = Fired
	}
	if len(msgs) == 0 {
		return false, nil
	}
	if err := s.writeOutbox(ctx, tx, msgs...); err != nil {
		return false, err
	}
	return true, nil
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
