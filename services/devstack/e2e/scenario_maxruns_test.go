package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
)

// limitedRuns: a job firing every second with max_runs 3 is delivered
// exactly three times, for three consecutive slots; ListSlots then says it
// completed, and the missed-schedule watchdog, watching the job with a 2 s
// tolerance, does not report the slots it no longer fires. Raising the
// limit resumes it.
func (s *scenario) limitedRuns(t *testing.T) {
	ctx := t.Context()
	const label = "limited-runs"
	hook := newRecorder(t, http.StatusNoContent)
	channel, err := s.alerts.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: &alertingv1.Channel{
		DisplayName: "scenario limited runs",
		Kind:        &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: hook.URL + "/alerts", SigningSecret: newSigningSecret(t)}},
	}}))
	require.NoError(t, err)
	_, err = s.alerts.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: &alertingv1.Rule{
		DisplayName: "scenario: limited job missing its schedule",
		Selector:    &alertingv1.JobSelector{Labels: map[string]string{"scenario": label}},
		Condition:   &alertingv1.Rule_MissedSchedule{MissedSchedule: &alertingv1.MissedSchedule{Tolerance: durationpb.New(2 * time.Second)}},
		ChannelIds:  []string{channel.Msg.GetChannel().GetId()},
	}}))
	require.NoError(t, err)

	target := newRecorder(t, http.StatusNoContent)
	created, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "scenario limited runs",
		Labels:      map[string]string{"scenario": label},
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * * * * *"}},
		Target:      &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: target.URL + "/limited"}}},
		MaxRuns:     3,
	}}))
	require.NoError(t, err)
	jobID := created.Msg.GetJob().GetId()
	require.EqualValues(t, 3, created.Msg.GetJob().GetMaxRuns())

	var page *triggerv1.ListSlotsResponse
	waitFor(t, 60*time.Second, "the trigger completes the job", func() bool {
		resp, err := s.trigger.ListSlots(ctx, connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: jobID}))
		if err != nil {
			return false
		}
		page = resp.Msg
		return page.GetCompleted()
	})
	require.EqualValues(t, 3, page.GetRunsFired())
	require.EqualValues(t, 3, page.GetMaxRuns())
	require.Len(t, page.GetSlots(), 3, "three slots in the ledger, none after")
	for i, sl := range page.GetSlots() {
		require.Equal(t, triggerv1.SlotState_SLOT_STATE_FIRED, sl.GetState())
		require.Equal(t, dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, sl.GetTriggerKind())
		if i > 0 {
			gap := page.GetSlots()[i-1].GetNominalTime().AsTime().Sub(sl.GetNominalTime().AsTime())
			require.Equal(t, time.Second, gap, "consecutive slots")
		}
	}
	waitFor(t, 30*time.Second, "three deliveries", func() bool { return len(target.All()) >= 3 })

	// Long enough for a fourth slot to have fired and been delivered, for
	// the alerting rules to have been reloaded and for the watchdog to have
	// looked at the slot after the last run, 2 s past its tolerance.
	time.Sleep(10 * time.Second)
	require.Len(t, target.All(), 3, "a completed job fires nothing more")
	incidents, err := s.alerts.ListIncidents(ctx, connect.NewRequest(&alertingv1.ListIncidentsRequest{JobId: jobID}))
	require.NoError(t, err)
	// A run whose execution event reaches alerting later than the 2 s
	// tolerance (a loaded machine) is reported and resolved when the event
	// comes: that is the watchdog at work. What must not be reported is a
	// slot after the last run.
	lastRun := page.GetSlots()[0].GetNominalTime().AsTime()
	for _, inc := range incidents.Msg.GetIncidents() {
		require.False(t, inc.GetSlotTime().AsTime().After(lastRun),
			"a completed job is not missing its schedule: %s", inc.GetSummary())
		require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_RESOLVED, inc.GetState(),
			"a run reported late is resolved once its execution is seen: %s", inc.GetSummary())
	}
	seen := map[string]bool{}
	for _, d := range target.All() {
		require.False(t, seen[d.ID()], "each run delivered once")
		seen[d.ID()] = true
	}

	// Raising the limit resumes the job from its next slot.
	_, err = s.jobs.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
		Job: &registryv1.Job{Id: jobID, MaxRuns: 4}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_runs"}},
	}))
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the raised limit fires one more run", func() bool {
		resp, err := s.trigger.ListSlots(ctx, connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: jobID}))
		return err == nil && resp.Msg.GetCompleted() && resp.Msg.GetRunsFired() == 4
	})
	waitFor(t, 30*time.Second, "the fourth delivery", func() bool { return len(target.All()) == 4 })
}
