package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
	"github.com/cronmesh/cronmesh/libs/testkit/smtptest"
	"github.com/cronmesh/cronmesh/libs/webhooksign"
)

const scenarioKey = "scenario-key-0123456789abcdef"

// scenario is what every scenario works with: one mesh and a Go client of
// each public API, all authenticated as the "scenarios" namespace.
type scenario struct {
	mesh     *meshrun.Mesh
	jobs     registryv1connect.JobServiceClient
	dispatch dispatcherv1connect.DispatchServiceClient
	history  historyv1connect.HistoryServiceClient
	alerts   alertingv1connect.AlertServiceClient
	trigger  triggerv1connect.TriggerServiceClient
	keys     registryv1connect.KeyServiceClient
}

// newClients returns a scenario on mesh with a client of each public API
// authenticated with key.
func newClients(mesh *meshrun.Mesh, key string) *scenario {
	c := meshtest.NewClients(mesh, key)
	return &scenario{mesh: mesh, jobs: c.Jobs, keys: c.Keys, dispatch: c.Dispatch, history: c.History, alerts: c.Alerts, trigger: c.Trigger}
}

// TestScenarios runs the end-to-end scenarios against one mesh of
// real processes, each scenario with its own jobs and targets, in parallel.
// Timing is asserted only from below (a retry no earlier than its backoff);
// every wait for the mesh is bounded but generous.
func TestScenarios(t *testing.T) {
	t.Parallel()
	mesh := meshtest.Start(t, bins, meshtest.Options{
		APIKeys: map[string]string{"scenarios": scenarioKey},
		// The dispatcher's delay queues: the failing job's backoffs (1 s,
		// 2 s) fall exactly on a tier, so its retries are not stretched.
		RetryTiers: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second},
	})
	s := newClients(mesh, scenarioKey)
	// The subtests share the mesh; the mesh's cleanup waits for all of them.
	t.Run("SignedDeliveryPauseRunNow", func(t *testing.T) { t.Parallel(); s.signedDeliveryPauseRunNow(t) })
	t.Run("RetriesDeadLetterAlertRedrive", func(t *testing.T) { t.Parallel(); s.retriesDeadLetterAlertRedrive(t) })
	t.Run("OneTimeJobFiresOnce", func(t *testing.T) { t.Parallel(); s.oneTimeJobFiresOnce(t) })
	t.Run("DeadlineStopsRetries", func(t *testing.T) { t.Parallel(); s.deadlineStopsRetries(t) })
	t.Run("CancelInFlight", func(t *testing.T) { t.Parallel(); s.cancelInFlight(t) })
	t.Run("PauseOnFailure", func(t *testing.T) { t.Parallel(); s.pauseOnFailure(t) })
	t.Run("RunWithOverrides", func(t *testing.T) { t.Parallel(); s.runWithOverrides(t) })
	t.Run("RerunWithOverride", func(t *testing.T) { t.Parallel(); s.rerunWithOverride(t) })
	t.Run("LimitedRuns", func(t *testing.T) { t.Parallel(); s.limitedRuns(t) })
}

