package store

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/dispatchreq"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/ring"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
)

// MissedRoutingKey is the routing key of execution.missed events on the
// executions exchange.
const MissedRoutingKey = "execution.missed"

// maxEventsPerMessage caps the events of one ExecutionEventBatch, so a job
// recording a long outage's missed slots does not make one huge message.
const maxEventsPerMessage = 500

var _ firing.Store = (*Store)(nil)

// DueJobs returns the live jobs of the loads' partitions whose next slot is
// at or before `before` and, for a load with After set, after After; oldest
// first (ties by job id), at most limit (limit <= 0 or no loads: none).
// Paused and deleted jobs have no next slot and are never returned. Each
// partition is read by its own range scan of the due index, bounded by
// limit, so the cost does not grow with the jobs that are not due, nor,
// with After, with those the engine holds already.
func (s *Store) DueJobs(ctx context.Context, loads []firing.PartitionLoad, before time.Time, limit int) ([]firing.Due, error) {
	if len(loads) == 0 || limit <= 0 {
		return nil, nil
	}
	parts := make([]int32, len(loads))
	after := make([]pgtype.Timestamptz, len(loads))
	for i, l := range loads {
		parts[i] = int32(l.Partition)
		after[i] = pgtype.Timestamptz{Time: l.After, Valid: !l.After.IsZero()}
	}
	rows, err := s.pool.Query(ctx, `
		SELECT d.job_id::text, d.namespace, d.partition, d.version, d.next_fire_at, d.runs_fired, d.spec
		FROM unnest($1::int[], $4::timestamptz[]) AS p(partition, after)
		CROSS JOIN LATERAL (
			SELECT job_id, namespace, partition, version, next_fire_at, runs_fired, spec FROM jobs
			WHERE jobs.partition = p.partition AND next_fire_at IS NOT NULL
				AND next_fire_at > coalesce(p.after, '-infinity') AND next_fire_at <= $2
			ORDER BY next_fire_at LIMIT $3
		) AS d
		ORDER BY d.next_fire_at, d.job_id LIMIT $3`, parts, before, limit, after)
	if err != nil {
		return nil, fmt.Errorf("load due jobs: %w", err)
	}
	type dueRow struct {
		firing.Due
		namespace string
		spec      []byte
	}
	loaded, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dueRow, error) {
		var d dueRow
		err := r.Scan(&d.JobID, &d.namespace, &d.Partition, &d.Version, &d.NextFire, &d.RunsFired, &d.spec)
		d.NextFire = d.NextFire.UTC()
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("load due jobs: %w", err)
	}
	due := make([]firing.Due, len(loaded))
	s.decoded.mu.Lock()
	defer s.decoded.mu.Unlock()
	for i, d := range loaded {
		job, err := s.decoded.get(d.JobID, d.namespace, d.Version, d.spec)
		if err != nil {
			return nil, fmt.Errorf("load due jobs: %w", err)
		}
		d.Job = job
		due[i] = d.Due
	}
	s.decoded.loads++
	if s.decoded.loads >= decodedGeneration {
		s.decoded.old, s.decoded.cur, s.decoded.loads = s.decoded.cur, nil, 0
	}
	return due, nil
}

// decodedGeneration is how many DueJobs calls a generation of decodedJobs
// lasts: a job returned by one is kept for the next 8 to 16.
const decodedGeneration = 8

// decodedJobs keeps the jobs recent DueJobs calls decoded, by job id.
// Decoding a stored spec cost about 6 % of a node's CPU when every load
// read every job due within the lookahead; the engine now reads most jobs
// once per slot, but a partition whose jobs changed is read whole again,
// every second while changes keep coming, and its unchanged jobs are
// decoded again only when they left the cache. A job is decoded again when
// its version, namespace or spec bytes differ from the kept ones, so the
// cache never answers with stale data. Two generations bound the memory to
// the jobs the last 16 loads returned. The decoded jobs are shared between
// loads, so they must not be modified (nothing does: the engine and Commit
// only read them).
type decodedJobs struct {
	mu       sync.Mutex
	cur, old map[string]decodedJob
	loads    int
}

