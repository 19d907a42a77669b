package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/services/alerting/internal/payload"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
)

// Result counts what one ApplyExecutions changed.
type Result struct {
	// Relevant is how many events some rule looked at.
	Relevant int
	// Duplicates is how many opening events were already recorded.
	Duplicates int
	Opened     int
	Resolved   int
}

// ApplyExecutions evaluates one broker message's events against the rules
// in one transaction: it is the whole of the consumer's database work for
// the message, so the message is acknowledged only after it commits and a
// redelivery re-runs it harmlessly. Events that can open an incident
// (terminal failures, dead letters, missed and late slots) count once per
// (execution_id, attempt, kind) through the execution_events table;
// successes and on-time slots only resolve and move high-water marks, which
// is idempotent by itself. Order between messages does not matter: the
// failure count is the number of distinct failed executions with a nominal
// time after the job's latest success, and a success resolves only
// incidents opened by slots no later than its own.
func (s *Store) ApplyExecutions(ctx context.Context, batch []*eventsv1.ExecutionEvent, set *rules.Set, now time.Time) (Result, error) {
	var res Result
	events := rules.Relevant(batch, set)
	res.Relevant = len(events)
	marks := jobMarks(batch)
	runs := jobRuns(batch)
	if len(events) == 0 && len(marks) == 0 && len(runs.ids) == 0 {
		return res, nil
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		limited, err := markJobs(ctx, tx, marks, now)
		if err != nil {
			return err
		}
		if err := countJobRuns(ctx, tx, runs.of(limited)); err != nil {
			return err
		}
		if len(events) == 0 {
			return nil
		}
		fresh, err := recordEvents(ctx, tx, events, now)
		if err != nil {
			return err
		}
		events, res.Duplicates = rules.Dedupe(events, fresh)
		return s.evaluate(ctx, tx, events, now, &res)
	})
	return res, err
}

// jobMark is what a batch tells about one job: the latest scheduled slot
// it saw an event for (the watchdog's "seen"), and its latest success.
type jobMark struct {
	namespace, name string
	seen, success   *time.Time
}

func jobMarks(events []*eventsv1.ExecutionEvent) map[string]*jobMark {
	marks := map[string]*jobMark{}
	for _, ev := range events {
		succeeded := ev.GetKind() == eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED
		sched := rules.Scheduled(ev)
		if (!succeeded && !sched) || ev.GetJobId() == "" || !ev.GetNominalTime().IsValid() {
			continue
		}
		m := marks[ev.GetJobId()]
		if m == nil {
			m = &jobMark{namespace: ev.GetNamespace(), name: ev.GetJobDisplayName()}
			marks[ev.GetJobId()] = m
		}
		t := ev.GetNominalTime().AsTime()
		if sched && (m.seen == nil || t.After(*m.seen)) {
			m.seen = &t
		}
		if succeeded && (m.success == nil || t.After(*m.success)) {
			m.success = &t
		}
	}
	return marks
}

