package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/libs/testkit/smtptest"
)

const (
	started   = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED
	succeeded = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED
	failed    = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED
	dead      = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD
	missed    = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED
)

// setupRule creates a webhook channel to rcv, an email channel to smtp and
// the rule notifying both.
func setupRule(t *testing.T, a *alerting, rcv *receiver, smtp *smtptest.Server, rule *alertingv1.Rule) *alertingv1.Rule {
	t.Helper()
	ctx := context.Background()
	c := a.client(keyAlpha)
	hook, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: webhookChannel(rcv.srv.URL)}))
	require.NoError(t, err)
	mail, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: emailChannel(smtp)}))
	require.NoError(t, err)
	rule.ChannelIds = []string{hook.Msg.Channel.Id, mail.Msg.Channel.Id}
	r, err := c.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: rule}))
	require.NoError(t, err)
	return r.Msg.Rule
}

// TestConsecutiveFailures: three failures in a row (with redelivered
// duplicates and a non-final failure mixed in) open exactly one incident
// and send one email and one webhook; a success resolves it and notifies
// both channels again; acknowledging works while open, not after.
func TestConsecutiveFailures(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	rcv := startReceiver(t)
	smtp := smtptest.Start(t)
	rule := failuresRule(3)
	rule.Selector = &alertingv1.JobSelector{Labels: map[string]string{"team": "ops"}}
	rule = setupRule(t, a, rcv, smtp, rule)

	ops := map[string]string{"team": "ops", "tier": "1"}
	other := map[string]string{"team": "web"}
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	slot := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }

	// Two final failures, each delivered three times, a failure that will
	// be retried (not final), and three failures of a job the rule does
	// not select.
	f1, f2 := exec("job-a", ops, 1, failed, slot(1)), exec("job-a", ops, 2, failed, slot(2))
	retried := exec("job-a", ops, 3, failed, slot(3))
	retried.RetryScheduled = true
	a.publishExecutions(t, exec("job-a", ops, 1, started, slot(1)), f1)
	a.publishExecutions(t, f2, f1)
	a.publishExecutions(t, f2)
	a.publishExecutions(t, retried, exec("job-b", other, 1, failed, slot(1)), exec("job-b", other, 2, failed, slot(2)), exec("job-b", other, 3, failed, slot(3)))
	marker := exec("job-a", ops, 2, dead, slot(2)) // DEAD of an execution already counted
	a.publishExecutions(t, marker)
	a.waitEvaluated(t, marker)
	require.Empty(t, a.incidents(t, "job-a"), "two failed executions, however often delivered, are not three")
	require.Empty(t, a.incidents(t, "job-b"), "the rule does not select job-b")

	f4 := exec("job-a", ops, 4, failed, slot(4))
	a.publishExecutions(t, f4)
	a.waitEvaluated(t, f4)
	a.publishExecutions(t, f4) // redelivered after the incident opened
	incs := a.incidents(t, "job-a")
	require.Len(t, incs, 1)
	inc := incs[0]
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_OPEN, inc.State)
	require.Equal(t, alertingv1.IncidentKind_INCIDENT_KIND_CONSECUTIVE_FAILURES, inc.Kind)
	require.Equal(t, rule.Id, inc.RuleId)
	require.Equal(t, "3 executions in a row failed", inc.Summary)
	require.Equal(t, slot(4), inc.SlotTime.AsTime())

	require.Eventually(t, func() bool { return len(rcv.received()) == 1 && len(smtp.Messages()) == 1 }, 15*time.Second, 10*time.Millisecond)
	hook := rcv.received()[0]
	require.Equal(t, "incident.opened", hook.Payload.Type)
	require.Equal(t, inc.Id, hook.Payload.Incident.ID)
	require.Equal(t, hook.ID, hook.Payload.NotificationID)
	mail := smtp.Messages()[0]
	require.Equal(t, []string{"oncall@example.invalid", "lead@example.invalid"}, mail.To)
	require.Equal(t, "[cronmesh] nightly job-a: 3 executions in a row failed", mail.Subject)
	require.Contains(t, mail.Body, inc.Id)

	ctx := context.Background()
	ack, err := a.client(keyAlpha).AcknowledgeIncident(ctx, connect.NewRequest(&alertingv1.AcknowledgeIncidentRequest{Id: inc.Id}))
	require.NoError(t, err)
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_ACKNOWLEDGED, ack.Msg.Incident.State)
	require.NotNil(t, ack.Msg.Incident.AcknowledgeTime)

	// A success of an older slot, arriving late, resolves nothing.
	old := exec("job-a", ops, 0, succeeded, slot(0))
	a.publishExecutions(t, old)
	f5 := exec("job-a", ops, 5, failed, slot(5))
	a.publishExecutions(t, f5)
	a.waitEvaluated(t, f5)
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_ACKNOWLEDGED, a.incidents(t, "job-a")[0].State)

	ok := exec("job-a", ops, 6, succeeded, slot(6))
	a.publishExecutions(t, exec("job-a", ops, 6, started, slot(6)), ok)
	require.Eventually(t, func() bool {
		incs := a.incidents(t, "job-a")
		return len(incs) == 1 && incs[0].State == alertingv1.IncidentState_INCIDENT_STATE_RESOLVED
	}, 15*time.Second, 10*time.Millisecond)
	got, err := a.client(keyAlpha).GetIncident(ctx, connect.NewRequest(&alertingv1.GetIncidentRequest{Id: inc.Id}))
	require.NoError(t, err)
	require.Equal(t, "the job succeeded", got.Msg.Incident.ResolveReason)
	require.NotNil(t, got.Msg.Incident.ResolveTime)

	require.Eventually(t, func() bool { return len(rcv.received()) == 2 && len(smtp.Messages()) == 2 }, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, "incident.resolved", rcv.received()[1].Payload.Type)
	require.NotEqual(t, rcv.received()[0].ID, rcv.received()[1].ID)
	require.Contains(t, smtp.Messages()[1].Subject, "RESOLVED")

	_, err = a.client(keyAlpha).AcknowledgeIncident(ctx, connect.NewRequest(&alertingv1.AcknowledgeIncidentRequest{Id: inc.Id}))
	rpctest.RequireCode(t, err, connect.CodeFailedPrecondition)

	// The count starts again after the success.
	for n := 7; n <= 8; n++ {
		a.publishExecutions(t, exec("job-a", ops, n, failed, slot(n)))
	}
	f9 := exec("job-a", ops, 9, failed, slot(9))
	a.publishExecutions(t, f9)
	a.waitEvaluated(t, f9)
	resp, err := a.client(keyAlpha).ListIncidents(ctx, connect.NewRequest(&alertingv1.ListIncidentsRequest{
		State: alertingv1.IncidentState_INCIDENT_STATE_OPEN, RuleId: rule.Id,
	}))
	require.NoError(t, err)
	require.Len(t, resp.Msg.Incidents, 1, "three new failures open a second incident")
	require.NotEqual(t, inc.Id, resp.Msg.Incidents[0].Id)
	beta, err := a.client(keyBeta).ListIncidents(ctx, connect.NewRequest(&alertingv1.ListIncidentsRequest{}))
	require.NoError(t, err)
	require.Empty(t, beta.Msg.Incidents, "namespaces are apart")
}

