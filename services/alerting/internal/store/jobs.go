package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/schedule"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
)

// ErrInvalidEvent wraps a job event that can never be applied.
var ErrInvalidEvent = errors.New("invalid job event")

// JobApplied says what ApplyJobEvent did.
type JobApplied int

// The outcomes of ApplyJobEvent.
const (
	// JobUpserted: the row holds the event's version now.
	JobUpserted JobApplied = iota + 1
	// JobStale: the row holds this version or a newer one already.
	JobStale
	// JobIgnored: the event does not change a job definition (a run
	// request).
	JobIgnored
)

// ApplyJobEvent applies a registry job event to the jobs table, only if
// its version is newer than the row's (as the trigger's projection does):
// a redelivered or overtaken event changes nothing. A deleted job keeps
// its row, flagged, so that an older event arriving after the delete
// cannot bring it back. The watchdog's next expected slot is recomputed
// from the schedule (libs/jobspec, the code the registry and the trigger
// use) as the first slot after now and after the latest slot seen.
func (s *Store) ApplyJobEvent(ctx context.Context, ev *eventsv1.JobEvent, now time.Time) (JobApplied, error) {
	if ev.GetKind() == eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED {
		return JobIgnored, nil
	}
	job := ev.GetJob()
	if job.GetId() == "" || ev.GetVersion() <= 0 {
		return 0, fmt.Errorf("%w: no job id or no positive version", ErrInvalidEvent)
	}
	deleted := ev.GetKind() == eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED
	created := job.GetCreateTime().AsTime()
	var schedBytes []byte
	if job.GetSchedule() != nil {
		b, err := proto.Marshal(job.GetSchedule())
		if err != nil {
			return 0, err
		}
		schedBytes = b
	}
	labels, err := json.Marshal(job.GetLabels())
	if err != nil {
		return 0, err
	}
	var applied JobApplied
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var version int64
		var seen *time.Time
		err := tx.QueryRow(ctx, `SELECT version, seen_through FROM jobs WHERE id = $1 FOR UPDATE`, job.GetId()).Scan(&version, &seen)
		found := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if found && version >= ev.GetVersion() {
			applied = JobStale
			return nil
		}
		var next *time.Time
		if !deleted && !job.GetPaused() && job.GetSchedule() != nil {
			sched, errs := jobspec.Schedule(job.GetSchedule(), created)
			if len(errs) > 0 {
				return fmt.Errorf("%w: job %s: schedule: %v", ErrInvalidEvent, job.GetId(), errs[0])
			}
			after := now
			if seen != nil && seen.After(after) {
				after = *seen
			}
			if t, ok := sched.Next(after); ok {
				next = &t
			}
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO jobs (id, namespace, display_name, labels, version, deleted, paused, schedule, create_time, next_slot, check_time)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)
			ON CONFLICT (id) DO UPDATE SET namespace = excluded.namespace, display_name = excluded.display_name,
			    labels = excluded.labels, version = excluded.version, deleted = excluded.deleted, paused = excluded.paused,
			    schedule = excluded.schedule, create_time = excluded.create_time,
			    next_slot = excluded.next_slot, check_time = excluded.check_time`,
			job.GetId(), job.GetNamespace(), job.GetDisplayName(), labels, ev.GetVersion(), deleted, job.GetPaused(),
			schedBytes, created, next)
		applied = JobUpserted
		return err
	})
	return applied, err
}

// watched is a job the watchdog looks at.
type watched struct {
	id, namespace, name string
	labels              map[string]string
	sched               schedule.Schedule
	next                time.Time
	seen                *time.Time
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
// passes. The rows are locked (SKIP LOCKED), so replicas share the work.
func (s *Store) Watch(ctx context.Context, set *rules.Set, now time.Time, limit int) (WatchResult, error) {
	var res WatchResult
	minTol := set.MinTolerance
	if minTol <= 0 {
		return res, nil // no missed-schedule rule: nothing to watch for
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id, namespace, display_name, labels, schedule, create_time, next_slot, seen_through
			FROM jobs WHERE check_time <= $1
			ORDER BY check_time LIMIT $2 FOR UPDATE SKIP LOCKED`, now.Add(-minTol), limit)
		if err != nil {
			return err
		}
		var jobs []watched
		var w watched
		var labels, schedBytes []byte
		var created time.Time
		_, err = pgx.ForEachRow(rows, []any{&w.id, &w.namespace, &w.name, &labels, &schedBytes, &created, &w.next, &w.seen}, func() error {
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
		summary := fmt.Sprintf("no execution for the slot at %s within %s: the trigger tier may be down or stuck",
			slot.UTC().Format(time.RFC3339), r.Tolerance)
		_, ok, err := s.open(ctx, tx, r, j.namespace, j.id, j.name, &slot, summary, now)
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
// the later of its last success, its creation and the rule's creation), up
// to limit per rule.
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
		labels, err := json.Marshal(r.Labels)
		if err != nil {
			return opened, err
		}
		var ids []string
		for id := range r.JobIDs {
			ids = append(ids, id)
		}
		cut := now.Add(-r.Within)
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `
				SELECT j.id, j.display_name FROM jobs j
				WHERE j.namespace = $1 AND NOT j.deleted AND NOT j.paused AND j.version > 0
				  AND j.labels @> $2 AND (cardinality($3::text[]) = 0 OR j.id = ANY($3))
				  AND greatest(j.last_success_time, j.create_time, $4) < $5
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
				_, ok, err := s.open(ctx, tx, r, r.Namespace, j.id, j.name, nil,
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
// job's latest success), and sent notifications. Failures after a job's
// latest success are kept however old: they are the running count of a
// rule that may not have reached its threshold yet (a daily job failing
// for ten days).
func (s *Store) Prune(ctx context.Context, before time.Time, limit int) (events, notifications int64, err error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM execution_events WHERE ctid IN (
		    SELECT e.ctid FROM execution_events e LEFT JOIN jobs j ON j.id = e.job_id
		    WHERE e.seen_time < $1 AND (NOT e.failed OR e.nominal_time <= j.last_success_nominal)
		    LIMIT $2)`, before, limit)
	if err != nil {
		return 0, 0, fmt.Errorf("prune events: %w", err)
	}
	events = tag.RowsAffected()
	tag, err = s.pool.Exec(ctx, `
		DELETE FROM notifications WHERE id IN (
		    SELECT id FROM notifications WHERE sent_time < $1 LIMIT $2)`, before, limit)
	if err != nil {
		return events, 0, fmt.Errorf("prune notifications: %w", err)
	}
	return events, tag.RowsAffected(), nil
}