// markJobs moves the jobs' high-water marks in one statement. A job
// alerting has not heard of from the registry yet gets a placeholder row
// (version 0, no schedule) that its first job event fills in. It returns
// the marked jobs whose runs countJobRuns must count: those with a limit
// and the placeholders, whose limit is not known yet. Nearly every job has
// neither, and knowing it from the rows this statement locks anyway spares
// every batch a second look-up of each of its jobs.
func markJobs(ctx context.Context, tx pgx.Tx, marks map[string]*jobMark, now time.Time) (map[string]bool, error) {
	limited := map[string]bool{}
	if len(marks) == 0 {
		return limited, nil
	}
	n := len(marks)
	ids, namespaces, names := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	seen, success := make([]*time.Time, 0, n), make([]*time.Time, 0, n)
	for id, m := range marks {
		ids, namespaces, names = append(ids, id), append(namespaces, m.namespace), append(names, m.name)
		seen, success = append(seen, m.seen), append(success, m.success)
	}
	// Sorted ids keep concurrent batches from deadlocking on row locks.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(ids[a], ids[b]) })
	permute := func(v []string) []string {
		out := make([]string, n)
		for i, o := range order {
			out[i] = v[o]
		}
		return out
	}
	permuteT := func(v []*time.Time) []*time.Time {
		out := make([]*time.Time, n)
		for i, o := range order {
			out[i] = v[o]
		}
		return out
	}
	rows, err := tx.Query(ctx, `
		WITH marked AS (
		    INSERT INTO jobs AS j (id, namespace, display_name, version, create_time, seen_through, last_success_nominal, last_success_time)
		    SELECT m.id, m.ns, m.name, 0, $6, m.seen, m.success, CASE WHEN m.success IS NOT NULL THEN $6::timestamptz END
		    FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[]) AS m(id, ns, name, seen, success)
		    ON CONFLICT (id) DO UPDATE SET
		        seen_through = greatest(j.seen_through, excluded.seen_through),
		        last_success_nominal = greatest(j.last_success_nominal, excluded.last_success_nominal),
		        last_success_time = coalesce(excluded.last_success_time, j.last_success_time)
		    RETURNING j.id, j.max_runs, j.version, j.deleted)
		SELECT id FROM marked WHERE (max_runs > 0 OR version = 0) AND NOT deleted`,
		permute(ids), permute(namespaces), permute(names), permuteT(seen), permuteT(success), now)
	if err != nil {
		return nil, fmt.Errorf("mark jobs: %w", err)
	}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { limited[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("mark jobs: %w", err)
	}
	return limited, nil
}

// runList is the runs of scheduled slots a batch saw, one entry per (job,
// nominal time), as column arrays sorted by job id.
type runList struct {
	ids      []string
	nominals []time.Time
}

// of is the runs of the jobs in ids.
func (l runList) of(ids map[string]bool) runList {
	var out runList
	for i, id := range l.ids {
		if ids[id] {
			out.ids, out.nominals = append(out.ids, id), append(out.nominals, l.nominals[i])
		}
	}
	return out
}

// jobRuns lists the runs the events show: every scheduled or catch-up slot
// with an event other than MISSED (the trigger fired it; what became of it
// does not matter), as the trigger counts runs against max_runs.
func jobRuns(events []*eventsv1.ExecutionEvent) runList {
	type run struct {
		job     string
		nominal time.Time
	}
	seen := map[run]bool{}
	var all []run
	for _, ev := range events {
		if !rules.Scheduled(ev) || ev.GetKind() == eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED ||
			ev.GetJobId() == "" || !ev.GetNominalTime().IsValid() {
			continue
		}
		r := run{ev.GetJobId(), ev.GetNominalTime().AsTime()}
		if !seen[r] {
			seen[r] = true
			all = append(all, r)
		}
	}
	slices.SortFunc(all, func(a, b run) int { return cmp.Or(strings.Compare(a.job, b.job), a.nominal.Compare(b.nominal)) })
	var l runList
	for _, r := range all {
		l.ids, l.nominals = append(l.ids, r.job), append(l.nominals, r.nominal)
	}
	return l
}

// countJobRuns records the runs of jobs with a limit (and of placeholder
// rows, whose limit is not known yet) after the job got it, each once,
// raises their runs_seen by the new ones, and stops watching a job that has
// reached its limit. runs are those of the jobs markJobs returned; it
// created the placeholder rows and holds the batch's job rows locked, so
// the join reads what it saw.
func countJobRuns(ctx context.Context, tx pgx.Tx, runs runList) error {
	if len(runs.ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		WITH added AS (
		    INSERT INTO limited_runs (job_id, nominal_time)
		    SELECT r.id, r.nominal FROM unnest($1::text[], $2::timestamptz[]) AS r(id, nominal)
		    JOIN jobs j ON j.id = r.id
		    WHERE (j.max_runs > 0 OR j.version = 0) AND NOT j.deleted
		      AND (j.limit_since IS NULL OR r.nominal > j.limit_since)
		    ON CONFLICT DO NOTHING
		    RETURNING job_id),
		counted AS (SELECT job_id, count(*) AS n FROM added GROUP BY job_id)
		UPDATE jobs SET runs_seen = jobs.runs_seen + c.n,
		    next_slot = CASE WHEN jobs.max_runs > 0 AND jobs.runs_seen + c.n >= jobs.max_runs THEN NULL ELSE jobs.next_slot END,
		    check_time = CASE WHEN jobs.max_runs > 0 AND jobs.runs_seen + c.n >= jobs.max_runs THEN NULL ELSE jobs.check_time END
		FROM counted c WHERE jobs.id = c.job_id`, runs.ids, runs.nominals)
	if err != nil {
		return fmt.Errorf("count runs: %w", err)
	}
	return nil
}

// recordEvents records the events that can open an incident in the
// execution_events table, once per (execution_id, attempt, kind), and
// returns the keys recorded for the first time now.
func recordEvents(ctx context.Context, tx pgx.Tx, events []rules.Event, now time.Time) (map[rules.EventKey]bool, error) {
	var ids, jobs []string
	var attempts []int32
	var kinds []int16
	var nominals []time.Time
	var failed, skipped []bool
	for _, e := range events {
		if !e.Opens {
			continue
		}
		k := e.Key()
		ids, attempts, kinds = append(ids, k.ExecutionID), append(attempts, k.Attempt), append(kinds, k.Kind)
		jobs = append(jobs, e.Ev.GetJobId())
		nominals = append(nominals, e.Nominal)
		failed = append(failed, e.Outcome == rules.OutcomeFailure || e.Outcome == rules.OutcomeDead)
		skipped = append(skipped, e.Outcome == rules.OutcomeSkipped)
	}
	fresh := map[rules.EventKey]bool{}
	if len(ids) == 0 {
		return fresh, nil
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO execution_events (execution_id, attempt, kind, job_id, nominal_time, failed, skipped, seen_time)
		SELECT e.id, e.attempt, e.kind, e.job, e.nominal, e.failed, e.skipped, $8
		FROM unnest($1::text[], $2::int[], $3::smallint[], $4::text[], $5::timestamptz[], $6::bool[], $7::bool[])
		     AS e(id, attempt, kind, job, nominal, failed, skipped)
		ON CONFLICT DO NOTHING
		RETURNING execution_id, attempt, kind`, ids, attempts, kinds, jobs, nominals, failed, skipped, now)
	if err != nil {
		return nil, fmt.Errorf("record events: %w", err)
	}
	var k rules.EventKey
	if _, err := pgx.ForEachRow(rows, []any{&k.ExecutionID, &k.Attempt, &k.Kind}, func() error { fresh[k] = true; return nil }); err != nil {
		return nil, fmt.Errorf("record events: %w", err)
	}
	return fresh, nil
}

// evaluate loads what rules.Decide needs (the open incidents and the
// failure streaks of the batch's jobs), and saves its decision.
func (s *Store) evaluate(ctx context.Context, tx pgx.Tx, events []rules.Event, now time.Time, res *Result) error {
	if len(events) == 0 {
		return nil
	}
	jobIDs := make([]string, 0, len(events))
	for _, e := range events {
		if !slices.Contains(jobIDs, e.Ev.GetJobId()) {
			jobIDs = append(jobIDs, e.Ev.GetJobId())
		}
	}
	// The open incidents of the batch's jobs, in one query: most batches
	// resolve nothing, and this keeps them from issuing an UPDATE per
	// success.
	st := rules.State{Open: map[rules.IncidentKey]*time.Time{}}
	incidentIDs := map[rules.IncidentKey]uuid.UUID{}
	rows, err := tx.Query(ctx, `SELECT rule_id, job_id, id, slot_time FROM incidents WHERE job_id = ANY($1) AND state <> $2`, jobIDs, stateResolved)
	if err != nil {
		return err
	}
	var rid, iid uuid.UUID
	var jid string
	var slot *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&rid, &jid, &iid, &slot}, func() error {
		k := rules.IncidentKey{Rule: rid.String(), Job: jid}
		st.Open[k], incidentIDs[k] = slot, iid
		return nil
	}); err != nil {
		return err
	}
	if st.Streaks, err = loadStreaks(ctx, tx, events); err != nil {
		return err
	}

	d := rules.Decide(events, st)
	if len(d.Open) > 0 {
		// Decide again with the manual resolutions of what it opens: they
		// only drop openings or rewrite their summaries (rules.State).
		if st.Manual, err = loadManual(ctx, tx, d.Open); err != nil {
			return err
		}
		if len(st.Manual) > 0 {
			d = rules.Decide(events, st)
		}
	}
	for _, r := range d.Resolve {
		n, err := s.resolve(ctx, tx, incidentIDs[r.Key], r.Reason, "", now)
		if err != nil {
			return err
		}
		res.Resolved += n
	}
	for _, o := range d.Open {
		opened, err := s.open(ctx, tx, o.Rule, o.Ev.GetNamespace(), o.Ev.GetJobId(), o.Ev.GetJobDisplayName(), &o.Slot, o.Summary, now)
		if err != nil {
			return err
		}
		if opened {
			res.Opened++
		}
	}
	return nil
}

