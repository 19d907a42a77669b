package app_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/apptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/history/internal/app"
)

const (
	keyAlpha = "alpha-key-0123456789abcdef"
	keyBeta  = "beta-key-0123456789abcdef"
)

type history struct {
	cfg     app.Config
	app     *app.App
	clock   *clock.Fake
	baseURL string
}

// traceLinks is the trace-link template of every test's service.
const traceLinks = "http://127.0.0.1:16686/trace/{trace_id}"

func startHistory(t *testing.T) *history {
	t.Helper()
	_, schema := pgtest.New(t)
	cfg := app.Config{
		Common: config.Common{
			Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL(), LogLevel: "warn", ShutdownTimeout: 5 * time.Second,
		},
		APIKeys:            config.StringList{"alpha=" + keyAlpha, "beta=" + keyBeta},
		Schema:             schema,
		ExecutionsExchange: amqptest.UniqueName(t, "cronmesh.executions"),
		Queue:              amqptest.UniqueName(t, "cronmesh.history"),
		// One message per batch: with the fake clock the linger would
		// never end, and a full batch is written at once.
		Workers:           1,
		TraceLinkTemplate: traceLinks,
	}
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		_, _ = ch.QueueDelete(cfg.Queue, false, false, false)
		_ = ch.ExchangeDelete(cfg.ExecutionsExchange, false, false)
	})
	h := &history{cfg: cfg, clock: clock.NewFake(time.Now().UTC())}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h.app, h.baseURL = apptest.Start(t, "history", func(ctx context.Context) (*app.App, error) { return app.New(ctx, cfg, logger, app.WithClock(h.clock)) })
	apptest.WaitReady(t, h.baseURL, "the history service never subscribed")
	return h
}

func (h *history) client(key string, opts ...connect.ClientOption) historyv1connect.HistoryServiceClient {
	opts = append(opts, rpctest.Bearer(key))
	return historyv1connect.NewHistoryServiceClient(rpctest.H2CClient(), h.baseURL, opts...)
}

func (h *history) publish(t *testing.T, events ...*eventsv1.ExecutionEvent) {
	t.Helper()
	body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	require.NoError(t, err)
	ch := amqptest.Channel(t)
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), h.cfg.ExecutionsExchange, "execution.started", false, false,
		amqp091.Publishing{MessageId: uuid.NewString(), Body: body, DeliveryMode: amqp091.Persistent})
	require.NoError(t, err)
	require.True(t, dc.Wait())
}

func fieldOf(t *testing.T, err error) string {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, connect.CodeInvalidArgument, ce.Code(), "%v", err)
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if br, ok := v.(*errdetails.BadRequest); ok {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	t.Fatalf("no BadRequest detail in %v", err)
	return ""
}