// get returns the decoded job of a row, decoding it unless the cache holds
// the same row.
func (c *decodedJobs) get(id, namespace string, version int64, spec []byte) (*registryv1.Job, error) {
	cached, ok := c.cur[id]
	if !ok {
		cached, ok = c.old[id]
	}
	if !ok || cached.version != version || cached.namespace != namespace || !bytes.Equal(cached.spec, spec) {
		job, err := decodeSpec(spec, id, namespace, version, false)
		if err != nil {
			return nil, err
		}
		cached = decodedJob{version: version, namespace: namespace, spec: spec, job: job}
	}
	if c.cur == nil {
		c.cur = make(map[string]decodedJob)
	}
	c.cur[id] = cached
	return cached.job, nil
}

type decodedJob struct {
	version   int64
	namespace string
	spec      []byte
	job       *registryv1.Job
}

// Commit applies a batch of advances in one transaction, as firing.Store
// documents, in four statements whatever the batch size:
//
//  1. Fencing: the partition rows of the fences are share-locked where
//     their stored epoch is the fence's. Partitions without such a row
//     (a newer epoch stored, no row, or no fence given for an advance's
//     partition) are Fenced: nothing of theirs is written. The share lock
//     lets this node's concurrent commits check the same partitions at
//     once, while a new owner's claim (below), which takes the rows for
//     update, waits for every commit that checked the old epoch to end:
//     a commit never lands after the claim that fenced it.
//     Before the transaction, a fence whose epoch this store has not yet
//     claimed is claimed in a short transaction of its own: the stored
//     epoch is raised to the fence's if it is not newer (rows locked in
//     partition order, so two nodes claiming during a handover queue
//     instead of deadlocking).
//  2. Compare-and-set of each remaining job's next fire time from
//     Due.NextFire to To (zero To: NULL, the job is done) if the row still
//     holds Due.Version and Due.RunsFired, is not deleted and is of
//     Due.Partition (so no job commits under another partition's fence);
//     last_nominal becomes the newest slot of the advance, and runs_fired
//     grows by the advance's Runs (its count against max_runs, in this same
//     fenced statement: a new owner reads it exact). Jobs that fail are
//     Stale and write nothing more.
//     An advance for a job already advanced earlier in the batch is Stale.
//  3. The advanced jobs' slots into the ledger, ON CONFLICT DO NOTHING,
//     stamped with fireTime and the partition's epoch; slots already there
//     are counted in Duplicates and not published again.
//  4. One outbox message per new ledger row: a DispatchRequest (attempt 1,
//     execution id from (job, nominal), routed by priority, due at the
//     slot's firing time, Due.FiringTime) for a fired slot; for missed
//     slots, one ExecutionEventBatch per job (up to 500 MISSED events
//     each; many events in one message is the budget rule of the design)
//     routed "execution.missed". Headers carry ctx's trace context (the
//     engine's firing span). The messages are written grouped
//     (outbox.WriteGrouped, ADR 0019; Options.OneRowPerMessage turns it
//     off): one outbox row per partition and routing key, up to 64
//     messages a row, so a commit of a thousand slots inserts (and the
//     relay later deletes) about a row per partition of this node rather
//     than a thousand; each message is still published as its own, in
//     order per job.
//
// On any error nothing is committed and the error is returned; the result
// is then empty. Notify is called after a commit that wrote messages.
func (s *Store) Commit(ctx context.Context, fences []firing.Fence, advances []firing.Advance, fireTime time.Time) (firing.CommitResult, error) {
	var res firing.CommitResult
	fireTime = micros(fireTime)
	epochs := map[int]int64{}
	for _, f := range fences {
		if e, ok := epochs[f.Partition]; !ok || f.Epoch > e {
			epochs[f.Partition] = f.Epoch
		}
	}
	if err := s.claimNew(ctx, epochs); err != nil {
		return firing.CommitResult{}, fmt.Errorf("commit %d advances: %w", len(advances), err)
	}
	wrote := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = firing.CommitResult{}
		claimed, err := s.check(ctx, tx, epochs)
		if err != nil {
			return err
		}
		fenced := map[int]bool{}
		for p := range epochs {
			if !claimed[p] {
				fenced[p] = true
			}
		}
		// The advances to try, in batch order, by canonical job id.
		type try struct {
			advance int
			id      string
		}
		var tries []try
		seen := map[string]bool{}
		var cas casColumns
		for i, a := range advances {
			if !claimed[a.Due.Partition] {
				fenced[a.Due.Partition] = true
				continue
			}
			id, err := uuid.Parse(a.Due.JobID)
			if err != nil || seen[id.String()] {
				res.Stale = append(res.Stale, a.Due.JobID)
				continue
			}
			seen[id.String()] = true
			tries = append(tries, try{advance: i, id: id.String()})
			cas.add(id, a)
		}
		res.Fenced = sortedKeys(fenced)
		if len(tries) == 0 {
			return nil
		}
		advanced, err := s.compareAndSet(ctx, tx, &cas, fireTime)
		if err != nil {
			return err
		}
		var ledger ledgerColumns
		slots := map[string]slotRef{} // by execution id
		for _, t := range tries {
			i, id := t.advance, t.id
			a := advances[i]
			if !advanced[id] {
				res.Stale = append(res.Stale, a.Due.JobID)
				continue
			}
			res.Advanced = append(res.Advanced, a.Due.JobID)
			for j, slot := range a.Slots {
				nominal := micros(slot.Nominal)
				execID := executionID(id, nominal)
				slots[execID] = slotRef{advance: i, slot: j}
				ledger.add(id, nominal, slot, execID, epochs[a.Due.Partition])
			}
		}
		inserted, err := insertLedger(ctx, tx, &ledger, fireTime)
		if err != nil {
			return err
		}
		res.Duplicates = len(ledger.ids) - len(inserted)
		msgs, err := s.commitMessages(ctx, advances, slots, inserted, fireTime)
		if err != nil {
			return err
		}
		wrote = len(msgs) > 0
		return s.writeOutbox(ctx, tx, msgs...)
	})
	if err != nil {
		return firing.CommitResult{}, fmt.Errorf("commit %d advances: %w", len(advances), err)
	}
	if wrote {
		s.notify()
	}
	return res, nil
}

