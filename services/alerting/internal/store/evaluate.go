package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
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

// outcome is what an execution event means to the rules.
type outcome int

const (
	outcomeNone outcome = iota
	// outcomeSuccess: the execution succeeded (resolves failure, dead and
	// no-success incidents; resets the failure count).
	outcomeSuccess
	// outcomeFailure: FAILED with no retry left.
	outcomeFailure
	// outcomeDead: the execution reached the dead-letter queue (also a
	// terminal failure for the count).
	outcomeDead
	// outcomeMissed: the trigger recorded the slot missed.
	outcomeMissed
	// outcomeFired: the first attempt of a scheduled slot started.
	outcomeFired
	// outcomeSkipped: the execution's overlap policy skipped it; a failure
	// for the consecutive-failure rules that count skipped executions,
	// nothing for the others.
	outcomeSkipped
)

func classify(ev *eventsv1.ExecutionEvent) outcome {
	switch ev.GetKind() {
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED:
		return outcomeSuccess
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED:
		if !ev.GetRetryScheduled() {
			return outcomeFailure
		}
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD:
		return outcomeDead
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED:
		return outcomeMissed
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SKIPPED:
		return outcomeSkipped
	case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED:
		if ev.GetAttempt() <= 1 && scheduled(ev) {
			return outcomeFired
		}
	}
	return outcomeNone
}

// scheduled reports slots of the schedule, fired on time or caught up
// late (not manual runs or backfills, whose timing says nothing about the
// trigger).
func scheduled(ev *eventsv1.ExecutionEvent) bool {
	switch ev.GetTriggerKind() {
	case dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP, dispatchv1.TriggerKind_TRIGGER_KIND_UNSPECIFIED:
		return true
	}
	return false
}

// lateness is how long after its nominal time a slot fired; 0 when unknown.
func lateness(ev *eventsv1.ExecutionEvent) time.Duration {
	if !ev.GetFireTime().IsValid() || !ev.GetNominalTime().IsValid() {
		return 0
	}
	return ev.GetFireTime().AsTime().Sub(ev.GetNominalTime().AsTime())
}

// item is one event some rule watches.
type item struct {
	ev      *eventsv1.ExecutionEvent
	out     outcome
	rules   []*rules.Rule
	nominal time.Time
	// opens: the event may open an incident, so it must count once (it
	// goes through the execution_events dedupe table).
	opens bool
}

type ruleJob struct{ rule, job string }