func TestHistoryServiceEndToEnd(t *testing.T) {
	t.Parallel()
	h := startHistory(t)
	ctx := t.Context()
	now := h.clock.Now()
	job := uuid.NewString()
	nominal := now.Add(-time.Hour).Truncate(time.Second)
	id := execid.For(job, nominal)
	traceID := "4bf92f3577b34da6a3ce929d0e0e4736"
	base := func(kind eventsv1.ExecutionEventKind, attempt int32) *eventsv1.ExecutionEvent {
		return &eventsv1.ExecutionEvent{
			EventId: uuid.NewString(), Kind: kind, ExecutionId: id, JobId: job, Namespace: "alpha", Attempt: attempt,
			NominalTime: timestamppb.New(nominal), OccurTime: timestamppb.New(now), FireTime: timestamppb.New(nominal.Add(3 * time.Millisecond)),
			StartTime: timestamppb.New(nominal.Add(5 * time.Millisecond)), TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL, TraceId: traceID,
			JobDisplayName: "report",
		}
	}
	failed := base(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, 1)
	failed.Duration, failed.ResponseStatus, failed.ResponseExcerpt, failed.Reason = durationpb.New(120*time.Millisecond), 500, "database is locked", "HTTP 500"
	missedNominal := nominal.Add(-time.Hour)
	h.publish(t, failed, base(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, 1),
		&eventsv1.ExecutionEvent{EventId: uuid.NewString(), Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_MISSED,
			ExecutionId: execid.For(job, missedNominal), JobId: job, Namespace: "alpha", NominalTime: timestamppb.New(missedNominal),
			OccurTime: timestamppb.New(now), TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, Reason: "job was paused"})

	for _, proto := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}} {
		t.Run(proto.name, func(t *testing.T) {
			alpha, beta := h.client(keyAlpha, proto.opts...), h.client(keyBeta, proto.opts...)
			var list *connect.Response[historyv1.ListExecutionsResponse]
			require.Eventually(t, func() bool {
				var err error
				list, err = alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{JobId: job}))
				require.NoError(t, err)
				return len(list.Msg.GetExecutions()) == 2
			}, 30*time.Second, 20*time.Millisecond)
			first := list.Msg.GetExecutions()[0]
			assert.Equal(t, id, first.GetExecutionId())
			assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_FAILED, first.GetStatus())
			assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_MISSED, list.Msg.GetExecutions()[1].GetStatus())
			assert.Equal(t, "job was paused", list.Msg.GetExecutions()[1].GetReason())
			assert.Equal(t, "http://127.0.0.1:16686/trace/"+traceID, first.GetTraceUrl())
			assert.Empty(t, list.Msg.GetExecutions()[1].GetTraceUrl(), "a missed slot has no trace")

			search, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{
				Query: "LOCKED", TriggerKinds: []dispatchv1.TriggerKind{dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL},
				Statuses:  []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_FAILED},
				StartTime: timestamppb.New(nominal), EndTime: timestamppb.New(nominal.Add(time.Second)),
			}))
			require.NoError(t, err)
			require.Len(t, search.Msg.GetExecutions(), 1)

			got, err := alpha.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: id}))
			require.NoError(t, err)
			e := got.Msg.GetExecution()
			assert.Equal(t, traceID, e.GetTraceId())
			assert.Equal(t, "http://127.0.0.1:16686/trace/"+traceID, e.GetTraceUrl())
			assert.Equal(t, "report", e.GetJobDisplayName())
			assert.True(t, e.GetNominalTime().AsTime().Equal(nominal))
			assert.True(t, e.GetFireTime().AsTime().Equal(nominal.Add(3*time.Millisecond)))
			require.Len(t, got.Msg.GetAttempts(), 1)
			a := got.Msg.GetAttempts()[0]
			assert.Equal(t, 120*time.Millisecond, a.GetDuration().AsDuration())
			assert.EqualValues(t, 500, a.GetResponseStatus())
			assert.Equal(t, "database is locked", a.GetResponseExcerpt())
			assert.Equal(t, "HTTP 500", a.GetReason())
			assert.True(t, a.GetStartTime().AsTime().Equal(nominal.Add(5*time.Millisecond)))

			stats, err := alpha.GetJobStats(ctx, connect.NewRequest(&historyv1.GetJobStatsRequest{JobId: job}))
			require.NoError(t, err)
			assert.EqualValues(t, 1, stats.Msg.GetRuns())
			assert.EqualValues(t, 1, stats.Msg.GetFailures())
			assert.EqualValues(t, 1, stats.Msg.GetMissed())
			assert.Equal(t, 120*time.Millisecond, stats.Msg.GetDurationP99().AsDuration())
			assert.Equal(t, id, stats.Msg.GetLastRun().GetExecutionId())
			assert.Equal(t, "http://127.0.0.1:16686/trace/"+traceID, stats.Msg.GetLastRun().GetTraceUrl())

			// Namespace isolation: beta sees none of it.
			_, err = beta.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: id}))
			assert.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
			bl, err := beta.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{}))
			require.NoError(t, err)
			assert.Empty(t, bl.Msg.GetExecutions())
			bs, err := beta.GetJobStats(ctx, connect.NewRequest(&historyv1.GetJobStatsRequest{JobId: job}))
			require.NoError(t, err)
			assert.Zero(t, bs.Msg.GetRuns()+bs.Msg.GetMissed())

			// Errors.
			_, err = h.client("", proto.opts...).ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{}))
			assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err))
			_, err = alpha.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: uuid.NewString()}))
			assert.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
			invalid := []struct {
				field string
				call  func() error
			}{
				{"page_size", func() error {
					_, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{PageSize: 1001}))
					return err
				}},
				{"query", func() error {
					_, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{Query: "ab"}))
					return err
				}},
				{"statuses", func() error {
					_, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{Statuses: []historyv1.ExecutionStatus{0}}))
					return err
				}},
				{"trigger_kinds", func() error {
					_, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{TriggerKinds: []dispatchv1.TriggerKind{9}}))
					return err
				}},
				{"end_time", func() error {
					_, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{StartTime: timestamppb.New(now), EndTime: timestamppb.New(now)}))
					return err
				}},
				{"page_token", func() error {
					_, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{PageToken: "nope"}))
					return err
				}},
				{"execution_id", func() error {
					_, err := alpha.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{}))
					return err
				}},
				{"job_id", func() error {
					_, err := alpha.GetJobStats(ctx, connect.NewRequest(&historyv1.GetJobStatsRequest{}))
					return err
				}},
			}
			for _, tc := range invalid {
				assert.Equal(t, tc.field, fieldOf(t, tc.call()))
			}
		})
	}
}