// claimNew claims, in a transaction of its own, the fence epochs this
// store has not claimed yet, and remembers the ones it did. A partition
// whose stored epoch is newer stays unclaimed (check then fences it).
func (s *Store) claimNew(ctx context.Context, epochs map[int]int64) error {
	s.claimMu.Lock()
	var parts []int32
	var eps []int64
	for p, e := range epochs {
		if s.claimed[p] != e {
			parts = append(parts, int32(p))
			eps = append(eps, e)
		}
	}
	s.claimMu.Unlock()
	if len(parts) == 0 {
		return nil
	}
	// The MATERIALIZED CTE locks the rows in partition order before the
	// update; the update then re-checks the epoch on the newest version of
	// each row (READ COMMITTED re-evaluation of a concurrently updated row).
	rows, err := s.pool.Query(ctx, `
		WITH locked AS MATERIALIZED (
			SELECT partition FROM partitions WHERE partition = ANY($1::int[]) ORDER BY partition FOR UPDATE
		)
		UPDATE partitions SET epoch = u.e, owner = $3, update_time = now()
		FROM unnest($1::int[], $2::bigint[]) AS u(p, e)
		WHERE partitions.partition = u.p AND partitions.epoch <= u.e
			AND partitions.partition IN (SELECT partition FROM locked)
		RETURNING partitions.partition, partitions.epoch`, parts, eps, s.nodeID)
	if err != nil {
		return fmt.Errorf("claim partitions: %w", err)
	}
	type claim struct {
		Partition int32
		Epoch     int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[claim])
	if err != nil {
		return fmt.Errorf("claim partitions: %w", err)
	}
	s.claimMu.Lock()
	for _, c := range got {
		s.claimed[int(c.Partition)] = c.Epoch
	}
	s.claimMu.Unlock()
	return nil
}

