package app_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/smtptest"
)

// publishJob publishes a registry job event for an every-minute job of
// namespace alpha anchored at anchor.
func (a *alerting) publishJob(t *testing.T, id string, version int64, kind eventsv1.JobEventKind, anchor time.Time, paused bool) {
	t.Helper()
	ev := &eventsv1.JobEvent{
		EventId: "je-" + id + "-" + time.Duration(version).String(), Kind: kind, Version: version,
		Job: &registryv1.Job{
			Id: id, Namespace: "alpha", DisplayName: "minutely " + id, Labels: map[string]string{"team": "ops"},
			Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{
				Every: durationpb.New(time.Minute), AnchorTime: timestamppb.New(anchor),
			}}},
			Paused: paused, CreateTime: timestamppb.New(anchor), Version: version,
		},
	}
	body, err := proto.Marshal(ev)
	require.NoError(t, err)
	a.publishJobBody(t, body)
}

// publishJobBody publishes one message to the job event exchange.
func (a *alerting) publishJobBody(t *testing.T, body []byte) {
	t.Helper()
	ch := amqptest.Channel(t)
	require.NoError(t, ch.Confirm(false))
	confirm, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), a.cfg.JobsExchange, "job.created", true, false,
		amqp091.Publishing{Body: body, DeliveryMode: amqp091.Persistent})
	require.NoError(t, err)
	ok, err := confirm.WaitContext(context.Background())
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, ch.Close())
}

type jobRow struct {
	version   int64
	nextSlot  *time.Time
	checkTime *time.Time
}

func (a *alerting) job(t *testing.T, id string) (jobRow, bool) {
	var r jobRow
	err := a.app.Pool().QueryRow(context.Background(), `SELECT version, next_slot, check_time FROM jobs WHERE id = $1`, id).
		Scan(&r.version, &r.nextSlot, &r.checkTime)
	return r, err == nil
}

// TestWatchdogRaisesMissedSchedule: the watchdog learns a job's schedule
// from its job event; while executions arrive it moves from slot to slot;
// when they stop (the trigger is down) it raises a missed-schedule incident
// once the tolerance has passed, not before, and notifies; a slot firing
// on time again resolves it. The clock is a fake the test moves.
func TestWatchdogRaisesMissedSchedule(t *testing.T) {
	t.Parallel()
	// Near the real time: the webhook receiver checks the signature's
	// timestamp against its own clock.
	t0 := time.Now().UTC().Truncate(time.Minute)
	clk := clock.NewFake(t0)
	a := startAlerting(t, fakeClock(clk))
	rcv := startReceiver(t)
	smtp := smtptest.Start(t)
	rule := missedRule(30 * time.Second)
	rule.Selector = &alertingv1.JobSelector{Labels: map[string]string{"team": "ops"}}
	setupRule(t, a, rcv, smtp, rule)

	slot := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	a.publishJob(t, "job-w", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, false)
	require.Eventually(t, func() bool {
		r, ok := a.job(t, "job-w")
		return ok && r.nextSlot != nil && r.nextSlot.Equal(slot(1))
	}, 15*time.Second, 10*time.Millisecond, "the job's first expected slot")

	// Slot 1 fires: the watchdog moves on to slot 2 after the tolerance.
	fired := exec("job-w", map[string]string{"team": "ops"}, 1, started, slot(1))
	a.publishExecutions(t, fired)
	require.Eventually(t, func() bool {
		var seen *time.Time
		err := a.app.Pool().QueryRow(context.Background(), `SELECT seen_through FROM jobs WHERE id = 'job-w'`).Scan(&seen)
		return err == nil && seen != nil && seen.Equal(slot(1))
	}, 15*time.Second, 10*time.Millisecond)
	clk.Set(slot(1).Add(31 * time.Second))
	advanceUntil(t, clk, func() bool {
		r, _ := a.job(t, "job-w")
		return r.nextSlot != nil && r.nextSlot.Equal(slot(2))
	}, "a seen slot moves the watchdog to the next")
	require.Empty(t, a.incidents(t, "job-w"))

	// The trigger stops: nothing arrives for slot 2. Within the tolerance
	// the watchdog raises nothing.
	clk.Set(slot(2).Add(29 * time.Second))
	set, err := a.app.Store().LoadRules(context.Background())
	require.NoError(t, err)
	res, err := a.app.Store().Watch(context.Background(), set, clk.Now(), 100)
	require.NoError(t, err)
	require.Zero(t, res.Opened)
	require.Empty(t, a.incidents(t, "job-w"), "slot 2 is 29 s late, within the 30 s tolerance")

	clk.Set(slot(2).Add(31 * time.Second))
	advanceUntil(t, clk, func() bool { return len(a.incidents(t, "job-w")) == 1 },
		"a missed-schedule incident once the tolerance has passed")
	inc := a.incidents(t, "job-w")[0]
	require.Equal(t, alertingv1.IncidentKind_INCIDENT_KIND_MISSED_SCHEDULE, inc.Kind)
	require.Equal(t, slot(2), inc.SlotTime.AsTime())
	require.False(t, inc.OpenTime.AsTime().Before(slot(2).Add(30*time.Second)))
	require.Contains(t, inc.Summary, "no execution for the slot")
	require.Eventually(t, func() bool { return len(rcv.received()) == 1 && len(smtp.Messages()) == 1 }, 15*time.Second, 10*time.Millisecond)

	// Still down at slot 3 and 4: the incident stays the one incident.
	clk.Set(slot(4).Add(45 * time.Second))
	advanceUntil(t, clk, func() bool {
		r, _ := a.job(t, "job-w")
		return r.nextSlot != nil && r.nextSlot.After(slot(4))
	}, "the watchdog moves past the slots missed while the incident is open")
	require.Len(t, a.incidents(t, "job-w"), 1)

	// The trigger is back: slot 5 fires on time and resolves it.
	back := exec("job-w", map[string]string{"team": "ops"}, 5, started, slot(5))
	a.publishExecutions(t, back)
	require.Eventually(t, func() bool {
		incs := a.incidents(t, "job-w")
		return len(incs) == 1 && incs[0].State == alertingv1.IncidentState_INCIDENT_STATE_RESOLVED
	}, 15*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(rcv.received()) == 2 }, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, "incident.resolved", rcv.received()[1].Payload.Type)
}