// signedDeliveryPauseRunNow: a job created with the Go client fires; its
// webhook arrives signed, with the idempotency key, and the history shows
// it succeeded. PauseJob stops it; RunJob fires the paused job once.
func (s *scenario) signedDeliveryPauseRunNow(t *testing.T) {
	ctx := t.Context()
	target := newRecorder(t, http.StatusNoContent)
	const body = `{"scenario":"signed delivery"}`
	created, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "scenario every second",
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * * * * *"}},
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Url: target.URL + "/tick", Body: body, Headers: map[string]string{"X-Scenario": "signed-delivery"},
		}}},
	}}))
	require.NoError(t, err)
	jobID := created.Msg.GetJob().GetId()
	secret := created.Msg.GetJob().GetTarget().GetHttp().GetSigningSecret()
	require.True(t, strings.HasPrefix(secret, "whsec_"), "CreateJob returns the generated signing secret once")
	got, err := s.jobs.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: jobID}))
	require.NoError(t, err)
	require.Empty(t, got.Msg.GetJob().GetTarget().GetHttp().GetSigningSecret(), "the secret is never returned after creation")

	// The webhook arrives, signed and with the idempotency key.
	waitFor(t, 30*time.Second, "the job's first webhook", func() bool { return len(target.All()) > 0 })
	first := target.All()[0]
	require.NoError(t, verifyStandardWebhook(secret, first.Header, first.Body, time.Now()))
	execID := first.ID()
	require.NotEmpty(t, execID)
	require.Equal(t, execID, first.Header.Get("Idempotency-Key"), "the idempotency key is the webhook-id")
	require.Equal(t, body, string(first.Body))
	require.Equal(t, "signed-delivery", first.Header.Get("X-Scenario"))
	require.Equal(t, http.MethodPost, first.Method)

	// The history shows that execution succeeded.
	var exec *historyv1.GetExecutionResponse
	waitFor(t, 30*time.Second, "the execution to show SUCCEEDED in the history", func() bool {
		resp, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: execID}))
		if err != nil || resp.Msg.GetExecution().GetStatus() != historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
			return false
		}
		exec = resp.Msg
		return true
	})
	require.Equal(t, jobID, exec.GetExecution().GetJobId())
	require.Equal(t, execID, exec.GetExecution().GetExecutionId(), "the history's execution id is the webhook-id")
	require.Equal(t, dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, exec.GetExecution().GetTriggerKind())
	require.Len(t, exec.GetAttempts(), 1)
	require.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, exec.GetAttempts()[0].GetStatus())
	require.EqualValues(t, http.StatusNoContent, exec.GetAttempts()[0].GetResponseStatus())
	require.Contains(t, slotIDs(s.listSlots(t, jobID)), execID, "the trigger's ledger holds the slot")

	// Pause: once the trigger has applied it, no slot is fired. A slot
	// committed before it (up to the trigger's --lead + --gather ahead of
	// its time, ADRs 0022 and 0023) is still delivered at its time.
	before := s.pausedProjections(t)
	paused, err := s.jobs.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: jobID}))
	require.NoError(t, err)
	require.True(t, paused.Msg.GetJob().GetPaused())
	waitFor(t, 30*time.Second, "a trigger node to apply the pause", func() bool { return s.pausedProjections(t) > before })
	projected := time.Now()
	t.Logf("pause acknowledged at %s, applied by the trigger by %s", paused.Msg.GetJob().GetUpdateTime().AsTime().Format(time.RFC3339Nano), projected.Format(time.RFC3339Nano))
	time.Sleep(4 * time.Second) // four periods of the schedule

	slots := s.listSlots(t, jobID)
	fired := map[string]bool{}
	for _, sl := range slots {
		require.Falsef(t, sl.GetRecordTime().AsTime().After(projected),
			"slot %s at %s committed at %s, after the trigger applied the pause (%s)",
			sl.GetExecutionId(), sl.GetNominalTime().AsTime(), sl.GetRecordTime().AsTime(), projected)
		fired[sl.GetExecutionId()] = true
	}
	for _, e := range s.listExecutions(t, &historyv1.ListExecutionsRequest{JobId: jobID}) {
		require.Truef(t, fired[e.GetExecutionId()], "the history has execution %s at %s, not a slot the ledger fired before the pause",
			e.GetExecutionId(), e.GetNominalTime().AsTime())
	}
	deliveries := target.All()
	perID := map[string]int{}
	for _, d := range deliveries {
		require.Truef(t, fired[d.ID()], "delivery %s is not a slot the ledger fired before the pause", d.ID())
		require.NoError(t, verifyStandardWebhook(secret, d.Header, d.Body, time.Now()))
		perID[d.ID()]++
	}
	for id, n := range perID {
		require.Equalf(t, 1, n, "execution %s delivered %d times", id, n)
	}
	pausedJob, err := s.jobs.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: jobID}))
	require.NoError(t, err)
	require.Empty(t, pausedJob.Msg.GetNextRunTimes(), "a paused job has no next run")

	// Run-now on the paused job fires it exactly once, also when the
	// request is repeated with the same request_id.
	run, err := s.jobs.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: jobID, RequestId: "scenario-run-1"}))
	require.NoError(t, err)
	again, err := s.jobs.RunJob(ctx, connect.NewRequest(&registryv1.RunJobRequest{Id: jobID, RequestId: "scenario-run-1"}))
	require.NoError(t, err)
	require.True(t, run.Msg.GetNominalTime().AsTime().Equal(again.Msg.GetNominalTime().AsTime()), "a repeated RunJob is the same run")
	manualKind := []dispatchv1.TriggerKind{dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL}
	var manual *historyv1.Execution
	waitFor(t, 30*time.Second, "the manual run to succeed in the history", func() bool {
		list := s.listExecutions(t, &historyv1.ListExecutionsRequest{JobId: jobID, TriggerKinds: manualKind})
		if len(list) != 1 || list[0].GetStatus() != historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
			return false
		}
		manual = list[0]
		return true
	})
	require.True(t, manual.GetNominalTime().AsTime().Equal(run.Msg.GetNominalTime().AsTime()), "the manual execution is RunJob's nominal time")
	waitFor(t, 10*time.Second, "the manual run's webhook", func() bool { return len(target.ByID(manual.GetExecutionId())) > 0 })
	time.Sleep(3 * time.Second) // room for a duplicate, or a slot of the paused schedule, to show
	require.Len(t, target.ByID(manual.GetExecutionId()), 1, "the manual run is delivered once")
	require.Len(t, target.All(), len(deliveries)+1, "nothing but the manual run was delivered while paused")
	runDelivery := target.ByID(manual.GetExecutionId())[0]
	require.NoError(t, verifyStandardWebhook(secret, runDelivery.Header, runDelivery.Body, time.Now()))
	require.Equal(t, "manual", runDelivery.Header.Get("cronmesh-trigger-kind"))
	require.NoError(t, webhooksign.VerifySlot(runDelivery.Header), "a manual run's nominal time is bound to its id too")
	require.Len(t, s.listExecutions(t, &historyv1.ListExecutionsRequest{JobId: jobID, TriggerKinds: manualKind}), 1)
	var manualSlots int
	for _, sl := range s.listSlots(t, jobID) {
		if sl.GetTriggerKind() == dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL {
			manualSlots++
			require.Equal(t, manual.GetExecutionId(), sl.GetExecutionId())
		}
	}
	require.Equal(t, 1, manualSlots, "the ledger holds one manual slot")
}