// check share-locks the partition rows that hold exactly the fences'
// epochs and returns those partitions: the ones this transaction may write.
func (s *Store) check(ctx context.Context, tx pgx.Tx, epochs map[int]int64) (map[int]bool, error) {
	claimed := map[int]bool{}
	if len(epochs) == 0 {
		return claimed, nil
	}
	parts := make([]int32, 0, len(epochs))
	eps := make([]int64, 0, len(epochs))
	for p, e := range epochs {
		parts = append(parts, int32(p))
		eps = append(eps, e)
	}
	// Rows are locked in the sorted order (the lock is taken above the
	// sort), the same order as claims take them.
	rows, err := tx.Query(ctx, `
		SELECT p.partition FROM partitions AS p
		JOIN unnest($1::int[], $2::bigint[]) AS u(p, e) ON p.partition = u.p AND p.epoch = u.e
		ORDER BY p.partition
		FOR SHARE OF p`, parts, eps)
	if err != nil {
		return nil, fmt.Errorf("check partition epochs: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("check partition epochs: %w", err)
	}
	for _, p := range got {
		claimed[int(p)] = true
	}
	return claimed, nil
}

// casColumns are the compare-and-set arguments as column arrays.
type casColumns struct {
	ids      []uuid.UUID
	parts    []int32
	from     []time.Time
	versions []int64
	to, last []pgtype.Timestamptz
	// runs is the runs_fired the row must hold, and fired what the
	// advance adds to it.
	runs, fired []int64
}

func (c *casColumns) add(id uuid.UUID, a firing.Advance) {
	c.ids = append(c.ids, id)
	c.parts = append(c.parts, int32(a.Due.Partition))
	c.from = append(c.from, micros(a.Due.NextFire))
	c.versions = append(c.versions, a.Due.Version)
	c.to = append(c.to, nullTime(a.To))
	c.runs = append(c.runs, a.Due.RunsFired)
	c.fired = append(c.fired, a.Runs())
	var last time.Time
	for _, s := range a.Slots {
		if s.Nominal.After(last) {
			last = s.Nominal
		}
	}
	c.last = append(c.last, nullTime(last))
}

// compareAndSet advances the jobs whose row still holds (from, version) and
// returns their canonical ids.
//
// Each row is found by its primary key. The partition is compared as
// "partition + 0" so that it is not an index condition: with it, the
// generic plan of this prepared statement took jobs_due (partition,
// next_fire_at) instead, and in a burst every job of a partition shares
// that key, so each of a batch's 1,000 lookups walked all of them (in
// BenchmarkCommit, 1,000 jobs due at one time: 30-50 ms for the UPDATE
// against 10-20 ms by the primary key).
func (s *Store) compareAndSet(ctx context.Context, tx pgx.Tx, c *casColumns, fireTime time.Time) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `
		UPDATE jobs SET next_fire_at = u.next, last_nominal = GREATEST(jobs.last_nominal, u.last),
			runs_fired = jobs.runs_fired + u.fired, update_time = $7
		FROM unnest($1::uuid[], $2::int[], $3::timestamptz[], $4::bigint[], $5::timestamptz[], $6::timestamptz[],
				$8::bigint[], $9::bigint[])
			AS u(id, part, prev, version, next, last, runs, fired)
		WHERE jobs.job_id = u.id AND jobs.partition + 0 = u.part AND jobs.next_fire_at = u.prev
			AND jobs.version = u.version AND jobs.runs_fired = u.runs AND NOT jobs.deleted
		RETURNING jobs.job_id::text`, c.ids, c.parts, c.from, c.versions, c.to, c.last, fireTime, c.runs, c.fired)
	if err != nil {
		return nil, fmt.Errorf("advance jobs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("advance jobs: %w", err)
	}
	advanced := make(map[string]bool, len(ids))
	for _, id := range ids {
		advanced[id] = true
	}
	return advanced, nil
}