// TestDeadLetteredAndLateSlots: a dead letter opens a dead-lettered
// incident; a slot that fires later than the tolerance, or is recorded
// missed, opens a missed-schedule incident that a later on-time slot
// resolves.
func TestDeadLetteredAndLateSlots(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	rcv := startReceiver(t)
	smtp := smtptest.Start(t)
	setupRule(t, a, rcv, smtp, &alertingv1.Rule{Condition: &alertingv1.Rule_DeadLettered{DeadLettered: &alertingv1.DeadLettered{}}})
	setupRule(t, a, rcv, smtp, missedRule(30*time.Second))
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

	d := exec("job-d", nil, 1, dead, t0)
	a.publishExecutions(t, d)
	a.waitEvaluated(t, d)
	incs := a.incidents(t, "job-d")
	require.Len(t, incs, 1)
	require.Equal(t, alertingv1.IncidentKind_INCIDENT_KIND_DEAD_LETTERED, incs[0].Kind)

	onTime := exec("job-m", nil, 1, started, t0)
	onTime.FireTime = timestampAt(t0.Add(2 * time.Second))
	late := exec("job-m", nil, 2, started, t0.Add(time.Minute))
	late.FireTime = timestampAt(t0.Add(time.Minute + 45*time.Second))
	a.publishExecutions(t, onTime, late)
	a.waitEvaluated(t, late)
	incs = a.incidents(t, "job-m")
	require.Len(t, incs, 1)
	require.Equal(t, alertingv1.IncidentKind_INCIDENT_KIND_MISSED_SCHEDULE, incs[0].Kind)
	require.Contains(t, incs[0].Summary, "45s late")

	next := exec("job-m", nil, 3, started, t0.Add(2*time.Minute))
	a.publishExecutions(t, next)
	require.Eventually(t, func() bool {
		incs := a.incidents(t, "job-m")
		return len(incs) == 1 && incs[0].State == alertingv1.IncidentState_INCIDENT_STATE_RESOLVED
	}, 15*time.Second, 10*time.Millisecond)

	m := exec("job-m", nil, 4, missed, t0.Add(3*time.Minute))
	m.Attempt, m.FireTime = 0, nil
	a.publishExecutions(t, m)
	a.waitEvaluated(t, m)
	incs = a.incidents(t, "job-m")
	require.Len(t, incs, 2)
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_OPEN, incs[0].State, "newest first")
	require.Contains(t, incs[0].Summary, "missed")
}