// retriesDeadLetterAlertRedrive: a job whose target answers 500 is retried
// exactly as its policy says, then dead-lettered; a consecutive-failures
// rule raises an incident notified by webhook and by email; a redrive
// delivers the execution and the incident resolves.
func (s *scenario) retriesDeadLetterAlertRedrive(t *testing.T) {
	ctx := t.Context()
	target := newRecorder(t, http.StatusInternalServerError)
	alertHook := newRecorder(t, http.StatusNoContent)
	mailbox := smtptest.Start(t)
	label := fmt.Sprintf("retry-%d", time.Now().UnixNano())
	const displayName = "scenario failing target"

	// Alerting first, so the rule sees the job's first event.
	hookSecret := newSigningSecret(t)
	hook, err := s.alerts.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: &alertingv1.Channel{
		DisplayName: "scenario webhook",
		Kind:        &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: alertHook.URL + "/alerts", SigningSecret: hookSecret}},
	}}))
	require.NoError(t, err)
	mailCh, err := s.alerts.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: &alertingv1.Channel{
		DisplayName: "scenario email",
		Kind: &alertingv1.Channel_Email{Email: &alertingv1.EmailChannel{
			Host: mailbox.Host(), Port: int32(mailbox.Port()), Security: alertingv1.SmtpSecurity_SMTP_SECURITY_NONE,
			Username: mailbox.Username, Password: mailbox.Password,
			From: "cronmesh@example.test", To: []string{"oncall@example.test"},
		}},
	}}))
	require.NoError(t, err)
	const threshold = 2 // ConsecutiveFailures.count: the job has exactly two slots, both fail
	rule, err := s.alerts.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: &alertingv1.Rule{
		DisplayName: "scenario: failing twice in a row",
		Selector:    &alertingv1.JobSelector{Labels: map[string]string{"scenario": label}},
		Condition:   &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: threshold}},
		ChannelIds:  []string{hook.Msg.GetChannel().GetId(), mailCh.Msg.GetChannel().GetId()},
	}}))
	require.NoError(t, err)
	ruleID := rule.Msg.GetRule().GetId()

	// A schedule of exactly two slots, one second apart, a few seconds
	// ahead; the registry's own preview confirms it.
	first := time.Now().Truncate(time.Second).Add(5 * time.Second)
	schedule := &registryv1.Schedule{
		Kind:      &registryv1.Schedule_Cron{Cron: "* * * * * *"},
		StartTime: timestamppb.New(first), EndTime: timestamppb.New(first.Add(time.Second)),
	}
	preview, err := s.jobs.PreviewSchedule(ctx, connect.NewRequest(&registryv1.PreviewScheduleRequest{Schedule: schedule, Count: 10}))
	require.NoError(t, err)
	require.Len(t, preview.Msg.GetTimes(), threshold)
	slotTimes := []time.Time{preview.Msg.GetTimes()[0].AsTime(), preview.Msg.GetTimes()[1].AsTime()}
	require.True(t, slotTimes[0].Equal(first) && slotTimes[1].Equal(first.Add(time.Second)), "preview: %v", slotTimes)

	policy := &registryv1.RetryPolicy{
		MaxRetries:     proto32(2),
		InitialBackoff: durationpb.New(time.Second),
		MaxBackoff:     durationpb.New(4 * time.Second),
		Multiplier:     2,
	}
	created, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: displayName,
		Labels:      map[string]string{"scenario": label},
		Schedule:    schedule,
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Url: target.URL + "/fail", Body: `{"slot":"{{nominal_time}}","attempt":{{attempt}}}`, BodyFormat: registryv1.BodyFormat_BODY_FORMAT_TEMPLATE,
		}}},
		RetryPolicy: policy,
	}}))
	require.NoError(t, err)
	jobID := created.Msg.GetJob().GetId()
	secret := created.Msg.GetJob().GetTarget().GetHttp().GetSigningSecret()
	attempts := 1 + int(policy.GetMaxRetries())

	// Both slots are dead-lettered after 1 + max_retries attempts each.
	var letters []*dispatcherv1.DeadLetter
	waitFor(t, 60*time.Second, "both executions in the dead-letter store", func() bool {
		resp, err := s.dispatch.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{JobId: jobID}))
		if err != nil || len(resp.Msg.GetDeadLetters()) < threshold {
			return false
		}
		letters = resp.Msg.GetDeadLetters()
		return true
	})
	require.Len(t, letters, threshold)
	ids := target.IDs()
	require.Len(t, ids, threshold, "two executions reached the target")
	for _, id := range ids {
		got := target.ByID(id)
		require.Lenf(t, got, attempts, "execution %s: 1 + max_retries attempts", id)
		for n, d := range got {
			require.NoError(t, verifyStandardWebhook(secret, d.Header, d.Body, time.Now()), "attempt %d", n+1)
			require.Equal(t, id, d.Header.Get("Idempotency-Key"), "every attempt carries the same idempotency key")
			// The slot at the target: headers bound to the signed id, and
			// the templated body rendered per attempt.
			require.NoError(t, webhooksign.VerifySlot(d.Header), "attempt %d", n+1)
			require.Equal(t, strconv.Itoa(n+1), d.Header.Get("cronmesh-attempt"))
			require.Equal(t, "scheduled", d.Header.Get("cronmesh-trigger-kind"))
			require.Equal(t, jobID, d.Header.Get("cronmesh-job-id"))
			require.Equal(t, fmt.Sprintf(`{"slot":"%s","attempt":%d}`, d.Header.Get("cronmesh-nominal-time"), n+1), string(d.Body))
			if n > 0 {
				gap, want := d.At.Sub(got[n-1].At), policyBackoff(policy, n)
				require.GreaterOrEqualf(t, gap, want, "execution %s: attempt %d came %s after attempt %d; the policy waits %s", id, n+1, gap, n, want)
				t.Logf("execution %s: attempt %d came %s after the previous (policy %s)", id, n+1, gap.Round(time.Millisecond), want)
			}
		}
	}
	byNominal := map[time.Time]*dispatcherv1.DeadLetter{}
	for _, l := range letters {
		require.Contains(t, ids, l.GetExecutionId())
		require.EqualValues(t, attempts, l.GetAttempt(), "the dead letter names the last attempt")
		require.EqualValues(t, http.StatusInternalServerError, l.GetResponseStatus())
		require.Empty(t, l.GetRequest().GetTarget().GetHttp().GetSigningSecret(), "the API strips the secret")
		byNominal[l.GetNominalTime().AsTime()] = l
	}
	require.Contains(t, byNominal, slotTimes[0])
	require.Contains(t, byNominal, slotTimes[1])
	waitFor(t, 30*time.Second, "the history to show both executions DEAD", func() bool {
		return len(s.listExecutions(t, &historyv1.ListExecutionsRequest{
			JobId: jobID, Statuses: []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD},
		})) == threshold
	})
	for _, id := range ids {
		resp, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: id}))
		require.NoError(t, err)
		require.Len(t, resp.Msg.GetAttempts(), attempts, "the history holds every attempt of %s", id)
		for _, a := range resp.Msg.GetAttempts() {
			require.EqualValues(t, http.StatusInternalServerError, a.GetResponseStatus())
		}
	}

	// The incident opens, and both channels are notified naming the job.
	var incident *alertingv1.Incident
	waitFor(t, 30*time.Second, "an open incident for the job", func() bool {
		resp, err := s.alerts.ListIncidents(ctx, connect.NewRequest(&alertingv1.ListIncidentsRequest{JobId: jobID}))
		if err != nil || len(resp.Msg.GetIncidents()) == 0 {
			return false
		}
		incident = resp.Msg.GetIncidents()[0]
		return true
	})
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_OPEN, incident.GetState())
	require.Equal(t, alertingv1.IncidentKind_INCIDENT_KIND_CONSECUTIVE_FAILURES, incident.GetKind())
	require.Equal(t, ruleID, incident.GetRuleId())
	require.Equal(t, displayName, incident.GetJobDisplayName())
	require.True(t, incident.GetSlotTime().AsTime().Equal(slotTimes[1]),
		"the incident opened at the second failure (threshold %d), not the first: slot %s", threshold, incident.GetSlotTime().AsTime())
	require.Contains(t, incident.GetSummary(), strconv.Itoa(threshold))

	opened := s.waitNotification(t, alertHook, hookSecret, "incident.opened", incident.GetId())
	require.Equal(t, jobID, opened.Incident.JobID)
	require.Equal(t, displayName, opened.Incident.JobDisplayName)
	require.Equal(t, "consecutive_failures", opened.Incident.Kind)
	openMail := waitEmail(t, mailbox, func(m smtptest.Message) bool { return !strings.Contains(m.Subject, "RESOLVED") })
	require.Contains(t, openMail.Subject, displayName)
	require.Contains(t, openMail.Body, jobID)
	require.Contains(t, openMail.Body, incident.GetId())
	require.Equal(t, []string{"oncall@example.test"}, openMail.To)

	// Redrive the slot that opened the incident, to a target that now
	// succeeds: the same execution (webhook-id) is delivered again.
	target.Answer(http.StatusOK)
	redriveOf := byNominal[slotTimes[1]]
	redriven, err := s.dispatch.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: redriveOf.GetId()}))
	require.NoError(t, err)
	execID := redriven.Msg.GetExecutionId()
	require.Equal(t, redriveOf.GetExecutionId(), execID, "a redrive keeps the execution id (ADR 0006)")
	waitFor(t, 30*time.Second, "the redriven delivery", func() bool { return len(target.ByID(execID)) > attempts })
	redelivery := target.ByID(execID)[attempts]
	require.Equal(t, http.StatusOK, redelivery.Status)
	require.NoError(t, verifyStandardWebhook(secret, redelivery.Header, redelivery.Body, time.Now()))
	require.Equal(t, execID, redelivery.Header.Get("Idempotency-Key"))
	require.Equal(t, fmt.Sprintf(`{"slot":"%s","attempt":%d}`, slotTimes[1].Format(time.RFC3339Nano), attempts+1), string(redelivery.Body),
		"a redrive renders the template with the attempt after the dead letter's last")

	waitFor(t, 30*time.Second, "the history to show the redriven execution SUCCEEDED", func() bool {
		resp, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: execID}))
		return err == nil && resp.Msg.GetExecution().GetStatus() == historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	})
	after, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: execID}))
	require.NoError(t, err)
	require.Len(t, after.Msg.GetAttempts(), attempts+1, "the history keeps the dead attempts and adds the redrive's")
	last := after.Msg.GetAttempts()[attempts]
	require.EqualValues(t, attempts+1, last.GetAttempt())
	require.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, last.GetStatus())
	require.EqualValues(t, http.StatusOK, last.GetResponseStatus())
	waitFor(t, 30*time.Second, "the incident to resolve", func() bool {
		resp, err := s.alerts.GetIncident(ctx, connect.NewRequest(&alertingv1.GetIncidentRequest{Id: incident.GetId()}))
		return err == nil && resp.Msg.GetIncident().GetState() == alertingv1.IncidentState_INCIDENT_STATE_RESOLVED
	})
	listed, err := s.alerts.ListIncidents(ctx, connect.NewRequest(&alertingv1.ListIncidentsRequest{JobId: jobID}))
	require.NoError(t, err)
	require.Len(t, listed.Msg.GetIncidents(), 1)
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_RESOLVED, listed.Msg.GetIncidents()[0].GetState())
	resolved := s.waitNotification(t, alertHook, hookSecret, "incident.resolved", incident.GetId())
	require.Equal(t, jobID, resolved.Incident.JobID)
	resolvedMail := waitEmail(t, mailbox, func(m smtptest.Message) bool { return strings.Contains(m.Subject, "RESOLVED") })
	require.Contains(t, resolvedMail.Subject, displayName)
	require.Contains(t, resolvedMail.Body, jobID)

	// The redriven letter left the store; the other is still there, DEAD.
	rest, err := s.dispatch.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{JobId: jobID}))
	require.NoError(t, err)
	require.Len(t, rest.Msg.GetDeadLetters(), 1)
	require.True(t, rest.Msg.GetDeadLetters()[0].GetNominalTime().AsTime().Equal(slotTimes[0]))
	other, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: byNominal[slotTimes[0]].GetExecutionId()}))
	require.NoError(t, err)
	require.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD, other.Msg.GetExecution().GetStatus())
	require.Len(t, target.ByID(byNominal[slotTimes[0]].GetExecutionId()), attempts, "the execution not redriven got no further attempt")
}