// TestOutcomeAloneMakesACompleteExecution: the dispatcher emits an
// attempt's STARTED only when the attempt runs past a threshold, so a
// quick attempt reaches the history as its outcome alone. That one event
// makes the execution complete for the console and the search API: its
// status, start, fire and nominal times, duration, response, attempt and
// trace link; it is never shown running.
func TestOutcomeAloneMakesACompleteExecution(t *testing.T) {
	t.Parallel()
	h := startHistory(t)
	ctx := t.Context()
	now := h.clock.Now()
	job := uuid.NewString()
	nominal := now.Add(-time.Hour).Truncate(time.Second)
	id := execid.For(job, nominal)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	start := nominal.Add(5 * time.Millisecond)
	h.publish(t, &eventsv1.ExecutionEvent{
		EventId: uuid.NewString(), Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, ExecutionId: id, JobId: job,
		Namespace: "alpha", Attempt: 1, NominalTime: timestamppb.New(nominal), OccurTime: timestamppb.New(start.Add(7 * time.Millisecond)),
		FireTime: timestamppb.New(nominal.Add(3 * time.Millisecond)), StartTime: timestamppb.New(start), Duration: durationpb.New(7 * time.Millisecond),
		TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, TraceId: traceID, JobDisplayName: "report",
		JobLabels: map[string]string{"team": "data"}, ResponseStatus: 200,
	})

	alpha := h.client(keyAlpha)
	var list *connect.Response[historyv1.ListExecutionsResponse]
	require.Eventually(t, func() bool {
		var err error
		list, err = alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{JobId: job}))
		require.NoError(t, err)
		return len(list.Msg.GetExecutions()) == 1
	}, 30*time.Second, 20*time.Millisecond)
	listed := list.Msg.GetExecutions()[0]
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, listed.GetStatus())
	assert.Equal(t, "http://127.0.0.1:16686/trace/"+traceID, listed.GetTraceUrl())

	got, err := alpha.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: id}))
	require.NoError(t, err)
	e := got.Msg.GetExecution()
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, e.GetStatus())
	assert.EqualValues(t, 1, e.GetAttempt())
	assert.Equal(t, "report", e.GetJobDisplayName())
	assert.Equal(t, dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, e.GetTriggerKind())
	assert.True(t, e.GetNominalTime().AsTime().Equal(nominal))
	assert.True(t, e.GetFireTime().AsTime().Equal(nominal.Add(3*time.Millisecond)))
	assert.True(t, e.GetStartTime().AsTime().Equal(start))
	assert.Equal(t, 7*time.Millisecond, e.GetDuration().AsDuration())
	assert.EqualValues(t, 200, e.GetResponseStatus())
	assert.Equal(t, traceID, e.GetTraceId())
	require.Len(t, got.Msg.GetAttempts(), 1)
	a := got.Msg.GetAttempts()[0]
	assert.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, a.GetStatus())
	assert.True(t, a.GetStartTime().AsTime().Equal(start))
	assert.Equal(t, 7*time.Millisecond, a.GetDuration().AsDuration())

	search, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{
		JobId: job, Statuses: []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED},
		StartTime: timestamppb.New(nominal), EndTime: timestamppb.New(nominal.Add(time.Second)),
	}))
	require.NoError(t, err)
	require.Len(t, search.Msg.GetExecutions(), 1)
	running, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{
		JobId: job, Statuses: []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_RUNNING},
	}))
	require.NoError(t, err)
	assert.Empty(t, running.Msg.GetExecutions(), "never shown running")

	stats, err := alpha.GetJobStats(ctx, connect.NewRequest(&historyv1.GetJobStatsRequest{JobId: job}))
	require.NoError(t, err)
	assert.EqualValues(t, 1, stats.Msg.GetRuns())
	assert.Zero(t, stats.Msg.GetFailures())
	assert.Equal(t, 7*time.Millisecond, stats.Msg.GetDurationP99().AsDuration())
	assert.Equal(t, id, stats.Msg.GetLastRun().GetExecutionId())
}