// TestSlotsSeenByTheirOutcomeAlone: the dispatcher emits STARTED only for
// an attempt still running after a threshold, so most slots reach alerting
// as an outcome alone. A late slot's outcome opens a missed-schedule
// incident; the STARTED of the same slot (a slow attempt emits both) does
// not open it again; a later on-time slot's outcome resolves it.
func TestSlotsSeenByTheirOutcomeAlone(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	rcv := startReceiver(t)
	smtp := smtptest.Start(t)
	setupRule(t, a, rcv, smtp, missedRule(30*time.Second))
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

	late := exec("job-o", nil, 1, succeeded, t0)
	late.FireTime = timestampAt(t0.Add(45 * time.Second))
	late.StartTime = late.FireTime
	a.publishExecutions(t, late)
	// Recorded under the key of the STARTED it stands for.
	lateStart := exec("job-o", nil, 1, started, t0)
	lateStart.FireTime, lateStart.StartTime = late.FireTime, late.StartTime
	a.waitEvaluated(t, lateStart)
	incs := a.incidents(t, "job-o")
	require.Len(t, incs, 1)
	require.Equal(t, alertingv1.IncidentKind_INCIDENT_KIND_MISSED_SCHEDULE, incs[0].Kind)
	require.Contains(t, incs[0].Summary, "45s late")

	onTime := exec("job-o", nil, 2, failed, t0.Add(time.Minute))
	onTime.FireTime = timestampAt(t0.Add(time.Minute + time.Second))
	onTime.StartTime, onTime.RetryScheduled = onTime.FireTime, true
	a.publishExecutions(t, onTime)
	require.Eventually(t, func() bool {
		incs := a.incidents(t, "job-o")
		return len(incs) == 1 && incs[0].State == alertingv1.IncidentState_INCIDENT_STATE_RESOLVED
	}, 15*time.Second, 10*time.Millisecond)

	// The late slot's STARTED arrives after its outcome (another batch of
	// the dispatcher's): the slot was counted, so nothing opens again.
	a.publishExecutions(t, lateStart)
	marker := exec("job-marker", nil, 1, dead, t0)
	a.publishExecutions(t, marker)
	a.waitEvaluated(t, marker)
	incs = a.incidents(t, "job-o")
	require.Len(t, incs, 1, "the late slot opened one incident")
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_RESOLVED, incs[0].State)
}

