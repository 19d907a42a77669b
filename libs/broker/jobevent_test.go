package broker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
)

// TestJobRoutingKey: every kind has its key, an unknown kind one that no
// consumer mistakes for another.
func TestJobRoutingKey(t *testing.T) {
	t.Parallel()
	for kind, want := range map[eventsv1.JobEventKind]string{
		eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED:       "job.created",
		eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED:       "job.updated",
		eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED:       "job.deleted",
		eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED:        "job.paused",
		eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED:       "job.resumed",
		eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED: "job.run_requested",
		eventsv1.JobEventKind_JOB_EVENT_KIND_UNSPECIFIED:   "job.unknown",
		eventsv1.JobEventKind(99):                          "job.unknown",
	} {
		require.Equal(t, want, broker.JobRoutingKey(kind), kind.String())
	}
}