// loadManual reads, for each key opens would open, when an incident of it
// was last resolved by hand and, for a consecutive-failure rule, the
// job's streak since then (rules.Manual); keys never resolved by hand are
// left out.
func loadManual(ctx context.Context, tx pgx.Tx, opens []rules.Open) (map[rules.IncidentKey]rules.Manual, error) {
	manual := map[rules.IncidentKey]rules.Manual{}
	for _, o := range opens {
		ruleID, err := uuid.Parse(o.Rule.ID)
		if err != nil {
			return nil, err
		}
		cut, err := manualCut(ctx, tx, ruleID, o.Ev.GetJobId())
		if err != nil {
			return nil, err
		}
		if cut == nil {
			continue
		}
		m := rules.Manual{At: *cut}
		if o.Rule.Kind == rules.ConsecutiveFailures {
			if m.Streak, err = streakAfter(ctx, tx, o.Rule, o.Ev.GetJobId(), *cut); err != nil {
				return nil, err
			}
		}
		manual[rules.IncidentKey{Rule: o.Rule.ID, Job: o.Ev.GetJobId()}] = m
	}
	return manual, nil
}

// loadStreaks counts the failure streaks of the jobs rules.StreakQuery
// names, from the recorded events and the jobs' latest successes (both
// already holding this batch's).
func loadStreaks(ctx context.Context, tx pgx.Tx, events []rules.Event) (map[string]rules.Streak, error) {
	jobs, limit, withSkipped := rules.StreakQuery(events)
	streaks := make(map[string]rules.Streak, len(jobs))
	if len(jobs) == 0 {
		return streaks, nil
	}
	// An execution id is derived from (job, nominal time), so the distinct
	// failed executions of a job are its distinct failed nominal times:
	// counted newest first along the partial index and stopped at the
	// largest threshold, the cost stays bounded however long a job keeps
	// failing. (Counting DISTINCT execution_id read every failure since the
	// last success: in a storm of jobs that never recover, each batch got
	// slower than the last.) The second count, failures and skipped
	// executions together, is made only when a rule of the batch counts
	// skipped ones.
	rows, err := tx.Query(ctx, `
		SELECT f.id, (SELECT count(*) FROM (
		        SELECT DISTINCT e.nominal_time FROM execution_events e
		        WHERE e.job_id = f.id AND e.failed
		          AND e.nominal_time > coalesce(j.last_success_nominal, '-infinity')
		        ORDER BY e.nominal_time DESC
		        LIMIT $2) c),
		    CASE WHEN $3 THEN (SELECT count(*) FROM (
		        SELECT e.nominal_time FROM execution_events e
		        WHERE e.job_id = f.id AND e.failed
		          AND e.nominal_time > coalesce(j.last_success_nominal, '-infinity')
		        UNION
		        SELECT e.nominal_time FROM execution_events e
		        WHERE e.job_id = f.id AND e.skipped
		          AND e.nominal_time > coalesce(j.last_success_nominal, '-infinity')
		        ORDER BY nominal_time DESC
		        LIMIT $2) c) ELSE 0 END
		FROM unnest($1::text[]) AS f(id) LEFT JOIN jobs j ON j.id = f.id`, jobs, limit, withSkipped)
	if err != nil {
		return nil, fmt.Errorf("count failures: %w", err)
	}
	var job string
	var st rules.Streak
	if _, err := pgx.ForEachRow(rows, []any{&job, &st.Failed, &st.FailedOrSkipped}, func() error {
		streaks[job] = st
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count failures: %w", err)
	}
	return streaks, nil
}

// open opens an incident for (rule, job) unless one is open, and queues a
// notification to each of the rule's channels; opened says whether it did.
// Whether a manual resolution dismissed the slot is the caller's to
// decide first (rules.Decide, rules.Dismissed).
func (s *Store) open(ctx context.Context, tx pgx.Tx, r *rules.Rule, ns, job, jobName string, slot *time.Time, summary string, now time.Time) (bool, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return false, err
	}
	ruleID, err := uuid.Parse(r.ID)
	if err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO incidents (id, namespace, rule_id, job_id, job_display_name, kind, state, summary, slot_time, open_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (rule_id, job_id) WHERE state <> 3 DO NOTHING`,
		id, ns, ruleID, job, jobName, int16(r.Kind), stateOpen, summary, slot, now)
	if err != nil {
		return false, fmt.Errorf("open incident: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	inc := &payload.Incident{
		ID: id.String(), Namespace: ns, RuleID: r.ID, JobID: job, JobDisplayName: jobName,
		Kind: payload.KindName(alertingv1.IncidentKind(r.Kind)), Summary: summary, SlotTime: slot, OpenTime: now,
	}
	return true, s.queue(ctx, tx, id, r.Channels, "incident.opened", inc, now)
}

// manualCut is when an incident of (rule, job) was last resolved by hand,
// nil if never: what rules.Manual and rules.Dismissed judge openings by.
func manualCut(ctx context.Context, tx pgx.Tx, ruleID uuid.UUID, job string) (*time.Time, error) {
	var cut *time.Time
	err := tx.QueryRow(ctx, `SELECT max(resolve_time) FROM incidents WHERE rule_id = $1 AND job_id = $2 AND resolved_by <> ''`,
		ruleID, job).Scan(&cut)
	if err != nil {
		return nil, fmt.Errorf("manual resolution: %w", err)
	}
	return cut, nil
}

// streakAfter counts, up to r.Count, the distinct failed (and, when the
// rule says so, skipped) slots of job after both its latest success and
// cut: the streak a consecutive-failures rule sees after a manual
// resolution.
func streakAfter(ctx context.Context, tx pgx.Tx, r *rules.Rule, job string, cut time.Time) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `
		SELECT count(*) FROM (
		    SELECT DISTINCT e.nominal_time FROM execution_events e
		    WHERE e.job_id = $1 AND (e.failed OR ($4 AND e.skipped))
		      AND e.nominal_time > greatest((SELECT last_success_nominal FROM jobs WHERE id = $1), $2)
		    ORDER BY e.nominal_time DESC
		    LIMIT $3) c`, job, cut, r.Count, r.CountSkipped).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count failures after a manual resolution: %w", err)
	}
	return n, nil
}

// resolve resolves an open incident and queues the notifications to the
// channels its rule names now; by is the key that resolved it by hand
// (empty: it resolved by itself).
func (s *Store) resolve(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason, by string, now time.Time) (int, error) {
	var inc payload.Incident
	var rid, iid uuid.UUID
	var kind int16
	var slot *time.Time
	err := tx.QueryRow(ctx, `
		UPDATE incidents SET state = $2, resolve_time = $3, resolve_reason = $4, resolved_by = $5
		WHERE id = $1 AND state <> $2
		RETURNING id, namespace, rule_id, job_id, job_display_name, kind, summary, slot_time, open_time`,
		id, stateResolved, now, reason, by).Scan(&iid, &inc.Namespace, &rid, &inc.JobID, &inc.JobDisplayName, &kind, &inc.Summary, &slot, &inc.OpenTime)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("resolve incident: %w", err)
	}
	inc.ID, inc.RuleID, inc.Kind, inc.SlotTime = iid.String(), rid.String(), payload.KindName(alertingv1.IncidentKind(kind)), slot
	inc.ResolveTime, inc.ResolveReason = &now, reason
	var channels []string
	rows, err := tx.Query(ctx, `SELECT channel_id::text FROM rule_channels WHERE rule_id = $1`, rid)
	if err != nil {
		return 0, err
	}
	if channels, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return 0, err
	}
	slices.Sort(channels)
	return 1, s.queue(ctx, tx, iid, channels, "incident.resolved", &inc, now)
}

// queue adds one notification per channel, each with its own id (the
// webhook-id receivers deduplicate on) and its payload fixed now.
func (s *Store) queue(ctx context.Context, tx pgx.Tx, incident uuid.UUID, channels []string, event string, inc *payload.Incident, now time.Time) error {
	for _, ch := range channels {
		chID, err := uuid.Parse(ch)
		if err != nil {
			continue
		}
		nid, err := uuid.NewV7()
		if err != nil {
			return err
		}
		p := &payload.Payload{Type: event, NotificationID: "ntf_" + nid.String(), Incident: inc}
		body, err := json.Marshal(p)
		if err != nil {
			return err
		}
		// A channel deleted since the rule was cached is skipped.
		if _, err := tx.Exec(ctx, `
			INSERT INTO notifications (id, incident_id, channel_id, event, subject, payload, next_attempt_time, create_time)
			SELECT $1, $2, c.id, $4, $5, $6, $7, $7 FROM channels c WHERE c.id = $3`,
			nid, incident, chID, event, p.Subject(), body, now); err != nil {
			return fmt.Errorf("queue notification: %w", err)
		}
	}
	return nil
}
