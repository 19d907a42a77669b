package rules_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// slot is the nominal time of the job's n-th minutely slot.
func slot(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }

// ev builds an execution event of job j at slot n: "ok" succeeded,
// "fail" failed for good, "retry" failed with a retry scheduled, "dead"
// dead-lettered, "skip" skipped, "missed" missed, "fire+D" the first
// attempt started D after its slot, "manual+D" a manual run started D late.
// "ok+D", "fail+D" and "retry+D" are outcomes of a first attempt that
// started D after its slot, as the dispatcher sends them: with their start
// and fire times.
func ev(j string, n int, what string) *eventsv1.ExecutionEvent {
	e := &eventsv1.ExecutionEvent{
		ExecutionId: fmt.Sprintf("%s-%d", j, n), JobId: j, Namespace: "ns", JobDisplayName: "job " + j,
		Attempt: 1, NominalTime: timestamppb.New(slot(n)), Reason: what + " reason",
	}
	kind, late, _ := strings.Cut(what, "+")
	if late != "" && kind != "fire" && kind != "manual" {
		d, err := time.ParseDuration(late)
		if err != nil {
			panic(err)
		}
		e.FireTime = timestamppb.New(slot(n).Add(d))
		e.StartTime = e.FireTime
	}
	switch kind {
	case "ok":
		e.Kind = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED
	case "fail":
		e.Kind = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED
	case "retry":
		e.Kind, e.RetryScheduled = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, true
	case "dead":
		e.Kind, e.Attempt = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD, 3
	case "skip":
		e.Kind = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SKIPPED
	case "missed":
		e.Kind = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED
	case "fire", "manual":
		d, err := time.ParseDuration(late)
		if err != nil {
			panic(err)
		}
		e.Kind, e.FireTime = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, timestamppb.New(slot(n).Add(d))
		if kind == "manual" {
			e.TriggerKind = dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL
		}
	default:
		panic(what)
	}
	return e
}

var (
	failures3   = &rules.Rule{ID: "f3", Namespace: "ns", Kind: rules.ConsecutiveFailures, Count: 3}
	failures2sk = &rules.Rule{ID: "f2s", Namespace: "ns", Kind: rules.ConsecutiveFailures, Count: 2, CountSkipped: true}
	dead        = &rules.Rule{ID: "d", Namespace: "ns", Kind: rules.DeadLettered}
	missed10s   = &rules.Rule{ID: "m", Namespace: "ns", Kind: rules.MissedSchedule, Tolerance: 10 * time.Second}
	noSuccess   = &rules.Rule{ID: "n", Namespace: "ns", Kind: rules.NoSuccess, Within: time.Hour}
)

// decide runs a batch through the rules as the store does: Relevant, then
// Dedupe with every opening event fresh but those in recorded, then
// Decide. It returns the decision as lines "resolve RULE JOB: reason" and
// "open RULE JOB @SLOT: summary".
func decide(t *testing.T, set []*rules.Rule, batch []*eventsv1.ExecutionEvent, recorded []string, open map[rules.IncidentKey]*time.Time, streaks map[string]rules.Streak, manual map[rules.IncidentKey]rules.Manual) []string {
	t.Helper()
	events := rules.Relevant(batch, rules.NewSet(set))
	fresh := map[rules.EventKey]bool{}
	for _, e := range events {
		fresh[e.Key()] = true
	}
	for _, id := range recorded {
		for k := range fresh {
			if k.ExecutionID == id {
				delete(fresh, k)
			}
		}
	}
	events, _ = rules.Dedupe(events, fresh)
	d := rules.Decide(events, rules.State{Open: open, Streaks: streaks, Manual: manual})
	var out []string
	for _, r := range d.Resolve {
		out = append(out, fmt.Sprintf("resolve %s %s: %s", r.Key.Rule, r.Key.Job, r.Reason))
	}
	for _, o := range d.Open {
		n := int(o.Slot.Sub(t0) / time.Minute)
		out = append(out, fmt.Sprintf("open %s %s @%d: %s", o.Rule.ID, o.Ev.GetJobId(), n, o.Summary))
	}
	return out
}

func at(n int) *time.Time {
	s := slot(n)
	return &s
}

