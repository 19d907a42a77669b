package slotinfo

import (
	"strconv"
	"strings"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
)

// The slot headers, lower case as the Standard Webhooks headers are
// documented (HTTP sends them canonicalized, "Cronmesh-Nominal-Time"; an
// AMQP header table is case-sensitive and carries them exactly so). Every
// value is a string, on AMQP too.
const (
	// HeaderNominalTime is the slot's nominal time: the schedule's time, a
	// backfilled slot's time, or a manual run's request time. RFC 3339 in
	// UTC with as many fractional digits as needed (none for a cron slot):
	// exactly the string the execution id is derived from.
	HeaderNominalTime = "cronmesh-nominal-time"
	// HeaderFireTime is when the trigger committed the slot (later than the
	// nominal time for a catch-up or a backfill), in the same format. Absent
	// when the request carries none.
	HeaderFireTime = "cronmesh-fire-time"
	// HeaderAttempt is the attempt number, 1 for the first; a retry
	// carries 2 and up, a redrive continues after the dead letter's last.
	HeaderAttempt = "cronmesh-attempt"
	// HeaderJobID is the job's id.
	HeaderJobID = "cronmesh-job-id"
	// HeaderExecutionID is the execution id, also sent as webhook-id and
	// Idempotency-Key (and, on AMQP, as the message-id).
	HeaderExecutionID = "cronmesh-execution-id"
	// HeaderTriggerKind says why the slot fired: scheduled, manual,
	// backfill or catch-up.
	HeaderTriggerKind = "cronmesh-trigger-kind"
)

// ReservedHeaderPrefix starts every header name cronmesh keeps for itself:
// a job may set none of them (any case), so that a target can trust that a
// cronmesh-* header came from cronmesh and new ones can be added later
// without breaking a job.
const ReservedHeaderPrefix = "cronmesh-"

// IsReservedHeader reports whether name (any case) starts with
// ReservedHeaderPrefix.
func IsReservedHeader(name string) bool {
	return len(name) >= len(ReservedHeaderPrefix) && strings.EqualFold(name[:len(ReservedHeaderPrefix)], ReservedHeaderPrefix)
}

// Slot is what a target learns about the slot of one attempt.
type Slot struct {
	NominalTime time.Time
	// FireTime is zero when unknown.
	FireTime    time.Time
	Attempt     int32
	JobID       string
	ExecutionID string
	Namespace   string
	// TriggerKind is the kind's name as the target sees it: "scheduled",
	// "manual", "backfill", "catch-up".
	TriggerKind string
}

// FromRequest reads the slot of a dispatch request. An attempt of 0 (a
// request from before attempts were numbered) reads as 1.
func FromRequest(req *dispatchv1.DispatchRequest) Slot {
	s := Slot{
		NominalTime: req.GetNominalTime().AsTime(),
		Attempt:     max(req.GetAttempt(), 1),
		JobID:       req.GetJobId(),
		ExecutionID: req.GetExecutionId(),
		Namespace:   req.GetNamespace(),
		TriggerKind: TriggerKindName(req.GetTriggerKind()),
	}
	if req.GetFireTime() != nil {
		s.FireTime = req.GetFireTime().AsTime()
	}
	return s
}

// TriggerKindName is the name of k a target sees: the enum value's name
// without its prefix, lower case, '_' as '-' (TRIGGER_KIND_CATCH_UP is
// "catch-up"; an unset kind is "unspecified"). Deriving it keeps a kind
// added later named by the same rule.
func TriggerKindName(k dispatchv1.TriggerKind) string {
	name := strings.TrimPrefix(k.String(), "TRIGGER_KIND_")
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

// FormatTime formats t as the slot headers and templates carry it: RFC 3339
// in UTC with the fraction trimmed of trailing zeros (time.RFC3339Nano), the
// form execid derives the execution id from, so that a receiver can check
// the nominal time against the signed webhook-id.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Header is one slot header.
type Header struct{ Name, Value string }

// Headers returns the slot headers of s in a fixed order. The fire time is
// left out when unknown.
func (s Slot) Headers() []Header {
	h := []Header{
		{HeaderNominalTime, FormatTime(s.NominalTime)},
		{HeaderFireTime, ""},
		{HeaderAttempt, itoa(s.Attempt)},
		{HeaderJobID, s.JobID},
		{HeaderExecutionID, s.ExecutionID},
		{HeaderTriggerKind, s.TriggerKind},
	}
	if s.FireTime.IsZero() {
		return append(h[:1], h[2:]...)
	}
	h[1].Value = FormatTime(s.FireTime)
	return h
}

func itoa(n int32) string { return strconv.FormatInt(int64(n), 10) }