// oneTimeJobFiresOnce: a job `at` an instant a few seconds ahead fires
// once, and never again.
func (s *scenario) oneTimeJobFiresOnce(t *testing.T) {
	ctx := t.Context()
	target := newRecorder(t, http.StatusNoContent)
	at := time.Now().Truncate(time.Second).Add(4 * time.Second)
	created, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "scenario one time",
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: timestamppb.New(at)}},
		Target:      &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: target.URL + "/once"}}},
	}}))
	require.NoError(t, err)
	jobID := created.Msg.GetJob().GetId()
	secret := created.Msg.GetJob().GetTarget().GetHttp().GetSigningSecret()

	waitFor(t, 30*time.Second, "the one-time job's webhook", func() bool { return len(target.All()) > 0 })
	d := target.All()[0]
	require.NoError(t, verifyStandardWebhook(secret, d.Header, d.Body, time.Now()))
	require.False(t, d.At.Before(at), "fired at %s, before its time %s", d.At, at)
	if wait := time.Until(at.Add(5 * time.Second)); wait > 0 {
		time.Sleep(wait) // well past the instant: nothing more may come
	}
	require.Len(t, target.All(), 1, "a one-time job fires once")
	slots := s.listSlots(t, jobID)
	require.Len(t, slots, 1, "the ledger holds one slot")
	require.Equal(t, triggerv1.SlotState_SLOT_STATE_FIRED, slots[0].GetState())
	require.True(t, slots[0].GetNominalTime().AsTime().Equal(at))
	require.Equal(t, d.ID(), slots[0].GetExecutionId())
	waitFor(t, 30*time.Second, "the one-time execution to succeed in the history", func() bool {
		list := s.listExecutions(t, &historyv1.ListExecutionsRequest{JobId: jobID})
		return len(list) == 1 && list[0].GetStatus() == historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	})
	job, err := s.jobs.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: jobID}))
	require.NoError(t, err)
	require.Empty(t, job.Msg.GetNextRunTimes(), "no slot is left")
}