func TestDecide(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		rules    []*rules.Rule
		batch    []*eventsv1.ExecutionEvent
		recorded []string // execution ids whose opening events were counted before
		open     map[rules.IncidentKey]*time.Time
		streaks  map[string]rules.Streak
		manual   map[rules.IncidentKey]rules.Manual
		want     []string
	}{
		{
			name:    "failures below the count open nothing",
			rules:   []*rules.Rule{failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 1, "fail"), ev("a", 2, "fail")},
			streaks: map[string]rules.Streak{"a": {Failed: 2}},
		},
		{
			name:    "reaching the count opens on the latest failing slot",
			rules:   []*rules.Rule{failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 3, "fail"), ev("a", 1, "fail"), ev("a", 2, "fail")},
			streaks: map[string]rules.Streak{"a": {Failed: 3}},
			want:    []string{"open f3 a @3: 3 executions in a row failed"},
		},
		{
			name:    "a dead-lettered execution is a failure for the count too",
			rules:   []*rules.Rule{failures3, dead},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 5, "dead")},
			streaks: map[string]rules.Streak{"a": {Failed: 4}},
			want:    []string{"open d a @5: an execution was dead-lettered: dead reason", "open f3 a @5: 4 executions in a row failed"},
		},
		{
			name:  "a failure with a retry scheduled is not an outcome",
			rules: []*rules.Rule{failures3},
			batch: []*eventsv1.ExecutionEvent{ev("a", 1, "retry")},
		},
		{
			name:  "an incident still open is not opened again",
			rules: []*rules.Rule{failures3},
			batch: []*eventsv1.ExecutionEvent{ev("a", 9, "fail")},
			open:  map[rules.IncidentKey]*time.Time{{Rule: "f3", Job: "a"}: at(3)},
			// The streak went on from the incident's slot; nothing changes.
			streaks: map[string]rules.Streak{"a": {Failed: 9}},
		},
		{
			name:    "a success resolves and resets the count",
			rules:   []*rules.Rule{failures3, dead, noSuccess},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 7, "ok")},
			open:    map[rules.IncidentKey]*time.Time{{Rule: "f3", Job: "a"}: at(3), {Rule: "d", Job: "a"}: at(5), {Rule: "n", Job: "a"}: nil},
			streaks: map[string]rules.Streak{"a": {}},
			want:    []string{"resolve d a: the job succeeded", "resolve f3 a: the job succeeded", "resolve n a: the job succeeded"},
		},
		{
			name:  "a success older than the incident's slot does not resolve it",
			rules: []*rules.Rule{failures3},
			batch: []*eventsv1.ExecutionEvent{ev("a", 2, "ok")},
			open:  map[rules.IncidentKey]*time.Time{{Rule: "f3", Job: "a"}: at(3)},
		},
		{
			name:  "the batch's latest success decides",
			rules: []*rules.Rule{failures3},
			batch: []*eventsv1.ExecutionEvent{ev("a", 4, "ok"), ev("a", 2, "ok")},
			open:  map[rules.IncidentKey]*time.Time{{Rule: "f3", Job: "a"}: at(3)},
			want:  []string{"resolve f3 a: the job succeeded"},
		},
		{
			// fail 1-3 would have opened, ok 4 resets, fail 5-7 cross the
			// count again: the incident open from before resolves and one
			// new one opens on the latest failure.
			name:  "a streak crossing the count twice in one batch, an incident open before",
			rules: []*rules.Rule{failures3},
			batch: []*eventsv1.ExecutionEvent{
				ev("a", 1, "fail"), ev("a", 2, "fail"), ev("a", 3, "fail"), ev("a", 4, "ok"),
				ev("a", 5, "fail"), ev("a", 6, "fail"), ev("a", 7, "fail"),
			},
			open:    map[rules.IncidentKey]*time.Time{{Rule: "f3", Job: "a"}: at(0)},
			streaks: map[string]rules.Streak{"a": {Failed: 3}},
			want:    []string{"resolve f3 a: the job succeeded", "open f3 a @7: 3 executions in a row failed"},
		},
		{
			name:  "a streak crossing the count twice in one batch opens once",
			rules: []*rules.Rule{failures3},
			batch: []*eventsv1.ExecutionEvent{
				ev("a", 1, "fail"), ev("a", 2, "fail"), ev("a", 3, "fail"), ev("a", 4, "ok"),
				ev("a", 5, "fail"), ev("a", 6, "fail"), ev("a", 7, "fail"),
			},
			streaks: map[string]rules.Streak{"a": {Failed: 3}},
			want:    []string{"open f3 a @7: 3 executions in a row failed"},
		},
		{
			name:    "a batch that recovers last opens nothing",
			rules:   []*rules.Rule{failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 1, "fail"), ev("a", 2, "fail"), ev("a", 3, "fail"), ev("a", 4, "ok")},
			streaks: map[string]rules.Streak{"a": {}},
		},
		{
			name:    "skipped executions count for a rule that counts them",
			rules:   []*rules.Rule{failures2sk, failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 1, "fail"), ev("a", 2, "skip")},
			streaks: map[string]rules.Streak{"a": {Failed: 1, FailedOrSkipped: 2}},
			want:    []string{"open f2s a @2: 2 executions in a row failed or were skipped"},
		},
		{
			name:  "skipped executions mean nothing to a rule that does not count them",
			rules: []*rules.Rule{failures3},
			batch: []*eventsv1.ExecutionEvent{ev("a", 1, "skip"), ev("a", 2, "skip"), ev("a", 3, "skip")},
			// Relevant drops them: no streak is asked for, none opens.
		},
		{
			// A rule without count_skipped opens on its own count when a
			// skipped slot is the job's latest, as the store always did.
			name:    "a skipped slot after failures, both kinds of rule",
			rules:   []*rules.Rule{failures2sk, failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 4, "skip")},
			streaks: map[string]rules.Streak{"a": {Failed: 3, FailedOrSkipped: 4}},
			want:    []string{"open f2s a @4: 4 executions in a row failed or were skipped", "open f3 a @4: 3 executions in a row failed"},
		},
		{
			name:    "a success resets a streak of skipped executions",
			rules:   []*rules.Rule{failures2sk},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 1, "skip"), ev("a", 2, "skip"), ev("a", 3, "ok")},
			open:    map[rules.IncidentKey]*time.Time{{Rule: "f2s", Job: "a"}: at(0)},
			streaks: map[string]rules.Streak{"a": {}},
			want:    []string{"resolve f2s a: the job succeeded"},
		},
		{
			name:    "dead letters of one job open one incident, on the first",
			rules:   []*rules.Rule{dead},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 2, "dead"), ev("a", 1, "dead")},
			streaks: map[string]rules.Streak{"a": {Failed: 2}},
			want:    []string{"open d a @2: an execution was dead-lettered: dead reason"},
		},
		{
			name:  "a missed slot opens",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 1, "missed")},
			want:  []string{"open m a @1: a scheduled slot was missed: missed reason"},
		},
		{
			name:  "a slot fired later than the tolerance opens",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 1, "fire+12.3456s")},
			want:  []string{"open m a @1: a scheduled slot fired 12.346s late (tolerance 10s)"},
		},
		{
			name:  "a slot fired within the tolerance resolves",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 2, "fire+10s")},
			open:  map[rules.IncidentKey]*time.Time{{Rule: "m", Job: "a"}: at(1)},
			want:  []string{"resolve m a: a slot fired on time"},
		},
		{
			name:  "an on-time slot before the incident's does not resolve it",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 1, "fire+1s")},
			open:  map[rules.IncidentKey]*time.Time{{Rule: "m", Job: "a"}: at(2)},
		},
		{
			name:  "the batch's latest slot decides: missed then on time resolves",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 2, "fire+1s"), ev("a", 1, "missed")},
			open:  map[rules.IncidentKey]*time.Time{{Rule: "m", Job: "a"}: at(0)},
			want:  []string{"resolve m a: a slot fired on time"},
		},
		{
			name:  "the batch's latest slot decides: on time then missed opens",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 1, "fire+1s"), ev("a", 2, "missed")},
			want:  []string{"open m a @2: a scheduled slot was missed: missed reason"},
		},
		{
			name:  "an outcome alone tells a slot fired late",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 1, "ok+12s")},
			want:  []string{"open m a @1: a scheduled slot fired 12s late (tolerance 10s)"},
		},
		{
			name:  "an outcome alone tells a slot fired on time",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 2, "retry+1s")},
			open:  map[rules.IncidentKey]*time.Time{{Rule: "m", Job: "a"}: at(1)},
			want:  []string{"resolve m a: a slot fired on time"},
		},
		{
			name:  "a late slot's STARTED and outcome open once",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 1, "fire+12s"), ev("a", 1, "ok+12s")},
			want:  []string{"open m a @1: a scheduled slot fired 12s late (tolerance 10s)"},
		},
		{
			name:     "a late slot's outcome after its STARTED was counted opens nothing",
			rules:    []*rules.Rule{missed10s},
			batch:    []*eventsv1.ExecutionEvent{ev("a", 1, "fail+12s")},
			recorded: []string{"a-1"},
		},
		{
			name:    "a first attempt's failure tells both: the slot fired late and failed",
			rules:   []*rules.Rule{missed10s, failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 3, "fail+12s")},
			streaks: map[string]rules.Streak{"a": {Failed: 3}},
			want: []string{
				"open m a @3: a scheduled slot fired 12s late (tolerance 10s)",
				"open f3 a @3: 3 executions in a row failed",
			},
		},
		{
			name:  "a manual run's lateness says nothing about the schedule",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 1, "manual+1m")},
			open:  map[rules.IncidentKey]*time.Time{{Rule: "m", Job: "a"}: at(0)},
		},
		{
			name:  "a success does not resolve a missed-schedule incident",
			rules: []*rules.Rule{missed10s},
			batch: []*eventsv1.ExecutionEvent{ev("a", 5, "ok")},
			open:  map[rules.IncidentKey]*time.Time{{Rule: "m", Job: "a"}: at(1)},
		},
		{
			name:     "a redelivered failure opens nothing",
			rules:    []*rules.Rule{failures3},
			batch:    []*eventsv1.ExecutionEvent{ev("a", 3, "fail")},
			recorded: []string{"a-3"},
			streaks:  map[string]rules.Streak{"a": {Failed: 3}},
		},
		{
			name:     "a redelivered dead letter or missed slot opens nothing",
			rules:    []*rules.Rule{dead, missed10s},
			batch:    []*eventsv1.ExecutionEvent{ev("a", 3, "dead"), ev("b", 3, "missed")},
			recorded: []string{"a-3", "b-3"},
		},
		{
			name:     "a redelivered success still resolves",
			rules:    []*rules.Rule{failures3},
			batch:    []*eventsv1.ExecutionEvent{ev("a", 4, "ok")},
			recorded: []string{"a-4"},
			open:     map[rules.IncidentKey]*time.Time{{Rule: "f3", Job: "a"}: at(3)},
			want:     []string{"resolve f3 a: the job succeeded"},
		},
		{
			name:    "jobs are decided apart",
			rules:   []*rules.Rule{failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("b", 3, "fail"), ev("a", 3, "ok"), ev("c", 3, "fail")},
			open:    map[rules.IncidentKey]*time.Time{{Rule: "f3", Job: "a"}: at(1), {Rule: "f3", Job: "c"}: at(1)},
			streaks: map[string]rules.Streak{"b": {Failed: 3}, "c": {Failed: 3}},
			want:    []string{"resolve f3 a: the job succeeded", "open f3 b @3: 3 executions in a row failed"},
		},
		// Resolved by hand: the slots at or before the resolution are
		// dismissed, and a failure streak counts again from it.
		{
			name:    "after a manual resolution a streak below the count since opens nothing",
			rules:   []*rules.Rule{failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 5, "fail")},
			streaks: map[string]rules.Streak{"a": {Failed: 5}},
			manual:  map[rules.IncidentKey]rules.Manual{{Rule: "f3", Job: "a"}: {At: slot(3), Streak: 2}},
		},
		{
			name:    "after a manual resolution the count reached again opens, saying so",
			rules:   []*rules.Rule{failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 6, "fail")},
			streaks: map[string]rules.Streak{"a": {Failed: 6}},
			manual:  map[rules.IncidentKey]rules.Manual{{Rule: "f3", Job: "a"}: {At: slot(3), Streak: 3}},
			want:    []string{"open f3 a @6: 3 executions in a row failed since the last incident was resolved by hand"},
		},
		{
			name:    "after a manual resolution skipped executions count again when the rule counts them",
			rules:   []*rules.Rule{failures2sk},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 5, "skip")},
			streaks: map[string]rules.Streak{"a": {Failed: 1, FailedOrSkipped: 4}},
			manual:  map[rules.IncidentKey]rules.Manual{{Rule: "f2s", Job: "a"}: {At: slot(3), Streak: 2}},
			want:    []string{"open f2s a @5: 2 executions in a row failed or were skipped since the last incident was resolved by hand"},
		},
		{
			name:    "a streak whose latest slot is at or before the manual resolution opens nothing",
			rules:   []*rules.Rule{failures3},
			batch:   []*eventsv1.ExecutionEvent{ev("a", 3, "fail")},
			streaks: map[string]rules.Streak{"a": {Failed: 5}},
			manual:  map[rules.IncidentKey]rules.Manual{{Rule: "f3", Job: "a"}: {At: slot(3), Streak: 3}},
		},
		{
			name:   "a dead letter or missed slot at or before the manual resolution opens nothing; one after it opens",
			rules:  []*rules.Rule{dead, missed10s},
			batch:  []*eventsv1.ExecutionEvent{ev("a", 3, "dead"), ev("b", 3, "missed"), ev("c", 4, "dead")},
			manual: map[rules.IncidentKey]rules.Manual{{Rule: "d", Job: "a"}: {At: slot(3)}, {Rule: "m", Job: "b"}: {At: slot(3).Add(time.Second)}, {Rule: "d", Job: "c"}: {At: slot(3)}},
			want:   []string{"open d c @4: an execution was dead-lettered: dead reason"},
		},
		{
			name:   "the manual resolution of another rule or job changes nothing",
			rules:  []*rules.Rule{dead, missed10s},
			batch:  []*eventsv1.ExecutionEvent{ev("a", 3, "dead")},
			manual: map[rules.IncidentKey]rules.Manual{{Rule: "m", Job: "a"}: {At: slot(9)}, {Rule: "d", Job: "b"}: {At: slot(9)}},
			want:   []string{"open d a @3: an execution was dead-lettered: dead reason"},
		},
		{
			name:   "the key's first opening of the batch is the one judged: a later one does not stand in for it",
			rules:  []*rules.Rule{dead},
			batch:  []*eventsv1.ExecutionEvent{ev("a", 2, "dead"), ev("a", 5, "dead")},
			manual: map[rules.IncidentKey]rules.Manual{{Rule: "d", Job: "a"}: {At: slot(3)}},
		},
		{
			name:   "a manual resolution drops no resolve",
			rules:  []*rules.Rule{failures3},
			batch:  []*eventsv1.ExecutionEvent{ev("a", 4, "ok")},
			open:   map[rules.IncidentKey]*time.Time{{Rule: "f3", Job: "a"}: at(3)},
			manual: map[rules.IncidentKey]rules.Manual{{Rule: "f3", Job: "a"}: {At: slot(9)}},
			want:   []string{"resolve f3 a: the job succeeded"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, decide(t, tc.rules, tc.batch, tc.recorded, tc.open, tc.streaks, tc.manual))
		})
	}
}