// openReq is an incident to open.
type openReq struct {
	rule    *rules.Rule
	ev      *eventsv1.ExecutionEvent
	slot    time.Time
	summary string
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
func (s *Store) ApplyExecutions(ctx context.Context, events []*eventsv1.ExecutionEvent, set *rules.Set, now time.Time) (Result, error) {
	var res Result
	var items []item
	for _, ev := range events {
		out := classify(ev)
		if out == outcomeNone {
			continue
		}
		matched := set.Matching(ev.GetNamespace(), ev.GetJobId(), ev.GetJobLabels())
		if len(matched) == 0 || (out == outcomeSkipped && !slices.ContainsFunc(matched, countsSkipped)) {
			continue
		}
		it := item{ev: ev, out: out, rules: matched, nominal: ev.GetNominalTime().AsTime()}
		switch out {
		case outcomeFailure, outcomeDead, outcomeMissed, outcomeSkipped:
			it.opens = true
		case outcomeFired:
			it.opens = lateByAny(matched, lateness(ev))
		}
		items = append(items, it)
	}
	res.Relevant = len(items)
	marks := jobMarks(events)
	runs := jobRuns(events)
	if len(items) == 0 && len(marks) == 0 && len(runs.ids) == 0 {
		return res, nil
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := markJobs(ctx, tx, marks, now); err != nil {
			return err
		}
		if err := countJobRuns(ctx, tx, runs); err != nil {
			return err
		}
		if len(items) == 0 {
			return nil
		}
		var err error
		items, err = dedupe(ctx, tx, items, now, &res)
		if err != nil {
			return err
		}
		return s.evaluate(ctx, tx, items, now, &res)
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
		sched := scheduled(ev)
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
// (version 0, no schedule) that its first job event fills in.
func markJobs(ctx context.Context, tx pgx.Tx, marks map[string]*jobMark, now time.Time) error {
	if len(marks) == 0 {
		return nil
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
	_, err := tx.Exec(ctx, `
		INSERT INTO jobs AS j (id, namespace, display_name, version, create_time, seen_through, last_success_nominal, last_success_time)
		SELECT m.id, m.ns, m.name, 0, $6, m.seen, m.success, CASE WHEN m.success IS NOT NULL THEN $6::timestamptz END
		FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[]) AS m(id, ns, name, seen, success)
		ON CONFLICT (id) DO UPDATE SET
		    seen_through = greatest(j.seen_through, excluded.seen_through),
		    last_success_nominal = greatest(j.last_success_nominal, excluded.last_success_nominal),
		    last_success_time = coalesce(excluded.last_success_time, j.last_success_time)`,
		permute(ids), permute(namespaces), permute(names), permuteT(seen), permuteT(success), now)
	if err != nil {
		return fmt.Errorf("mark jobs: %w", err)
	}
	return nil
}

// countsSkipped reports a consecutive-failure rule that counts skipped
// executions as failures.
func countsSkipped(r *rules.Rule) bool { return r.Kind == rules.ConsecutiveFailures && r.CountSkipped }

// runList is the runs of scheduled slots a batch saw, one entry per (job,
// nominal time), as column arrays sorted by job id.
type runList struct {
	ids      []string
	nominals []time.Time
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
		if !scheduled(ev) || ev.GetKind() == eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED ||
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

// countJobRuns records the batch's runs of jobs with a limit (and of
// placeholder rows, whose limit is not known yet) after the job got it,
// each once, raises their runs_seen by the new ones, and stops watching a
// job that has reached its limit. Jobs without a limit cost the join and
// nothing more. Runs after markJobs, which created the placeholder rows
// and holds the batch's job rows locked.
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

func lateByAny(rs []*rules.Rule, late time.Duration) bool {
	for _, r := range rs {
		if r.Kind == rules.MissedSchedule && late > r.Tolerance {
			return true
		}
	}
	return false
}

// dedupe records the opening events and drops those recorded before.
func dedupe(ctx context.Context, tx pgx.Tx, items []item, now time.Time, res *Result) ([]item, error) {
	var ids, jobs []string
	var attempts []int32
	var kinds []int16
	var nominals []time.Time
	var failed, skipped []bool
	for _, it := range items {
		if !it.opens {
			continue
		}
		ids = append(ids, it.ev.GetExecutionId())
		attempts = append(attempts, it.ev.GetAttempt())
		kinds = append(kinds, int16(it.ev.GetKind()))
		jobs = append(jobs, it.ev.GetJobId())
		nominals = append(nominals, it.nominal)
		failed = append(failed, it.out == outcomeFailure || it.out == outcomeDead)
		skipped = append(skipped, it.out == outcomeSkipped)
	}
	if len(ids) == 0 {
		return items, nil
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
	type key struct {
		id      string
		attempt int32
		kind    int16
	}
	fresh := map[key]bool{}
	var k key
	if _, err := pgx.ForEachRow(rows, []any{&k.id, &k.attempt, &k.kind}, func() error { fresh[k] = true; return nil }); err != nil {
		return nil, fmt.Errorf("record events: %w", err)
	}
	kept := items[:0]
	for _, it := range items {
		if it.opens {
			k := key{it.ev.GetExecutionId(), it.ev.GetAttempt(), int16(it.ev.GetKind())}
			if !fresh[k] {
				res.Duplicates++
				continue
			}
			delete(fresh, k) // a duplicate within the batch counts once
		}
		kept = append(kept, it)
	}
	return kept, nil
}

// openIncident is an open incident of the batch's jobs.
type openIncident struct {
	id   uuid.UUID
	slot *time.Time
}

func (s *Store) evaluate(ctx context.Context, tx pgx.Tx, items []item, now time.Time, res *Result) error {
	// The open incidents of the batch's jobs, in one query: most batches
	// resolve nothing, and this keeps them from issuing an UPDATE per
	// success.
	jobSet := map[string]struct{}{}
	for _, it := range items {
		jobSet[it.ev.GetJobId()] = struct{}{}
	}
	jobIDs := make([]string, 0, len(jobSet))
	for j := range jobSet {
		jobIDs = append(jobIDs, j)
	}
	open := map[ruleJob]openIncident{}
	rows, err := tx.Query(ctx, `SELECT rule_id, job_id, id, slot_time FROM incidents WHERE job_id = ANY($1) AND state <> $2`, jobIDs, stateResolved)
	if err != nil {
		return err
	}
	var rid uuid.UUID
	var jid string
	var oi openIncident
	if _, err := pgx.ForEachRow(rows, []any{&rid, &jid, &oi.id, &oi.slot}, func() error {
		open[ruleJob{rid.String(), jid}] = oi
		return nil
	}); err != nil {
		return err
	}

	// Successes: move each job's high-water mark, and resolve.
	type success struct {
		nominal time.Time
		ev      *eventsv1.ExecutionEvent
	}
	lastSuccess := map[string]success{}
	failing := map[string]*eventsv1.ExecutionEvent{} // job -> its latest new terminal failure
	type resolveReq struct {
		key     ruleJob
		nominal time.Time
		reason  string
	}
	var resolves []resolveReq
	var opens []openReq
	// missedLatest is, per (missed-schedule rule, job), the batch's latest
	// slot: whether it fired on time decides open or resolve.
	type slotState struct {
		nominal time.Time
		item    item
	}
	missedLatest := map[ruleJob]slotState{}
	for _, it := range items {
		job := it.ev.GetJobId()
		switch it.out {
		case outcomeSuccess:
			if cur, ok := lastSuccess[job]; !ok || it.nominal.After(cur.nominal) {
				lastSuccess[job] = success{it.nominal, it.ev}
			}
		case outcomeFailure, outcomeDead, outcomeSkipped:
			if cur, ok := failing[job]; !ok || it.nominal.After(cur.GetNominalTime().AsTime()) {
				failing[job] = it.ev
			}
			if it.out == outcomeDead {
				for _, r := range it.rules {
					if r.Kind == rules.DeadLettered {
						opens = append(opens, openReq{r, it.ev, it.nominal, "an execution was dead-lettered: " + truncate(it.ev.GetReason(), 200)})
					}
				}
			}
		case outcomeMissed, outcomeFired:
			for _, r := range it.rules {
				if r.Kind != rules.MissedSchedule {
					continue
				}
				k := ruleJob{r.ID, job}
				if cur, ok := missedLatest[k]; !ok || !it.nominal.Before(cur.nominal) {
					missedLatest[k] = slotState{it.nominal, it}
				}
			}
		}
	}
	for k, st := range missedLatest {
		r := findRule(st.item.rules, k.rule)
		late := lateness(st.item.ev)
		switch {
		case st.item.out == outcomeMissed:
			opens = append(opens, openReq{r, st.item.ev, st.nominal, "a scheduled slot was missed: " + truncate(st.item.ev.GetReason(), 200)})
		case late > r.Tolerance:
			opens = append(opens, openReq{r, st.item.ev, st.nominal, fmt.Sprintf("a scheduled slot fired %s late (tolerance %s)", late.Round(time.Millisecond), r.Tolerance)})
		default:
			resolves = append(resolves, resolveReq{k, st.nominal, "a slot fired on time"})
		}
	}
	if len(lastSuccess) > 0 {
		for job, sc := range lastSuccess {
			for _, r := range ruleList(items, job) {
				if r.Kind == rules.ConsecutiveFailures || r.Kind == rules.DeadLettered || r.Kind == rules.NoSuccess {
					resolves = append(resolves, resolveReq{ruleJob{r.ID, job}, sc.nominal, "the job succeeded"})
				}
			}
		}
	}
	// Failures: count the distinct failed executions after each job's
	// latest success (this batch's successes included).
	if len(failing) > 0 {
		ids := make([]string, 0, len(failing))
		for job := range failing {
			ids = append(ids, job)
		}
		// An execution id is derived from (job, nominal time), so the
		// distinct failed executions of a job are its distinct failed
		// nominal times: counted newest first along the partial index and
		// stopped at the largest threshold, the cost stays bounded however
		// long a job keeps failing. (Counting DISTINCT execution_id read
		// every failure since the last success: in a storm of jobs that
		// never recover, each batch got slower than the last.)
		// The second count, failures and skipped executions together, is
		// made only when a rule of the batch counts skipped ones.
		withSkipped := false
		for _, it := range items {
			withSkipped = withSkipped || slices.ContainsFunc(it.rules, countsSkipped)
		}
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
			FROM unnest($1::text[]) AS f(id) LEFT JOIN jobs j ON j.id = f.id`, ids, maxCount(items), withSkipped)
		if err != nil {
			return fmt.Errorf("count failures: %w", err)
		}
		var job string
		var nFailed, nAny int
		if _, err := pgx.ForEachRow(rows, []any{&job, &nFailed, &nAny}, func() error {
			ev := failing[job]
			for _, r := range ruleList(items, job) {
				if r.Kind != rules.ConsecutiveFailures {
					continue
				}
				n, what := nFailed, "failed"
				if r.CountSkipped {
					n, what = nAny, "failed or were skipped"
				}
				if n >= r.Count {
					opens = append(opens, openReq{r, ev, ev.GetNominalTime().AsTime(), fmt.Sprintf("%d executions in a row %s", n, what)})
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("count failures: %w", err)
		}
	}
	// Resolve what is open and old enough.
	seen := map[ruleJob]bool{}
	for _, rr := range resolves {
		oi, ok := open[rr.key]
		if !ok || seen[rr.key] || (oi.slot != nil && oi.slot.After(rr.nominal)) {
			continue
		}
		seen[rr.key] = true
		n, err := s.resolve(ctx, tx, oi.id, rr.reason, "", now)
		if err != nil {
			return err
		}
		res.Resolved += n
		delete(open, rr.key)
	}
	for _, o := range opens {
		k := ruleJob{o.rule.ID, o.ev.GetJobId()}
		if _, ok := open[k]; ok {
			continue
		}
		if o.rule.Kind == rules.ConsecutiveFailures {
			// After a manual resolution the streak starts again: count
			// only the failures after it.
			ruleID, err := uuid.Parse(o.rule.ID)
			if err != nil {
				return err
			}
			cut, err := manualCut(ctx, tx, ruleID, k.job)
			if err != nil {
				return err
			}
			if cut != nil {
				n, err := streakAfter(ctx, tx, o.rule, k.job, *cut)
				if err != nil {
					return err
				}
				if n < o.rule.Count {
					continue
				}
				what := "failed"
				if o.rule.CountSkipped {
					what = "failed or were skipped"
				}
				o.summary = fmt.Sprintf("%d executions in a row %s since the last incident was resolved by hand", n, what)
			}
		}
		id, opened, err := s.open(ctx, tx, o.rule, o.ev.GetNamespace(), o.ev.GetJobId(), o.ev.GetJobDisplayName(), &o.slot, o.summary, now)
		if err != nil {
			return err
		}
		if opened {
			res.Opened++
			open[k] = openIncident{id: id, slot: &o.slot}
		}
	}
	return nil
}

func findRule(rs []*rules.Rule, id string) *rules.Rule {
	for _, r := range rs {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// ruleList returns the rules matched by the job's events in the batch.
func ruleList(items []item, job string) []*rules.Rule {
	for _, it := range items {
		if it.ev.GetJobId() == job {
			return it.rules
		}
	}
	return nil
}

// maxCount is the largest failure threshold the batch's rules need: the
// count stops there.
func maxCount(items []item) int {
	n := 1
	for _, it := range items {
		for _, r := range it.rules {
			n = max(n, r.Count)
		}
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// open opens an incident for (rule, job) unless one is open, and queues a
// notification to each of the rule's channels; opened says whether it did.
func (s *Store) open(ctx context.Context, tx pgx.Tx, r *rules.Rule, ns, job, jobName string, slot *time.Time, summary string, now time.Time) (uuid.UUID, bool, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return id, false, err
	}
	ruleID, err := uuid.Parse(r.ID)
	if err != nil {
		return id, false, err
	}
	if slot != nil {
		cut, err := manualCut(ctx, tx, ruleID, job)
		if err != nil {
			return id, false, err
		}
		if cut != nil && !slot.After(*cut) {
			// The slot is part of what a person resolved by hand.
			return id, false, nil
		}
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO incidents (id, namespace, rule_id, job_id, job_display_name, kind, state, summary, slot_time, open_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (rule_id, job_id) WHERE state <> 3 DO NOTHING`,
		id, ns, ruleID, job, jobName, int16(r.Kind), stateOpen, summary, slot, now)
	if err != nil {
		return id, false, fmt.Errorf("open incident: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return id, false, nil
	}
	inc := &payload.Incident{
		ID: id.String(), Namespace: ns, RuleID: r.ID, JobID: job, JobDisplayName: jobName,
		Kind: payload.KindName(alertingv1.IncidentKind(r.Kind)), Summary: summary, SlotTime: slot, OpenTime: now,
	}
	return id, true, s.queue(ctx, tx, id, r.Channels, "incident.opened", inc, now)
}

// manualCut is when an incident of (rule, job) was last resolved by hand,
// nil if never: the slots at or before it count no more towards the rule,
// so the resolution is not undone by the very failures it dismissed.
// Compared with slots' nominal times, so a retry of an old slot that fails
// after the resolution does not count either.
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
	if err == pgx.ErrNoRows {
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
