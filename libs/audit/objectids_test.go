package audit

import (
	"testing"

	"github.com/stretchr/testify/require"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
)

func TestObjectIDs(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		req, res any
		want     []string
	}{
		"an id field": {&registryv1.DeleteJobRequest{Id: "J", Etag: "e"}, nil, []string{"J"}},
		"a job_id":    {&triggerv1.BackfillJobRequest{JobId: "J"}, &triggerv1.BackfillJobResponse{}, []string{"J"}},
		"the object updated": {
			&registryv1.UpdateJobRequest{Job: &registryv1.Job{Id: "J", DisplayName: "x"}},
			&registryv1.UpdateJobResponse{Job: &registryv1.Job{Id: "J"}}, []string{"J"},
		},
		"an override names no object": {
			&dispatcherv1.RedriveDeadLetterRequest{Id: "D", TargetOverride: &registryv1.Target{}},
			&dispatcherv1.RedriveDeadLetterResponse{ExecutionId: "E"}, []string{"D"},
		},
		"a create: the response's": {
			&alertingv1.CreateRuleRequest{Rule: &alertingv1.Rule{DisplayName: "r", ChannelIds: []string{"C"}}},
			&alertingv1.CreateRuleResponse{Rule: &alertingv1.Rule{Id: "R", ChannelIds: []string{"C"}}}, []string{"R"},
		},
		"a request id is not an object": {
			&registryv1.BatchCreateJobsRequest{Requests: []*registryv1.CreateJobRequest{{RequestId: "q1"}, {RequestId: "q2"}}},
			&registryv1.BatchCreateJobsResponse{Jobs: []*registryv1.Job{{Id: "J1"}, {Id: "J2"}}}, []string{"J1", "J2"},
		},
		"a refused create": {&registryv1.CreateJobRequest{RequestId: "q"}, nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, objectIDs(tc.req, tc.res))
		})
	}
}