// TestChannelDownGetsNotificationLater: while the webhook receiver answers
// 503 and the SMTP server is down, the opened notification is retried with
// backoff and recorded; when both come back each gets it exactly once, the
// webhook under the same webhook-id.
func TestChannelDownGetsNotificationLater(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	rcv := startReceiver(t)
	smtp := smtptest.Start(t)
	setupRule(t, a, rcv, smtp, failuresRule(1))
	rcv.setDown(true)
	smtp.Stop()

	f := exec("job-x", nil, 1, failed, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	a.publishExecutions(t, f)
	a.waitEvaluated(t, f)
	incs := a.incidents(t, "job-x")
	require.Len(t, incs, 1)
	require.Eventually(t, func() bool {
		st, err := a.app.Store().IncidentNotifications(context.Background(), incs[0].Id)
		return err == nil && st.Pending == 2 && st.Attempts >= 6 && rcv.refusals() >= 3
	}, 15*time.Second, 10*time.Millisecond, "the notifications are retried while the channels are down")

	rcv.setDown(false)
	smtp.Restart()
	require.Eventually(t, func() bool {
		st, err := a.app.Store().IncidentNotifications(context.Background(), incs[0].Id)
		return err == nil && st.Sent == 2 && st.Pending == 0
	}, 15*time.Second, 10*time.Millisecond)
	require.Len(t, rcv.received(), 1)
	require.Len(t, smtp.Messages(), 1)
	require.Equal(t, incs[0].Id, rcv.received()[0].Payload.Incident.ID)
}

// TestSkippedExecutionsAndConsecutiveFailures: an execution skipped by its
// overlap policy is neither a failure nor a success for a consecutive
// failures rule, unless the rule counts skipped executions: then it is a
// failure.
func TestSkippedExecutionsAndConsecutiveFailures(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	rcv := startReceiver(t)
	smtp := smtptest.Start(t)
	counting := failuresRule(2)
	counting.Selector = &alertingv1.JobSelector{Labels: map[string]string{"team": "counts"}}
	counting.GetConsecutiveFailures().CountSkipped = true
	counting = setupRule(t, a, rcv, smtp, counting)
	plain := failuresRule(2)
	plain.Selector = &alertingv1.JobSelector{Labels: map[string]string{"team": "plain"}}
	setupRule(t, a, rcv, smtp, plain)
	got, err := a.client(keyAlpha).GetRule(context.Background(), connect.NewRequest(&alertingv1.GetRuleRequest{Id: counting.Id}))
	require.NoError(t, err)
	require.True(t, got.Msg.Rule.GetConsecutiveFailures().GetCountSkipped())

	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	slot := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	skip := func(job string, labels map[string]string, n int) *eventsv1.ExecutionEvent {
		ev := exec(job, labels, n, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SKIPPED, slot(n))
		ev.Attempt = 0
		ev.Reason = "skipped: execution exe-" + job + "-1 of this job is still in progress"
		return ev
	}
	counts, plainLabels := map[string]string{"team": "counts"}, map[string]string{"team": "plain"}

	// The plain rule's job fails, is skipped, fails: two failures in a row
	// (the skip neither counts nor breaks the streak). Its events go first,
	// so that the counting rule's incident below is evaluated after them.
	a.publishExecutions(t, exec("job-p", plainLabels, 1, failed, slot(1)), skip("job-p", plainLabels, 2))
	s2 := skip("job-c", counts, 2)
	a.publishExecutions(t, exec("job-c", counts, 1, failed, slot(1)), s2)
	a.waitEvaluated(t, s2)
	incs := a.incidents(t, "job-c")
	require.Len(t, incs, 1)
	require.Equal(t, "2 executions in a row failed or were skipped", incs[0].Summary)
	require.Equal(t, slot(2), incs[0].SlotTime.AsTime())
	require.Empty(t, a.incidents(t, "job-p"), "one failure and a skip are not two failures")
	// The missed-schedule watchdog counts a skipped slot as seen: the
	// trigger fired it.
	var seen time.Time
	require.NoError(t, a.app.Pool().QueryRow(context.Background(), `SELECT seen_through FROM jobs WHERE id = 'job-c'`).Scan(&seen))
	require.Equal(t, slot(2), seen.UTC())

	f3 := exec("job-p", plainLabels, 3, failed, slot(3))
	a.publishExecutions(t, f3)
	a.waitEvaluated(t, f3)
	incs = a.incidents(t, "job-p")
	require.Len(t, incs, 1)
	require.Equal(t, "2 executions in a row failed", incs[0].Summary)
}

// TestResolveIncidentByHand: an incident resolved with ResolveIncident
// notifies its channels and names the key; what it was about (the failures
// of slots up to the resolution, a dead letter of such a slot, arriving
// late) opens nothing again, while a new streak of failures, or a new dead
// letter, opens a new incident. Resolving twice is not an error; an id of
// another namespace, or no incident's, is NOT_FOUND; an id over its cap is
// INVALID_ARGUMENT.
func TestResolveIncidentByHand(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	rcv := startReceiver(t)
	smtp := smtptest.Start(t)
	failures := failuresRule(3)
	failures.Selector = &alertingv1.JobSelector{JobIds: []string{"job-a"}}
	rule := setupRule(t, a, rcv, smtp, failures)
	setupRule(t, a, rcv, smtp, &alertingv1.Rule{
		Selector:  &alertingv1.JobSelector{JobIds: []string{"job-d"}},
		Condition: &alertingv1.Rule_DeadLettered{DeadLettered: &alertingv1.DeadLettered{}},
	})
	ctx := context.Background()
	c := a.client(keyAlpha)
	// Slots before the resolution are in the past, those after it in the
	// future: the resolution's time is the wall clock's.
	past := time.Now().Add(-time.Hour).Truncate(time.Minute)
	future := time.Now().Add(time.Hour).Truncate(time.Minute)
	slot := func(from time.Time, n int) time.Time { return from.Add(time.Duration(n) * time.Minute) }

	for n := 1; n <= 3; n++ {
		a.publishExecutions(t, exec("job-a", nil, n, failed, slot(past, n)))
	}
	d := exec("job-d", nil, 1, dead, slot(past, 1))
	a.publishExecutions(t, d)
	a.waitEvaluated(t, d)
	require.Eventually(t, func() bool { return len(a.incidents(t, "job-a")) == 1 }, 15*time.Second, 10*time.Millisecond)
	inc := a.incidents(t, "job-a")[0]
	incD := a.incidents(t, "job-d")[0]
	require.Eventually(t, func() bool { return len(rcv.received()) == 2 }, 15*time.Second, 10*time.Millisecond)

	for _, proto := range rpctest.Protocols() {
		res, err := a.client(keyAlpha, proto.Opts...).ResolveIncident(ctx, connect.NewRequest(&alertingv1.ResolveIncidentRequest{Id: inc.Id}))
		require.NoError(t, err)
		got := res.Msg.Incident
		require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_RESOLVED, got.State, proto.Name)
		require.Equal(t, "resolved by key "+apikey.ConfiguredKeyID(keyAlpha), got.ResolveReason)
		require.Equal(t, apikey.ConfiguredKeyID(keyAlpha), got.ResolvedBy)
		require.NotNil(t, got.ResolveTime)
	}
	_, err := c.ResolveIncident(ctx, connect.NewRequest(&alertingv1.ResolveIncidentRequest{Id: incD.Id}))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(rcv.received()) == 4 }, 15*time.Second, 10*time.Millisecond, "one resolution notice each")
	for _, r := range rcv.received()[2:] {
		require.Equal(t, "incident.resolved", r.Payload.Type)
		require.Contains(t, r.Payload.Incident.ResolveReason, "resolved by key ")
	}
	_, err = a.client(keyBeta).ResolveIncident(ctx, connect.NewRequest(&alertingv1.ResolveIncidentRequest{Id: inc.Id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	_, err = c.ResolveIncident(ctx, connect.NewRequest(&alertingv1.ResolveIncidentRequest{Id: "not an id"}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	_, err = c.ResolveIncident(ctx, connect.NewRequest(&alertingv1.ResolveIncidentRequest{Id: strings.Repeat("x", 65)}))
	require.Equal(t, []string{"id"}, rpctest.Violations(t, err))
	_, err = c.AcknowledgeIncident(ctx, connect.NewRequest(&alertingv1.AcknowledgeIncidentRequest{Id: inc.Id}))
	rpctest.RequireCode(t, err, connect.CodeFailedPrecondition)

	// The streak and the dead letter it was about, still arriving: no new
	// incident (a count of 4 and a second dead letter of an old slot would
	// each have opened one).
	a.publishExecutions(t, exec("job-a", nil, 4, failed, slot(past, 4)))
	lateDead := exec("job-d", nil, 2, dead, slot(past, 2))
	a.publishExecutions(t, lateDead)
	// A new streak: two failures are not three yet.
	a.publishExecutions(t, exec("job-a", nil, 5, failed, slot(future, 1)))
	f6 := exec("job-a", nil, 6, failed, slot(future, 2))
	a.publishExecutions(t, f6)
	a.waitEvaluated(t, f6)
	a.waitEvaluated(t, lateDead)
	require.Len(t, a.incidents(t, "job-a"), 1, "the resolved streak opens nothing again")
	require.Len(t, a.incidents(t, "job-d"), 1, "a dead letter of a slot before the resolution opens nothing")

	f7 := exec("job-a", nil, 7, failed, slot(future, 3))
	newDead := exec("job-d", nil, 3, dead, slot(future, 1))
	a.publishExecutions(t, f7, newDead)
	a.waitEvaluated(t, f7)
	a.waitEvaluated(t, newDead)
	incs := a.incidents(t, "job-a")
	require.Len(t, incs, 2, "three failures after the resolution open a new incident")
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_OPEN, incs[0].State)
	require.Equal(t, rule.Id, incs[0].RuleId)
	require.Equal(t, "3 executions in a row failed since the last incident was resolved by hand", incs[0].Summary)
	require.Empty(t, incs[0].ResolvedBy)
	require.Len(t, a.incidents(t, "job-d"), 2, "a new dead letter opens a new incident")
}