// alertNotification is the JSON body of an alert webhook, as far as the
// scenarios read it.
type alertNotification struct {
	Type           string `json:"type"`
	NotificationID string `json:"notification_id"`
	Incident       struct {
		ID             string `json:"id"`
		JobID          string `json:"job_id"`
		JobDisplayName string `json:"job_display_name"`
		Kind           string `json:"kind"`
		Summary        string `json:"summary"`
	} `json:"incident"`
}

// waitNotification waits for the alert webhook of kind typ about incident,
// and checks its signature.
func (s *scenario) waitNotification(t *testing.T, hook *recorder, secret, typ, incident string) alertNotification {
	t.Helper()
	var found alertNotification
	waitFor(t, 30*time.Second, "a "+typ+" webhook notification", func() bool {
		for _, d := range hook.All() {
			var n alertNotification
			if json.Unmarshal(d.Body, &n) != nil || n.Type != typ || n.Incident.ID != incident {
				continue
			}
			require.NoError(t, verifyStandardWebhook(secret, d.Header, d.Body, time.Now()), "alert webhooks are signed")
			require.Equal(t, n.NotificationID, d.ID(), "the webhook-id is the notification's id")
			found = n
			return true
		}
		return false
	})
	return found
}

func waitEmail(t *testing.T, box *smtptest.Server, match func(smtptest.Message) bool) smtptest.Message {
	t.Helper()
	var found smtptest.Message
	waitFor(t, 30*time.Second, "an alert email", func() bool {
		for _, m := range box.Messages() {
			if match(m) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// listSlots returns the job's whole ledger.
func (s *scenario) listSlots(t *testing.T, jobID string) []*triggerv1.Slot {
	t.Helper()
	resp, err := s.trigger.ListSlots(t.Context(), connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: jobID, PageSize: 1000}))
	require.NoError(t, err)
	require.Empty(t, resp.Msg.GetNextPageToken())
	return resp.Msg.GetSlots()
}

// listExecutions returns every execution the request matches.
func (s *scenario) listExecutions(t *testing.T, req *historyv1.ListExecutionsRequest) []*historyv1.Execution {
	t.Helper()
	req.PageSize = 1000
	resp, err := s.history.ListExecutions(t.Context(), connect.NewRequest(req))
	require.NoError(t, err)
	require.Empty(t, resp.Msg.GetNextPageToken())
	return resp.Msg.GetExecutions()
}

// pausedProjections is how many pause events the trigger nodes have
// applied to their projection (projection_events_applied_total, summed
// over the nodes: the job events queue has competing consumers). It is
// the test's way to know a pause has arrived where slots are fired.
func (s *scenario) pausedProjections(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for _, node := range s.mesh.Triggers {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, node.URL+"/metrics", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "#") && strings.Contains(line, "projection_events_applied_total{") && strings.Contains(line, `kind="paused"`) {
				fields := strings.Fields(line)
				v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
				require.NoError(t, err, line)
				sum += v
			}
		}
		resp.Body.Close()
		require.NoError(t, sc.Err())
	}
	return sum
}

// policyBackoff is the delay the registry documents before retry n
// (1-based): min(max_backoff, initial_backoff * multiplier^(n-1)).
func policyBackoff(p *registryv1.RetryPolicy, n int) time.Duration {
	d := time.Duration(float64(p.GetInitialBackoff().AsDuration()) * math.Pow(p.GetMultiplier(), float64(n-1)))
	return min(d, p.GetMaxBackoff().AsDuration())
}

func slotIDs(slots []*triggerv1.Slot) []string {
	out := make([]string, len(slots))
	for i, sl := range slots {
		out[i] = sl.GetExecutionId()
	}
	return out
}

func proto32(v int32) *int32 { return &v }

// waitFor polls cond every 100 ms until it holds, failing the test with
// what it waited for after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waited %s for %s", timeout, what)
		case <-tick.C:
		}
	}
}