func TestDismissed(t *testing.T) {
	t.Parallel()
	cut := slot(3)
	for _, tc := range []struct {
		name string
		slot time.Time
		cut  *time.Time
		want bool
	}{
		{"never resolved by hand", slot(1), nil, false},
		{"a slot before the resolution", slot(2), &cut, true},
		{"the slot of the resolution's time", slot(3), &cut, true},
		{"a slot after it", slot(3).Add(time.Nanosecond), &cut, false},
	} {
		require.Equal(t, tc.want, rules.Dismissed(tc.slot, tc.cut), tc.name)
	}
}

func TestDedupe(t *testing.T) {
	t.Parallel()
	set := rules.NewSet([]*rules.Rule{failures3, missed10s})
	batch := []*eventsv1.ExecutionEvent{
		ev("a", 1, "fail"), ev("a", 1, "fail"), // a repeat within the batch
		ev("a", 2, "fail"),                 // recorded before
		ev("a", 3, "ok"), ev("a", 3, "ok"), // resolving events are never dropped
		ev("a", 4, "fire+1s"), // on time: cannot open, not recorded
	}
	events := rules.Relevant(batch, set)
	require.Len(t, events, 6)
	fresh := map[rules.EventKey]bool{events[0].Key(): true}
	kept, dups := rules.Dedupe(events, fresh)
	require.Equal(t, 2, dups)
	var ids []string
	for _, e := range kept {
		ids = append(ids, e.Ev.GetExecutionId())
	}
	require.Equal(t, []string{"a-1", "a-3", "a-3", "a-4"}, ids)
}

