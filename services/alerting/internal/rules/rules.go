// Package rules is the alerting domain: a rule compiled from its protobuf
// definition, the test of whether it watches a job, the set of every rule
// the evaluator holds in memory, and the decision on a batch of execution
// events (Decide: which incidents open, which resolve). It imports no
// transport or database package: the store loads what a decision needs
// and saves what it decides.
package rules

import (
	"time"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
)

// Kind is a rule's condition.
type Kind int

// The conditions a rule can watch for; the values are the incident kinds of
// the API (alertingv1.IncidentKind), which the database stores.
const (
	ConsecutiveFailures Kind = Kind(alertingv1.IncidentKind_INCIDENT_KIND_CONSECUTIVE_FAILURES)
	MissedSchedule      Kind = Kind(alertingv1.IncidentKind_INCIDENT_KIND_MISSED_SCHEDULE)
	DeadLettered        Kind = Kind(alertingv1.IncidentKind_INCIDENT_KIND_DEAD_LETTERED)
	NoSuccess           Kind = Kind(alertingv1.IncidentKind_INCIDENT_KIND_NO_SUCCESS)
)

// Rule is a compiled rule.
type Rule struct {
	ID        string
	Namespace string
	Kind      Kind
	// JobIDs, when non-empty, lists the only jobs the rule watches.
	JobIDs map[string]struct{}
	// Labels must all equal the job's.
	Labels map[string]string
	// Count is the ConsecutiveFailures threshold.
	Count int
	// CountSkipped: a ConsecutiveFailures rule counts the executions an
	// overlap policy skipped as failures.
	CountSkipped bool
	// Tolerance is how late a MissedSchedule slot may fire.
	Tolerance time.Duration
	// Within is the NoSuccess window.
	Within   time.Duration
	Disabled bool
	// Channels are the ids of the channels to notify.
	Channels   []string
	CreateTime time.Time
}

// Compile builds a Rule from its stored definition. A definition that is
// not one of the known conditions yields a rule of Kind 0 that never
// matches (a newer replica may have written it).
func Compile(namespace, id string, p *alertingv1.Rule, created time.Time) *Rule {
	r := &Rule{
		ID: id, Namespace: namespace, Labels: p.GetSelector().GetLabels(),
		Disabled: p.GetDisabled(), Channels: p.GetChannelIds(), CreateTime: created,
	}
	if ids := p.GetSelector().GetJobIds(); len(ids) > 0 {
		r.JobIDs = make(map[string]struct{}, len(ids))
		for _, id := range ids {
			r.JobIDs[id] = struct{}{}
		}
	}
	switch c := p.GetCondition().(type) {
	case *alertingv1.Rule_ConsecutiveFailures:
		r.Kind, r.Count = ConsecutiveFailures, int(c.ConsecutiveFailures.GetCount())
		r.CountSkipped = c.ConsecutiveFailures.GetCountSkipped()
	case *alertingv1.Rule_MissedSchedule:
		r.Kind, r.Tolerance = MissedSchedule, c.MissedSchedule.GetTolerance().AsDuration()
	case *alertingv1.Rule_DeadLettered:
		r.Kind = DeadLettered
	case *alertingv1.Rule_NoSuccessWithin:
		r.Kind, r.Within = NoSuccess, c.NoSuccessWithin.GetDuration().AsDuration()
	}
	return r
}

// Matches reports whether the rule watches the job: it is enabled, the job
// is listed (when the rule lists jobs) and carries every selector label.
func (r *Rule) Matches(jobID string, labels map[string]string) bool {
	if r.Disabled || r.Kind == 0 {
		return false
	}
	if r.JobIDs != nil {
		if _, ok := r.JobIDs[jobID]; !ok {
			return false
		}
	}
	for k, v := range r.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Set is every rule, by namespace. It is immutable once built, so the
// evaluator swaps a new one in without locking readers.
type Set struct {
	byNamespace map[string][]*Rule
	byID        map[string]*Rule
	// MinTolerance is the smallest MissedSchedule tolerance of any enabled
	// rule, 0 when there is none.
	MinTolerance time.Duration
}

// NewSet indexes rules.
func NewSet(rules []*Rule) *Set {
	s := &Set{byNamespace: map[string][]*Rule{}, byID: make(map[string]*Rule, len(rules))}
	for _, r := range rules {
		s.byNamespace[r.Namespace] = append(s.byNamespace[r.Namespace], r)
		s.byID[r.ID] = r
		if r.Kind == MissedSchedule && !r.Disabled && (s.MinTolerance == 0 || r.Tolerance < s.MinTolerance) {
			s.MinTolerance = r.Tolerance
		}
	}
	return s
}

// Matching returns the rules of the namespace that watch the job; nil when
// none does.
func (s *Set) Matching(namespace, jobID string, labels map[string]string) []*Rule {
	var out []*Rule
	for _, r := range s.byNamespace[namespace] {
		if r.Matches(jobID, labels) {
			out = append(out, r)
		}
	}
	return out
}

// Get returns the rule with the id, or nil.
func (s *Set) Get(id string) *Rule { return s.byID[id] }

// Len is the number of rules.
func (s *Set) Len() int { return len(s.byID) }

// All returns every rule (in no particular order).
func (s *Set) All() []*Rule {
	out := make([]*Rule, 0, len(s.byID))
	for _, r := range s.byID {
		out = append(out, r)
	}
	return out
}
