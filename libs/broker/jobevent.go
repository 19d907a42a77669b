package broker

import eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"

// JobEventName is a job event kind's name in the `cronmesh.jobs` routing
// keys and in metric labels: "created", "updated", "deleted", "paused",
// "resumed", "run_requested", or "unknown".
func JobEventName(kind eventsv1.JobEventKind) string {
	switch kind {
	case eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED:
		return "created"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED:
		return "updated"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED:
		return "deleted"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED:
		return "paused"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED:
		return "resumed"
	case eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED:
		return "run_requested"
	default:
		return "unknown"
	}
}

// JobRoutingKey is a job event's routing key on `cronmesh.jobs`: "job."
// and its kind's JobEventName ("job.created", ...).
func JobRoutingKey(kind eventsv1.JobEventKind) string { return "job." + JobEventName(kind) }