func TestStreakQuery(t *testing.T) {
	t.Parallel()
	set := rules.NewSet([]*rules.Rule{failures3, dead, {ID: "other", Namespace: "other", Kind: rules.ConsecutiveFailures, Count: 1, CountSkipped: true}})
	events := rules.Relevant([]*eventsv1.ExecutionEvent{ev("c", 1, "dead"), ev("b", 1, "ok"), ev("a", 1, "fail"), ev("c", 2, "fail")}, set)
	jobs, limit, withSkipped := rules.StreakQuery(events)
	require.Equal(t, []string{"a", "c"}, jobs, "jobs with a failure, sorted, once")
	require.Equal(t, 3, limit)
	require.False(t, withSkipped, "no rule of the batch counts skipped executions")

	events = rules.Relevant([]*eventsv1.ExecutionEvent{ev("a", 1, "skip")}, rules.NewSet([]*rules.Rule{failures2sk}))
	jobs, limit, withSkipped = rules.StreakQuery(events)
	require.Equal(t, []string{"a"}, jobs)
	require.Equal(t, 2, limit)
	require.True(t, withSkipped)
}

func TestRelevant(t *testing.T) {
	t.Parallel()
	set := rules.NewSet([]*rules.Rule{missed10s, {ID: "x", Namespace: "ns", Kind: rules.ConsecutiveFailures, Count: 1, JobIDs: map[string]struct{}{"a": {}}}})
	events := rules.Relevant([]*eventsv1.ExecutionEvent{
		ev("a", 1, "fire+1s"), ev("a", 2, "fire+11s"), ev("a", 3, "missed"), ev("a", 4, "skip"), ev("a", 5, "retry"), ev("a", 6, "manual+1m"),
	}, set)
	var got []string
	for _, e := range events {
		got = append(got, fmt.Sprintf("%s opens=%t", e.Ev.GetExecutionId(), e.Opens))
	}
	require.Equal(t, []string{"a-1 opens=false", "a-2 opens=true", "a-3 opens=true"}, got)
	other := rules.NewSet([]*rules.Rule{{ID: "o", Namespace: "other", Kind: rules.ConsecutiveFailures, Count: 1}})
	require.Empty(t, rules.Relevant([]*eventsv1.ExecutionEvent{ev("z", 1, "fail")}, other), "a rule of another namespace does not watch the job")
}