// ledgerColumns are ledger rows as column arrays.
type ledgerColumns struct {
	ids      []string
	nominals []time.Time
	kinds    []int16
	execIDs  []string
	epochs   []int64
	reasons  []string
}

func (c *ledgerColumns) add(jobID string, nominal time.Time, slot firing.Slot, execID string, epoch int64) {
	c.ids = append(c.ids, jobID)
	c.nominals = append(c.nominals, nominal)
	c.kinds = append(c.kinds, int16(slot.Kind))
	c.execIDs = append(c.execIDs, execID)
	c.epochs = append(c.epochs, epoch)
	c.reasons = append(c.reasons, slot.Reason)
}

// insertLedger inserts rows ON CONFLICT DO NOTHING and returns the execution
// ids of the rows it inserted.
func insertLedger(ctx context.Context, tx pgx.Tx, c *ledgerColumns, recordTime time.Time) (map[string]bool, error) {
	inserted := map[string]bool{}
	if len(c.ids) == 0 {
		return inserted, nil
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO ledger (job_id, nominal_time, kind, execution_id, record_time, epoch, reason)
		SELECT id, nominal, kind, exec, $7, epoch, reason
		FROM unnest($1::uuid[], $2::timestamptz[], $3::smallint[], $4::uuid[], $5::bigint[], $6::text[])
			AS u(id, nominal, kind, exec, epoch, reason)
		ON CONFLICT DO NOTHING
		RETURNING execution_id::text`, c.ids, c.nominals, c.kinds, c.execIDs, c.epochs, c.reasons, recordTime)
	if err != nil {
		return nil, fmt.Errorf("record slots: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("record slots: %w", err)
	}
	for _, id := range ids {
		inserted[id] = true
	}
	return inserted, nil
}

// slotRef locates a slot in Commit's advances.
type slotRef struct{ advance, slot int }

// commitMessages builds the outbox messages of the slots inserted, in
// advance and slot order, so one job's messages keep their order.
func (s *Store) commitMessages(ctx context.Context, advances []firing.Advance, slots map[string]slotRef, inserted map[string]bool, fireTime time.Time) ([]outbox.Message, error) {
	refs := make([]slotRef, 0, len(inserted))
	for execID := range inserted {
		ref, ok := slots[execID]
		if !ok {
			return nil, fmt.Errorf("ledger returned execution %s that the batch does not hold", execID)
		}
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b slotRef) int { return cmp.Or(cmp.Compare(a.advance, b.advance), cmp.Compare(a.slot, b.slot)) })
	headers := s.traceHeaders(ctx)
	traceID := ""
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		traceID = sc.TraceID().String()
	}
	batch := trace.LinkFromContext(ctx)
	msgs := make([]outbox.Message, 0, len(refs))
	var missed []*eventsv1.ExecutionEvent
	flushMissed := func(a firing.Advance) error {
		if len(missed) == 0 {
			return nil
		}
		msg, err := s.missedMessage(a.Due.JobID, missed, headers)
		missed = nil
		if err != nil {
			return err
		}
		msgs = append(msgs, msg)
		return nil
	}
	for i, ref := range refs {
		a := advances[ref.advance]
		slot := a.Slots[ref.slot]
		nominal := micros(slot.Nominal)
		jobID := canonicalID(a.Due.JobID)
		if slot.Kind == firing.KindMissed {
			missed = append(missed, missedEvent(a.Due.Job, jobID, nominal, fireTime, slot.Reason, traceID, headers))
			if len(missed) == maxEventsPerMessage {
				if err := flushMissed(a); err != nil {
					return nil, err
				}
			}
		} else {
			if err := flushMissed(a); err != nil { // keep slot order
				return nil, err
			}
			req := dispatchreq.Slot{
				JobID: jobID, Version: a.Due.Version, Nominal: nominal, Fire: fireTime, Kind: TriggerKind(slot.Kind),
				NextSlotFire: nextSlotFire(a, ref.slot),
			}
			firingTime := a.Due.FiringTime(slot.Nominal)
			if firingTime.After(fireTime) {
				// Fired ahead (the engine's Lead): the dispatcher holds
				// it until its time.
				req.NotBefore = firingTime
			}
			msg, err := s.dispatchMessage(a.Due.Job, req, s.executionHeaders(ctx, batch, jobID, nominal, headers))
			if err != nil {
				return nil, err
			}
			if slot.Kind == firing.KindScheduled || slot.Kind == firing.KindCatchUp {
				// The firing promise: the relay times the broker's
				// confirm from the slot's firing time (the unrounded
				// nominal, as the engine's fire lateness).
				msg.DueAt = firingTime
			}
			msgs = append(msgs, msg)
		}
		if i == len(refs)-1 || refs[i+1].advance != ref.advance {
			if err := flushMissed(a); err != nil {
				return nil, err
			}
		}
	}
	return msgs, nil
}

// dispatchMessage is the outbox message of a fired slot: attempt 1 of its
// execution, to the dispatch exchange with the routing key of the job's
// priority, ordered per job and deduplicated downstream by execution id,
// and published by the relay of the node that owns the job's partition.
// Its DueAt is left zero: Commit sets it for scheduled and catch-up slots,
// whose firing time is the promise the relay's
// outbox_due_to_confirm_seconds measures. Run-now and backfill slots keep
// none: a run-now's nominal time is when the registry took the request,
// so its lateness would time the event's way to the projection, and a
// backfill's slots were due long ago by design; neither says anything of
// the firing promise.
//
// The slot's ExecutionID is derived here from its job and nominal time.
func (s *Store) dispatchMessage(job *registryv1.Job, slot dispatchreq.Slot, headers map[string]string) (outbox.Message, error) {
	execID := executionID(slot.JobID, slot.Nominal)
	slot.ExecutionID = execID
	req := dispatchreq.New(job, slot)
	payload, err := proto.Marshal(req)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("encode dispatch request %s: %w", execID, err)
	}
	return outbox.Message{
		AggregateID: slot.JobID,
		RoutingKey:  broker.Route(s.dispatchEx, DispatchRoutingKey(job.GetPriority())),
		MessageID:   execID,
		Payload:     payload,
		Headers:     headers,
		Partition:   ring.Partition(slot.JobID, s.partitions),
	}, nil
}

// nextSlotFire is when the slot after a.Slots[i] fires: the advance's
// slots are consecutive slots of the schedule (missed ones included) and
// a.To is the one after the last, so the next slot is known without
// evaluating the schedule again. Zero when the schedule has no slot left.
func nextSlotFire(a firing.Advance, i int) time.Time {
	next := a.To
	if i+1 < len(a.Slots) {
		next = a.Slots[i+1].Nominal
	}
	if next.IsZero() {
		return time.Time{}
	}
	return a.Due.FiringTime(next)
}

// missedEvent is the MISSED lifecycle event of a slot recorded missed. A
// missed slot has no execution trace of its own: it carries the commit's
// (traceID, traceContext), so the history's and alerting's spans of the
// event join the trace whose id the history shows for it.
func missedEvent(job *registryv1.Job, jobID string, nominal, occur time.Time, reason, traceID string, traceContext map[string]string) *eventsv1.ExecutionEvent {
	return &eventsv1.ExecutionEvent{
		EventId:        uuid.Must(uuid.NewV7()).String(),
		Kind:           eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED,
		ExecutionId:    executionID(jobID, nominal),
		JobId:          jobID,
		Namespace:      job.GetNamespace(),
		NominalTime:    timestamppb.New(nominal),
		OccurTime:      timestamppb.New(occur),
		TriggerKind:    dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
		Reason:         reason,
		TraceId:        traceID,
		TraceContext:   maps.Clone(traceContext),
		JobDisplayName: job.GetDisplayName(),
		JobLabels:      job.GetLabels(),
	}
}

// missedMessage is one outbox message carrying events of one job.
func (s *Store) missedMessage(jobID string, events []*eventsv1.ExecutionEvent, headers map[string]string) (outbox.Message, error) {
	payload, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	if err != nil {
		return outbox.Message{}, fmt.Errorf("encode missed events of job %s: %w", jobID, err)
	}
	id := canonicalID(jobID)
	return outbox.Message{
		AggregateID: id,
		Partition:   ring.Partition(id, s.partitions),
		RoutingKey:  broker.Route(s.executionsEx, MissedRoutingKey),
		MessageID:   uuid.Must(uuid.NewV7()).String(),
		Payload:     payload,
		Headers:     headers,
	}, nil
}

// DispatchRoutingKey is the dispatch exchange's routing key for a priority
// (broker.DispatchRoutingKey): "dispatch.high", "dispatch.normal" or
// "dispatch.low"; unspecified and unknown priorities are normal.
func DispatchRoutingKey(p registryv1.Priority) string {
	switch p {
	case registryv1.Priority_PRIORITY_HIGH:
		return broker.DispatchRoutingKey("high")
	case registryv1.Priority_PRIORITY_LOW:
		return broker.DispatchRoutingKey("low")
	default:
		return broker.DispatchRoutingKey("normal")
	}
}

// TriggerKind maps a ledger slot kind to the trigger kind of its dispatch
// request; KindMissed (never dispatched) and unknown kinds map to
// TRIGGER_KIND_UNSPECIFIED.
func TriggerKind(k firing.SlotKind) dispatchv1.TriggerKind {
	switch k {
	case firing.KindScheduled:
		return dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED
	case firing.KindManual:
		return dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL
	case firing.KindBackfill:
		return dispatchv1.TriggerKind_TRIGGER_KIND_BACKFILL
	case firing.KindCatchUp:
		return dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP
	default:
		return dispatchv1.TriggerKind_TRIGGER_KIND_UNSPECIFIED
	}
}

// executionHeaders starts and ends the root span of one fired execution
// and returns its trace context as outbox headers; without a Tracer, the
// batch's headers. A root per execution rather than a child of the commit:
// a commit fires up to a thousand executions, and one trace of a thousand
// deliveries, retries and history writes would be unreadable; the link
// still leads from each execution to the commit that fired it.
func (s *Store) executionHeaders(ctx context.Context, batch trace.Link, jobID string, nominal time.Time, batchHeaders map[string]string) map[string]string {
	if s.tracer == nil {
		return batchHeaders
	}
	_, span := s.tracer.Start(ctx, "trigger.execution",
		trace.WithNewRoot(),
		trace.WithLinks(batch),
		// Internal, not producer: the relay's "publish" span (a child,
		// through the outbox row's headers) is the send to the broker.
		trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		// Only then: without trace export no span records, and the
		// execution id (a hash) and the formatted time would be made for
		// every slot for nothing.
		span.SetAttributes(
			attribute.String("cronmesh.execution_id", executionID(jobID, nominal)),
			attribute.String("cronmesh.job_id", jobID),
			attribute.String("cronmesh.nominal_time", nominal.Format(time.RFC3339Nano)),
		)
	}
	span.End()
	if !span.SpanContext().IsValid() {
		return batchHeaders
	}
	h := make(map[string]string, 2)
	s.propagator.Inject(trace.ContextWithSpan(context.Background(), span), propagation.MapCarrier(h))
	return h
}

// traceHeaders renders ctx's trace context as outbox headers.
func (s *Store) traceHeaders(ctx context.Context) map[string]string {
	h := map[string]string{}
	s.propagator.Inject(ctx, propagation.MapCarrier(h))
	return h
}

// executionID is the slot's execution id, from the canonical job id.
func executionID(jobID string, nominal time.Time) string {
	return execid.For(canonicalID(jobID), nominal)
}

// canonicalID is the lower-case hyphenated form of a UUID job id (as
// PostgreSQL renders it), or id itself when it is not a UUID.
func canonicalID(id string) string {
	if u, err := uuid.Parse(id); err == nil {
		return u.String()
	}
	return strings.ToLower(id)
}

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: micros(t), Valid: true}
}

func sortedKeys(m map[int]bool) []int {
	if len(m) == 0 {
		return nil
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