// TestJobEventsApplyInVersionOrder: an older job event arriving after a
// newer one changes nothing (a paused job stays unwatched). The job events
// are applied in batches from many subscriptions, so publish order is not
// apply order: the test waits for the service to count every event.
func TestJobEventsApplyInVersionOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UTC().Truncate(time.Minute)
	a := startAlerting(t, fakeClock(clock.NewFake(t0)))
	a.publishJob(t, "job-v", 3, eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED, t0, true)
	require.Eventually(t, func() bool { r, ok := a.job(t, "job-v"); return ok && r.version == 3 }, 15*time.Second, 10*time.Millisecond)
	a.publishJob(t, "job-v", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, false)
	require.Eventually(t, func() bool { return a.jobEvents(t, "stale") == 1 }, 15*time.Second, 10*time.Millisecond,
		"the older event is read and found stale")
	r, ok := a.job(t, "job-v")
	require.True(t, ok)
	require.Equal(t, int64(3), r.version)
	require.Nil(t, r.nextSlot, "a paused job is not watched")
	a.publishJob(t, "job-v", 4, eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED, t0, false)
	require.Eventually(t, func() bool {
		r, _ := a.job(t, "job-v")
		return r.version == 4 && r.nextSlot != nil && r.nextSlot.Equal(t0.Add(time.Minute))
	}, 15*time.Second, 10*time.Millisecond)
}

// jobEvents reads alerting_job_events_total{outcome} from /metrics (0 when
// not counted yet).
func (a *alerting) jobEvents(t *testing.T, outcome string) float64 {
	t.Helper()
	resp, err := http.Get(a.baseURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "alerting_job_events_total{") && strings.Contains(line, `outcome="`+outcome+`"`) {
			v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:]), 64)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}

// advanceUntil waits for cond while moving the fake clock forward 20 ms at
// a time: a watchdog pass that was under way when the test set the clock
// may have read the time before, and then waits for a time the test would
// otherwise never reach. The steps are small (twice real time at most), so
// the clock stays near where the test put it.
func advanceUntil(t *testing.T, clk *clock.Fake, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		if cond() {
			return true
		}
		clk.Advance(20 * time.Millisecond)
		return false
	}, 15*time.Second, 10*time.Millisecond, msg)
}