// TestFiredByTheOutcome: the outcome of a slot's first attempt tells that
// the slot fired, with the key of the STARTED it stands for, when a
// missed-schedule rule watches the job; an outcome without a start time
// (no attempt was made), a retry's and a manual run's do not.
func TestFiredByTheOutcome(t *testing.T) {
	t.Parallel()
	set := rules.NewSet([]*rules.Rule{missed10s, failures3})
	late := ev("a", 1, "fail+11s")
	notAttempted := ev("a", 2, "dead")
	notAttempted.Attempt = 1
	retry := ev("a", 3, "ok+11s")
	retry.Attempt = 2
	manual := ev("a", 4, "ok+11s")
	manual.TriggerKind = dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL
	events := rules.Relevant([]*eventsv1.ExecutionEvent{late, notAttempted, retry, manual}, set)
	var got []string
	for _, e := range events {
		got = append(got, fmt.Sprintf("%s outcome=%d opens=%t key-kind=%d", e.Ev.GetExecutionId(), e.Outcome, e.Opens, e.Key().Kind))
	}
	require.Equal(t, []string{
		fmt.Sprintf("a-1 outcome=%d opens=true key-kind=%d", rules.OutcomeFired, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED),
		fmt.Sprintf("a-1 outcome=%d opens=true key-kind=%d", rules.OutcomeFailure, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED),
		fmt.Sprintf("a-2 outcome=%d opens=true key-kind=%d", rules.OutcomeDead, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD),
		fmt.Sprintf("a-3 outcome=%d opens=false key-kind=%d", rules.OutcomeSuccess, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED),
		fmt.Sprintf("a-4 outcome=%d opens=false key-kind=%d", rules.OutcomeSuccess, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED),
	}, got)
	require.Len(t, rules.Relevant([]*eventsv1.ExecutionEvent{late}, rules.NewSet([]*rules.Rule{failures3})), 1,
		"without a missed-schedule rule the outcome is only an outcome")
}