// TestBadTraceLinkTemplate: a template that cannot make links stops the
// service at start, naming the flag, before it touches anything.
func TestBadTraceLinkTemplate(t *testing.T) {
	t.Parallel()
	for _, tpl := range []string{"http://127.0.0.1:16686/trace/", "127.0.0.1:16686/trace/{trace_id}"} {
		cfg := app.Config{
			Common:            config.Common{Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL()},
			APIKeys:           config.StringList{"alpha=" + keyAlpha},
			TraceLinkTemplate: tpl,
		}
		_, err := app.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		require.Error(t, err, tpl)
		assert.Contains(t, err.Error(), "--trace-link-template")
		assert.Contains(t, err.Error(), tpl)
	}
}

func TestRetentionDrivenByTheClock(t *testing.T) {
	t.Parallel()
	h := startHistory(t)
	ctx := t.Context()
	now := h.clock.Now()
	job := uuid.NewString()
	var events []*eventsv1.ExecutionEvent
	for d := range 3 {
		n := now.AddDate(0, 0, -d).Truncate(time.Second)
		events = append(events, &eventsv1.ExecutionEvent{
			EventId: uuid.NewString(), Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, ExecutionId: execid.For(job, n),
			JobId: job, Namespace: "alpha", Attempt: 1, NominalTime: timestamppb.New(n), OccurTime: timestamppb.New(n),
		})
	}
	h.publish(t, events...)
	alpha := h.client(keyAlpha)
	count := func() int {
		res, err := alpha.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{JobId: job}))
		require.NoError(t, err)
		return len(res.Msg.GetExecutions())
	}
	require.Eventually(t, func() bool { return count() == 3 }, 30*time.Second, 20*time.Millisecond)

	// 29 days on, the execution of 2 days ago is 31 days old and its whole
	// day goes; the two newer ones stay.
	require.Eventually(t, func() bool { return h.clock.Waiters() > 0 }, 30*time.Second, time.Millisecond, "the maintainer is not waiting")
	h.clock.Advance(29 * 24 * time.Hour)
	select {
	case <-h.app.Maintained():
	case <-time.After(30 * time.Second):
		t.Fatal("maintenance did not run")
	}
	assert.Equal(t, 2, count())
	days, err := h.app.Store().Days(ctx)
	require.NoError(t, err)
	assert.Len(t, days, 31+3, "the retention's days, today and 3 ahead")
}
