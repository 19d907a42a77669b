package rules_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
)

func TestMatches(t *testing.T) {
	t.Parallel()
	cond := &alertingv1.Rule_DeadLettered{DeadLettered: &alertingv1.DeadLettered{}}
	for _, tc := range []struct {
		name     string
		selector *alertingv1.JobSelector
		disabled bool
		job      string
		labels   map[string]string
		want     bool
	}{
		{"empty selector matches every job", nil, false, "a", nil, true},
		{"listed job", &alertingv1.JobSelector{JobIds: []string{"a", "b"}}, false, "b", nil, true},
		{"unlisted job", &alertingv1.JobSelector{JobIds: []string{"a"}}, false, "c", nil, false},
		{"all labels equal", &alertingv1.JobSelector{Labels: map[string]string{"team": "ops"}}, false, "a", map[string]string{"team": "ops", "x": "y"}, true},
		{"label differs", &alertingv1.JobSelector{Labels: map[string]string{"team": "ops"}}, false, "a", map[string]string{"team": "web"}, false},
		{"label missing", &alertingv1.JobSelector{Labels: map[string]string{"team": ""}}, false, "a", nil, false},
		{"ids and labels both", &alertingv1.JobSelector{JobIds: []string{"a"}, Labels: map[string]string{"team": "ops"}}, false, "a", map[string]string{"team": "web"}, false},
		{"disabled", nil, true, "a", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rules.Compile("ns", "r1", &alertingv1.Rule{Selector: tc.selector, Condition: cond, Disabled: tc.disabled}, time.Time{})
			require.Equal(t, tc.want, r.Matches(tc.job, tc.labels))
		})
	}
}

func TestSetMinToleranceAndNamespaces(t *testing.T) {
	t.Parallel()
	missed := func(d time.Duration, disabled bool) *alertingv1.Rule {
		return &alertingv1.Rule{Disabled: disabled, Condition: &alertingv1.Rule_MissedSchedule{MissedSchedule: &alertingv1.MissedSchedule{Tolerance: durationpb.New(d)}}}
	}
	set := rules.NewSet([]*rules.Rule{
		rules.Compile("a", "1", missed(time.Minute, false), time.Time{}),
		rules.Compile("a", "2", missed(5*time.Second, true), time.Time{}),
		rules.Compile("b", "3", missed(20*time.Second, false), time.Time{}),
	})
	require.Equal(t, 20*time.Second, set.MinTolerance, "disabled rules do not count")
	require.Len(t, set.Matching("a", "job", nil), 1)
	require.Len(t, set.Matching("c", "job", nil), 0)
	require.Equal(t, rules.MissedSchedule, set.Get("3").Kind)
	require.Zero(t, rules.NewSet(nil).MinTolerance)
}
