package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/apptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/libs/webhooksign"
	"github.com/cronmesh/cronmesh/services/alerting/internal/app"
	"github.com/cronmesh/cronmesh/services/alerting/internal/payload"
)

const (
	keyAlpha = "alpha-key-0123456789abcdef"
	keyBeta  = "beta-key-0123456789abcdef"
	// testSecret is a valid Standard Webhooks secret (24 bytes).
	testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// alerting is one running alerting service against a throwaway schema and
// its own exchanges and queues.
type alerting struct {
	app     *app.App
	cfg     app.Config
	baseURL string
}

type option func(*app.Config)

func startAlerting(t *testing.T, opts ...option) *alerting {
	t.Helper()
	_, schema := pgtest.New(t)
	execExchange := amqptest.UniqueName(t, "cronmesh.executions")
	jobsExchange := amqptest.UniqueName(t, "cronmesh.jobs")
	execQueue := amqptest.UniqueName(t, "cronmesh.alerting.executions")
	jobsQueue := amqptest.UniqueName(t, "cronmesh.alerting.jobs")
	amqptest.DeleteOnCleanup(t, []string{execQueue, jobsQueue}, []string{execExchange, jobsExchange})
	cfg := app.Config{
		Common: config.Common{
			Listen:          "127.0.0.1:0",
			PostgresURL:     pgtest.URL(),
			AMQPURL:         amqptest.URL(),
			LogLevel:        "warn",
			ShutdownTimeout: 5 * time.Second,
		},
		APIKeys:     config.StringList{"alpha=" + keyAlpha, "beta=" + keyBeta},
		Schema:      schema,
		SendTimeout: 5 * time.Second,
		// The receivers of these tests listen on loopback, which the SSRF
		// guard refuses unless allowed (TestWebhookSSRFGuard checks that).
		AllowNetworks: config.StringList{"127.0.0.0/8", "::1/128"},
		// One worker: messages are evaluated in publish order, so a test
		// knows everything before a marker event has been evaluated.
		Workers:            1,
		ExecutionsExchange: execExchange,
		ExecutionsQueue:    execQueue,
		JobsExchange:       jobsExchange,
		JobsQueue:          jobsQueue,
		// Retries of a channel that is down come quickly (not schedule
		// time: the watchdog's tests drive a fake clock instead).
		NotifyPoll:       50 * time.Millisecond,
		NotifyBackoff:    50 * time.Millisecond,
		NotifyMaxBackoff: 200 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, baseURL := apptest.Start(t, "alerting", func(ctx context.Context) (*app.App, error) { return app.New(ctx, cfg, logger) })
	select {
	case <-a.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("alerting did not subscribe to its queues")
	}
	return &alerting{app: a, cfg: cfg, baseURL: baseURL}
}

func (a *alerting) client(key string, opts ...connect.ClientOption) alertingv1connect.AlertServiceClient {
	opts = append(opts, connect.WithInterceptors(rpctest.BearerInterceptor(key)))
	return alertingv1connect.NewAlertServiceClient(rpctest.H2CClient(), a.baseURL, opts...)
}

// receiver is an httptest webhook receiver that verifies every signature
// and records the notifications; it answers 503 while down.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	down bool
	got  []received
	// refused counts requests answered 503.
	refused int
}

type received struct {
	ID      string
	Payload payload.Payload
}

func startReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.down {
			r.refused++
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if err := webhooksign.Verify(testSecret, req.Header, body, 0, time.Now()); err != nil {
			t.Errorf("webhook signature: %v", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var p payload.Payload
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("webhook payload: %v", err)
		}
		r.got = append(r.got, received{ID: req.Header.Get(webhooksign.HeaderWebhookID), Payload: p})
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func (r *receiver) refusals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

func webhookChannel(url string) *alertingv1.Channel {
	return &alertingv1.Channel{
		DisplayName: "ops webhook",
		Kind:        &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: url, SigningSecret: testSecret}},
	}
}

func failuresRule(n int32, channels ...string) *alertingv1.Rule {
	return &alertingv1.Rule{
		DisplayName: "failing",
		Condition:   &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: n}},
		ChannelIds:  channels,
	}
}

func missedRule(tolerance time.Duration, channels ...string) *alertingv1.Rule {
	return &alertingv1.Rule{
		DisplayName: "late",
		Condition:   &alertingv1.Rule_MissedSchedule{MissedSchedule: &alertingv1.MissedSchedule{Tolerance: durationpb.New(tolerance)}},
		ChannelIds:  channels,
	}
}

// fakeClock returns an option that drives the service with a fake clock.
func fakeClock(c *clock.Fake) option { return func(cfg *app.Config) { cfg.Clock = c } }

// publishExecutions publishes one ExecutionEventBatch message, routed by
// its first event's kind as the dispatcher does.
func (a *alerting) publishExecutions(t *testing.T, events ...*eventsv1.ExecutionEvent) {
	t.Helper()
	body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	require.NoError(t, err)
	key := "execution." + strings.ToLower(strings.TrimPrefix(events[0].Kind.String(), "EXECUTION_EVENT_KIND_"))
	ch := amqptest.Channel(t)
	require.NoError(t, ch.Confirm(false))
	confirm, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), a.cfg.ExecutionsExchange, key, true, false,
		amqp091.Publishing{ContentType: "application/x-protobuf", Body: body, DeliveryMode: amqp091.Persistent})
	require.NoError(t, err)
	ok, err := confirm.WaitContext(context.Background())
	require.NoError(t, err)
	require.True(t, ok, "the broker refused the message")
	require.NoError(t, ch.Close())
}

// exec builds an execution event of a job of namespace alpha.
func exec(job string, labels map[string]string, n int, kind eventsv1.ExecutionEventKind, nominal time.Time) *eventsv1.ExecutionEvent {
	ev := &eventsv1.ExecutionEvent{
		EventId:        fmt.Sprintf("ev-%s-%d-%d", job, n, kind),
		Kind:           kind,
		ExecutionId:    fmt.Sprintf("exe-%s-%d", job, n),
		JobId:          job,
		Namespace:      "alpha",
		Attempt:        1,
		NominalTime:    timestamppb.New(nominal),
		OccurTime:      timestamppb.New(nominal.Add(time.Second)),
		FireTime:       timestamppb.New(nominal),
		TriggerKind:    dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
		JobDisplayName: "nightly " + job,
		JobLabels:      labels,
	}
	if kind == eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED {
		ev.Reason = "HTTP 500"
	}
	return ev
}

// waitEvaluated waits until the execution event recorded for (execution,
// kind) is in the table: with one worker, every message published before
// it has been evaluated too.
func (a *alerting) waitEvaluated(t *testing.T, ev *eventsv1.ExecutionEvent) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := a.app.Pool().QueryRow(context.Background(), `SELECT count(*) FROM execution_events WHERE execution_id = $1 AND kind = $2`,
			ev.ExecutionId, int16(ev.Kind)).Scan(&n)
		return err == nil && n == 1
	}, 15*time.Second, 10*time.Millisecond, "event %s not evaluated", ev.EventId)
}

// incidents lists the namespace's incidents of a job.
func (a *alerting) incidents(t *testing.T, job string) []*alertingv1.Incident {
	t.Helper()
	resp, err := a.client(keyAlpha).ListIncidents(context.Background(), connect.NewRequest(&alertingv1.ListIncidentsRequest{JobId: job}))
	require.NoError(t, err)
	return resp.Msg.Incidents
}

func timestampAt(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
