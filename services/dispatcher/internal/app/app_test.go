package app_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/apptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/app"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
)

const (
	keyAlpha = "alpha-key-0123456789abcdef"
	keyBeta  = "beta-key-0123456789abcdef"
	secret   = "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"
)

// target is the fake Deliverer: a URL ending in "/gone" is a permanent
// failure (410), anything else succeeds. It records every attempt.
type target struct {
	mu    sync.Mutex
	calls []*dispatchv1.DispatchRequest
}

func (f *target) Prepare(_ context.Context, req *dispatchv1.DispatchRequest) deliver.Attempt {
	return deliver.AttemptFunc(func(context.Context) deliver.Outcome { return f.deliver(req) })
}

func (f *target) deliver(req *dispatchv1.DispatchRequest) deliver.Outcome {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.mu.Unlock()
	if strings.HasSuffix(req.GetTarget().GetHttp().GetUrl(), "/gone") {
		return deliver.Outcome{Result: deliver.Permanent, StatusCode: 410, Reason: "HTTP 410", Excerpt: "gone"}
	}
	return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200}
}

func (f *target) of(executionID string) []*dispatchv1.DispatchRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*dispatchv1.DispatchRequest
	for _, c := range f.calls {
		if c.ExecutionId == executionID {
			out = append(out, c)
		}
	}
	return out
}

// dispatcher is one running dispatcher on throwaway names.
type dispatcher struct {
	cfg     app.Config
	pool    *pgxpool.Pool // on the dispatcher's schema
	target  *target
	baseURL string
	events  *events
}

// dispatcherOption changes a test dispatcher's config and app options
// (which hold the fake deliverer by default).
type dispatcherOption func(cfg *app.Config, opts *[]app.Option)

// realDelivery makes the dispatcher deliver with the real HTTP/AMQP client.
func realDelivery(_ *app.Config, opts *[]app.Option) { *opts = nil }

func startDispatcher(t *testing.T, options ...dispatcherOption) *dispatcher {
	t.Helper()
	pool, schema := pgtest.New(t)
	cfg := app.Config{
		Common: config.Common{
			Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL(), LogLevel: "warn", ShutdownTimeout: 5 * time.Second,
		},
		APIKeys:            config.StringList{"alpha=" + keyAlpha, "beta=" + keyBeta},
		Schema:             schema,
		DispatchExchange:   amqptest.UniqueName(t, "cronmesh.dispatch"),
		DispatchQueue:      amqptest.UniqueName(t, "cronmesh.dispatchq"),
		RetryExchange:      amqptest.UniqueName(t, "cronmesh.retry"),
		RetryQueue:         amqptest.UniqueName(t, "cronmesh.retryq"),
		RetryTiers:         app.DurationList{100 * time.Millisecond, time.Second},
		DeadExchange:       amqptest.UniqueName(t, "cronmesh.dead"),
		DeadQueue:          amqptest.UniqueName(t, "cronmesh.deadq"),
		ExecutionsExchange: amqptest.UniqueName(t, "cronmesh.executions"),
		HighWorkers:        2, NormalWorkers: 2, LowWorkers: 2, DrainerWorkers: 2,
	}
	d := &dispatcher{pool: pool, target: &target{}, events: &events{}}
	appOpts := []app.Option{app.WithDeliverer(d.target)}
	ownQueues := cfg.DispatchQueue
	for _, o := range options {
		o(&cfg, &appOpts)
	}
	d.cfg = cfg
	eventsQueue := amqptest.DeclareTopicQueue(t, cfg.ExecutionsExchange, "#")
	d.events.consume(t, eventsQueue)
	// A replica on another dispatcher's names (replicaOf) leaves their
	// deletion to it: deleting queues under a running dispatcher closes its
	// channels.
	t.Cleanup(func() {
		if cfg.DispatchQueue != ownQueues {
			return
		}
		ch := amqptest.Channel(t)
		queues := []string{cfg.DeadQueue}
		for _, b := range broker.DispatchQueues(cfg.DispatchExchange, cfg.DispatchQueue) {
			queues = append(queues, b.Queue)
		}
		for _, b := range broker.RetryTiers(cfg.RetryExchange, cfg.RetryQueue, cfg.DispatchExchange, cfg.RetryTiers) {
			queues = append(queues, b.Queue)
		}
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, x := range []string{cfg.DispatchExchange, cfg.RetryExchange, cfg.DeadExchange} {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, d.baseURL = apptest.Start(t, "dispatcher", func(ctx context.Context) (*app.App, error) { return app.New(ctx, cfg, logger, appOpts...) })
	apptest.WaitReady(t, d.baseURL, "the dispatcher never subscribed")
	return d
}

func (d *dispatcher) client(key string, opts ...connect.ClientOption) dispatcherv1connect.DispatchServiceClient {
	opts = append(opts, rpctest.Bearer(key))
	return dispatcherv1connect.NewDispatchServiceClient(rpctest.H2CClient(), d.baseURL, opts...)
}

// dispatch publishes a request for job of namespace to url, as the trigger
// does, and returns it.
func (d *dispatcher) dispatch(t *testing.T, namespace, job, url string, nominal time.Time) *dispatchv1.DispatchRequest {
	t.Helper()
	req := d.request(namespace, job, url, nominal)
	d.publish(t, req)
	return req
}

// request is the attempt-1 request dispatch publishes.
func (d *dispatcher) request(namespace, job, url string, nominal time.Time) *dispatchv1.DispatchRequest {
	return &dispatchv1.DispatchRequest{
		ExecutionId: execid.For(job, nominal), JobId: job, Namespace: namespace, Attempt: 1,
		NominalTime: timestamppb.New(nominal), FireTime: timestamppb.New(nominal),
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method: "POST", Url: url, SigningSecret: secret, Timeout: durationpb.New(time.Second),
		}}},
		RetryPolicy: &registryv1.RetryPolicy{MaxRetries: proto.Int32(0)},
		Priority:    registryv1.Priority_PRIORITY_LOW,
	}
}

func (d *dispatcher) publish(t *testing.T, req *dispatchv1.DispatchRequest) {
	t.Helper()
	body, err := proto.Marshal(req)
	require.NoError(t, err)
	ch := amqptest.Channel(t)
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), d.cfg.DispatchExchange,
		broker.DispatchRoutingKey(pipeline.PriorityName(req.Priority)), false, false,
		amqp091.Publishing{MessageId: req.ExecutionId, Body: body})
	require.NoError(t, err)
	require.True(t, dc.Wait())
}

// events collects the lifecycle events.
type events struct {
	mu  sync.Mutex
	all []*eventsv1.ExecutionEvent
}

func (e *events) consume(t *testing.T, queue string) {
	deliveries, err := amqptest.Channel(t).Consume(queue, "", true, false, false, false, nil)
	require.NoError(t, err)
	go func() {
		for d := range deliveries {
			batch := &eventsv1.ExecutionEventBatch{}
			if proto.Unmarshal(d.Body, batch) == nil {
				e.mu.Lock()
				e.all = append(e.all, batch.Events...)
				e.mu.Unlock()
			}
		}
	}()
}

func (e *events) has(executionID string, kind eventsv1.ExecutionEventKind) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.all {
		if ev.ExecutionId == executionID && ev.Kind == kind {
			return true
		}
	}
	return false
}

// listAll pages through the dead letters (page size 1) with c.
func listAll(t *testing.T, c dispatcherv1connect.DispatchServiceClient, job string) []*dispatcherv1.DeadLetter {
	t.Helper()
	var out []*dispatcherv1.DeadLetter
	token := ""
	for {
		resp, err := c.ListDeadLetters(context.Background(), connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{JobId: job, PageSize: 1, PageToken: token}))
		require.NoError(t, err)
		out = append(out, resp.Msg.DeadLetters...)
		if resp.Msg.NextPageToken == "" {
			return out
		}
		token = resp.Msg.NextPageToken
	}
}

// TestDispatchService runs the whole API over each protocol: list and
// page, namespace isolation, redrive with an override, redrive of a job
// and of a namespace, purge, cancel.
func TestDispatchService(t *testing.T) {
	t.Parallel()
	for _, p := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			testDispatchService(t, p.opts...)
		})
	}
}

func testDispatchService(t *testing.T, opts ...connect.ClientOption) {
	d := startDispatcher(t)
	ctx := context.Background()
	jobA, jobB, jobBeta := uuid.NewString(), uuid.NewString(), uuid.NewString()
	base := time.Now().Truncate(time.Second)
	a1 := d.dispatch(t, "alpha", jobA, "https://a.example/gone", base)
	a2 := d.dispatch(t, "alpha", jobA, "https://a.example/gone", base.Add(time.Second))
	b1 := d.dispatch(t, "alpha", jobB, "https://b.example/gone", base)
	beta := d.dispatch(t, "beta", jobBeta, "https://beta.example/gone", base)

	alpha, betaClient := d.client(keyAlpha, opts...), d.client(keyBeta, opts...)
	require.Eventually(t, func() bool { return len(listAll(t, alpha, "")) == 3 }, 30*time.Second, 20*time.Millisecond,
		"the permanent failures reach the dead-letter store")

	all := listAll(t, alpha, "")
	require.Len(t, all, 3)
	for i := 1; i < len(all); i++ {
		require.False(t, all[i].DeadTime.AsTime().After(all[i-1].DeadTime.AsTime()), "newest first")
	}
	for _, dl := range all {
		require.Empty(t, dl.Request.GetTarget().GetHttp().GetSigningSecret(), "the secret never leaves")
		require.Equal(t, "HTTP 410", dl.Reason)
		require.EqualValues(t, 410, dl.ResponseStatus)
		require.Equal(t, "gone", dl.ResponseExcerpt)
		require.EqualValues(t, 1, dl.Attempt)
		require.NotEmpty(t, dl.Id)
	}
	onlyA := listAll(t, alpha, jobA)
	require.ElementsMatch(t, []string{a1.ExecutionId, a2.ExecutionId}, []string{onlyA[0].ExecutionId, onlyA[1].ExecutionId})
	// beta's dead letter may be drained after alpha's three.
	require.Eventually(t, func() bool { return len(listAll(t, betaClient, "")) == 1 }, 30*time.Second, 20*time.Millisecond)
	betaList := listAll(t, betaClient, "")
	require.Len(t, betaList, 1, "namespaces are isolated")
	require.Equal(t, beta.ExecutionId, betaList[0].ExecutionId)

	// Redrive with an override: the next attempt of the same execution,
	// the first of a new series, to the new URL, signed with the job's
	// secret; the dead letter is gone.
	var deadA1 *dispatcherv1.DeadLetter
	for _, dl := range listAll(t, alpha, jobA) {
		if dl.ExecutionId == a1.ExecutionId {
			deadA1 = dl
		}
	}
	require.NotNil(t, deadA1)
	_, err := betaClient.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: deadA1.Id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound, "another namespace's dead letter")
	override := &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Method: "PUT", Url: "https://a.example/fixed"}}}
	redrive, err := alpha.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: deadA1.Id, TargetOverride: override}))
	require.NoError(t, err)
	require.Equal(t, a1.ExecutionId, redrive.Msg.ExecutionId)
	require.Eventually(t, func() bool {
		return d.events.has(a1.ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED)
	},
		30*time.Second, 10*time.Millisecond)
	calls := d.target.of(a1.ExecutionId)
	require.Len(t, calls, 2)
	require.EqualValues(t, deadA1.Attempt+1, calls[1].Attempt, "attempt numbers go on after the dead letter's")
	require.Equal(t, calls[1].Attempt, calls[1].FirstAttempt, "the redrive starts a series")
	require.Equal(t, "https://a.example/fixed", calls[1].Target.GetHttp().Url)
	require.Equal(t, "PUT", calls[1].Target.GetHttp().Method)
	require.Equal(t, secret, calls[1].Target.GetHttp().SigningSecret, "an override without a secret keeps the job's")
	_, err = alpha.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: deadA1.Id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound, "redriven once")

	// Redrive a job's dead letters: they are delivered again (and die
	// again, the target still answers 410).
	many, err := alpha.RedriveDeadLetters(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLettersRequest{JobId: jobB}))
	require.NoError(t, err)
	require.EqualValues(t, 1, many.Msg.Redriven)
	require.Eventually(t, func() bool { return len(d.target.of(b1.ExecutionId)) == 2 }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(listAll(t, alpha, jobB)) == 1 }, 30*time.Second, 20*time.Millisecond,
		"dead again after the redrive")

	// Purge.
	onlyA = listAll(t, alpha, jobA)
	require.Len(t, onlyA, 1)
	_, err = betaClient.PurgeDeadLetter(ctx, connect.NewRequest(&dispatcherv1.PurgeDeadLetterRequest{Id: onlyA[0].Id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound, "another namespace's dead letter")
	_, err = alpha.PurgeDeadLetter(ctx, connect.NewRequest(&dispatcherv1.PurgeDeadLetterRequest{Id: onlyA[0].Id}))
	require.NoError(t, err)
	_, err = alpha.PurgeDeadLetter(ctx, connect.NewRequest(&dispatcherv1.PurgeDeadLetterRequest{Id: onlyA[0].Id}))
	rpctest.RequireCode(t, err, connect.CodeNotFound, "purged")
	require.Empty(t, listAll(t, alpha, jobA))
	require.Len(t, d.target.of(a2.ExecutionId), 1, "a purged dead letter is not delivered")

	// Cancel: the pending retry that comes due is not delivered. (An
	// execution of its own: a2 is dead, so the dedupe would drop a retry
	// of it before the cancellation is looked at.)
	cancelled := &dispatchv1.DispatchRequest{}
	proto.Merge(cancelled, a2)
	cancelled.ExecutionId = execid.For(jobA, base.Add(2*time.Second))
	cancelled.Attempt = 2
	for range 2 {
		_, err = alpha.CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: cancelled.ExecutionId}))
		require.NoError(t, err, "idempotent")
	}
	d.publish(t, cancelled)
	require.Eventually(t, func() bool {
		return d.events.has(cancelled.ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED)
	},
		30*time.Second, 10*time.Millisecond)
	require.Empty(t, d.target.of(cancelled.ExecutionId))

	// The whole namespace.
	_, err = betaClient.RedriveDeadLetters(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLettersRequest{}))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(d.target.of(beta.ExecutionId)) == 2 }, 30*time.Second, 10*time.Millisecond)
}

// TestCompletionsLandInTheirDay: the dispatcher creates the completion
// records' day partitions before it consumes, so that a record lands in
// its slot's day, not in the default partition, whose rows in a day's range
// would forbid creating that day later (ADR 0028).
func TestCompletionsLandInTheirDay(t *testing.T) {
	t.Parallel()
	d := startDispatcher(t)
	nominal := time.Now().Truncate(time.Second)
	req := d.dispatch(t, "alpha", uuid.NewString(), "https://a.example/ok", nominal)
	var partition string
	require.Eventually(t, func() bool {
		return d.pool.QueryRow(t.Context(), `
			SELECT tableoid::regclass::text FROM completed_attempts WHERE nominal_time = $1 AND execution_id = $2`,
			nominal, uuid.MustParse(req.ExecutionId)).Scan(&partition) == nil
	}, 30*time.Second, 20*time.Millisecond, "the delivered attempt is recorded")
	require.Equal(t, "completed_attempts_p"+nominal.UTC().Format("20060102"), partition)
}

func TestDeadLettersNeverShowSecretHeaders(t *testing.T) {
	t.Parallel()
	d := startDispatcher(t)
	ctx := context.Background()
	job := uuid.NewString()
	nominal := time.Now().Truncate(time.Second)
	req := &dispatchv1.DispatchRequest{
		ExecutionId: execid.For(job, nominal), JobId: job, Namespace: "alpha", Attempt: 1,
		NominalTime: timestamppb.New(nominal), FireTime: timestamppb.New(nominal),
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method: "POST", Url: "https://a.example/gone", SigningSecret: secret, Timeout: durationpb.New(time.Second),
			SecretHeaders: map[string]string{"X-Token": "tok-s3cret"},
		}}},
		RetryPolicy: &registryv1.RetryPolicy{MaxRetries: proto.Int32(0)},
		Priority:    registryv1.Priority_PRIORITY_LOW,
	}
	d.publish(t, req)
	alpha := d.client(keyAlpha)
	require.Eventually(t, func() bool { return len(listAll(t, alpha, job)) == 1 }, 30*time.Second, 20*time.Millisecond)
	dead := listAll(t, alpha, job)[0]
	require.Equal(t, map[string]string{"X-Token": ""}, dead.Request.GetTarget().GetHttp().GetSecretHeaders())
	require.NotContains(t, protojson.Format(dead), "tok-s3cret")

	// An override to another origin does not get the stored header; the
	// dead letter stays.
	elsewhere := &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "https://attacker.example/collect"}}}
	_, err := alpha.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: dead.Id, TargetOverride: elsewhere}))
	rpctest.RequireCode(t, err, connect.CodeInvalidArgument, "secret header to another origin")
	var cerr *connect.Error
	require.ErrorAs(t, err, &cerr)
	var fields []string
	for _, detail := range cerr.Details() {
		v, derr := detail.Value()
		require.NoError(t, derr)
		for _, fv := range v.(*errdetails.BadRequest).FieldViolations {
			fields = append(fields, fv.Field)
		}
	}
	require.Equal(t, []string{`target_override.http.secret_headers["X-Token"]`}, fields)
	require.Len(t, listAll(t, alpha, job), 1)
	// To the same origin it is kept and delivered.
	fixed := &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "https://a.example/fixed"}}}
	_, err = alpha.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: dead.Id, TargetOverride: fixed}))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(d.target.of(req.ExecutionId)) == 2 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, map[string]string{"X-Token": "tok-s3cret"}, d.target.of(req.ExecutionId)[1].GetTarget().GetHttp().GetSecretHeaders())
}

func TestDispatchServiceErrors(t *testing.T) {
	t.Parallel()
	d := startDispatcher(t)
	ctx := context.Background()
	c := d.client(keyAlpha)
	tests := []struct {
		name  string
		call  func() error
		code  connect.Code
		field string
	}{
		{"no key", func() error {
			_, err := d.client("").ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{}))
			return err
		}, connect.CodeUnauthenticated, ""},
		{"no key over gRPC", func() error {
			_, err := d.client("", connect.WithGRPC()).PurgeDeadLetter(ctx, connect.NewRequest(&dispatcherv1.PurgeDeadLetterRequest{Id: uuid.NewString()}))
			return err
		}, connect.CodeUnauthenticated, ""},
		{"invalid over gRPC", func() error {
			_, err := d.client(keyAlpha, connect.WithGRPC()).ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{PageSize: -1}))
			return err
		}, connect.CodeInvalidArgument, "page_size"},
		{"wrong key", func() error {
			_, err := d.client("wrong-key-0123456789abcdef").CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: uuid.NewString()}))
			return err
		}, connect.CodeUnauthenticated, ""},
		{"page size", func() error {
			_, err := c.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{PageSize: 1001}))
			return err
		}, connect.CodeInvalidArgument, "page_size"},
		{"page token", func() error {
			_, err := c.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{PageToken: "%%%"}))
			return err
		}, connect.CodeInvalidArgument, "page_token"},
		{"job id", func() error {
			_, err := c.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{JobId: "nope"}))
			return err
		}, connect.CodeInvalidArgument, "job_id"},
		{"redrive without id", func() error {
			_, err := c.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{}))
			return err
		}, connect.CodeInvalidArgument, "id"},
		{"redrive unknown", func() error {
			_, err := c.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: uuid.NewString()}))
			return err
		}, connect.CodeNotFound, ""},
		{"override not http(s)", func() error {
			_, err := c.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: uuid.NewString(),
				TargetOverride: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "ftp://x.example/"}}}}))
			return err
		}, connect.CodeInvalidArgument, "target_override.http.url"},
		{"override relative", func() error {
			_, err := c.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: uuid.NewString(),
				TargetOverride: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "/hook"}}}}))
			return err
		}, connect.CodeInvalidArgument, "target_override.http.url"},
		{"override sets traceparent", func() error {
			_, err := c.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: uuid.NewString(),
				TargetOverride: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
					Url: "https://x.example/", Headers: map[string]string{"Traceparent": "00-forged"},
				}}}}))
			return err
		}, connect.CodeInvalidArgument, `target_override.http.headers["Traceparent"]`},
		{"override body over the limit", func() error {
			_, err := c.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: uuid.NewString(),
				TargetOverride: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
					Url: "https://x.example/", Body: strings.Repeat("x", targetcheck.MaxBody+1),
				}}}}))
			return err
		}, connect.CodeInvalidArgument, "target_override.http.body"},
		{"override into cronmesh's exchanges", func() error {
			_, err := c.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: uuid.NewString(),
				TargetOverride: &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{
					Exchange: "cronmesh.dispatch", RoutingKey: "dispatch.high",
				}}}}))
			return err
		}, connect.CodeInvalidArgument, "target_override.amqp.exchange"},
		{"override empty", func() error {
			_, err := c.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: uuid.NewString(),
				TargetOverride: &registryv1.Target{}}))
			return err
		}, connect.CodeInvalidArgument, "target_override"},
		{"redrive many, bad job", func() error {
			_, err := c.RedriveDeadLetters(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLettersRequest{JobId: "x"}))
			return err
		}, connect.CodeInvalidArgument, "job_id"},
		{"purge without id", func() error {
			_, err := c.PurgeDeadLetter(ctx, connect.NewRequest(&dispatcherv1.PurgeDeadLetterRequest{}))
			return err
		}, connect.CodeInvalidArgument, "id"},
		{"purge unknown", func() error {
			_, err := c.PurgeDeadLetter(ctx, connect.NewRequest(&dispatcherv1.PurgeDeadLetterRequest{Id: "not-a-uuid"}))
			return err
		}, connect.CodeNotFound, ""},
		{"cancel without id", func() error {
			_, err := c.CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{}))
			return err
		}, connect.CodeInvalidArgument, "execution_id"},
		{"cancel bad id", func() error {
			_, err := c.CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: "x"}))
			return err
		}, connect.CodeInvalidArgument, "execution_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call()
			rpctest.RequireCode(t, err, tt.code, tt.name)
			if tt.field == "" {
				return
			}
			var cerr *connect.Error
			require.True(t, errors.As(err, &cerr))
			var fields []string
			for _, detail := range cerr.Details() {
				v, derr := detail.Value()
				require.NoError(t, derr)
				if br, ok := v.(*errdetails.BadRequest); ok {
					for _, fv := range br.FieldViolations {
						fields = append(fields, fv.Field)
					}
				}
			}
			require.Contains(t, fields, tt.field)
		})
	}
	resp, err := c.RedriveDeadLetters(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLettersRequest{}))
	require.NoError(t, err)
	require.Zero(t, resp.Msg.Redriven, "nothing to redrive")
}

func TestConfigFlags(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	var cfg app.Config
	cfg.Register(fs)
	require.Equal(t, app.DefaultListen, cfg.Listen)
	require.Equal(t, app.DurationList(broker.DefaultRetryTiers()), cfg.RetryTiers)
	require.Equal(t, pipeline.DefaultStartedEventAfter, cfg.StartedEventAfter)
	env := map[string]string{"CRONMESH_RETRY_TIERS": "1s, 250ms", "CRONMESH_ALLOW_NETWORKS": "127.0.0.0/8,::1"}
	require.NoError(t, config.Parse(fs, []string{"--workers-high", "3", "--started-event-after", "0"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	require.Equal(t, app.DurationList{time.Second, 250 * time.Millisecond}, cfg.RetryTiers)
	require.Equal(t, 3, cfg.HighWorkers)
	require.Zero(t, cfg.StartedEventAfter, "0: STARTED at the start of every attempt")
	require.Equal(t, config.StringList{"127.0.0.0/8", "::1"}, cfg.AllowNetworks)
	require.Equal(t, "1s,250ms", cfg.RetryTiers.String())
	require.Error(t, fs.Set("retry-tiers", "soon"))
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	base := app.Config{Common: config.Common{Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL()},
		APIKeys: config.StringList{"alpha=" + keyAlpha}}
	tests := []struct {
		name string
		mod  func(*app.Config)
		want string
	}{
		{"no keys", func(c *app.Config) { c.APIKeys = nil }, "no API keys"},
		{"bad network", func(c *app.Config) { c.AllowNetworks = config.StringList{"localhost"} }, "--allow-networks"},
		{"a dispatch exchange a namespace could publish to", func(c *app.Config) { c.DispatchExchange = "team-a.dispatch" },
			`--dispatch-exchange "team-a.dispatch" could be published to by the AMQP targets of namespace "team-a"`},
		{"retry queues a namespace could publish to", func(c *app.Config) { c.RetryQueue = "retries" },
			`--retry-queue "retries" could be published to by the AMQP targets of namespace "retries"`},
		{"an allow-list that reaches the dispatch exchange", func(c *app.Config) {
			c.DispatchExchange = "ops_dispatch"
			c.TargetAMQPAllow = config.StringList{"alpha=ops_*"}
		}, `--dispatch-exchange "ops_dispatch" is on the AMQP allow-list of namespace "alpha"`},
		{"a malformed allow-list", func(c *app.Config) { c.TargetAMQPAllow = config.StringList{"alpha"} }, "--target-amqp-allow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := base
			tt.mod(&cfg)
			_, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestAMQPTargetsAreCheckedAtDelivery runs the real AMQP client against
// RabbitMQ with a renamed dispatch exchange: a request stored before the
// rules (or forged) that publishes into it or into another namespace's
// exchange is dead-lettered with the reason, and nothing is published.
func TestAMQPTargetsAreCheckedAtDelivery(t *testing.T) {
	t.Parallel()
	d := startDispatcher(t, realDelivery, func(c *app.Config, _ *[]app.Option) {
		c.DispatchExchange = amqptest.UniqueName(t, "ops_dispatch") // renamed, out of any namespace's reach
	})
	own := amqptest.UniqueName(t, "alpha")
	ownQueue := amqptest.DeclareTopicQueue(t, own, "#")
	other := amqptest.UniqueName(t, "beta")
	otherQueue := amqptest.DeclareTopicQueue(t, other, "#")
	forgedQueue := amqptest.DeclareTopicQueue(t, d.cfg.DispatchExchange, "forged.#")

	job := uuid.NewString()
	nominal := time.Now().Truncate(time.Second)
	send := func(i int, exchange, key string) *dispatchv1.DispatchRequest {
		at := nominal.Add(time.Duration(i) * time.Second)
		req := &dispatchv1.DispatchRequest{
			ExecutionId: execid.For(job, at), JobId: job, Namespace: "alpha", Attempt: 1,
			NominalTime: timestamppb.New(at), FireTime: timestamppb.New(at),
			Target: &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{
				Exchange: exchange, RoutingKey: key, Body: "{}", SecretHeaders: map[string]string{"x-token": "tok"},
			}}},
			RetryPolicy: &registryv1.RetryPolicy{MaxRetries: proto.Int32(0)},
			Priority:    registryv1.Priority_PRIORITY_LOW,
		}
		d.publish(t, req)
		return req
	}
	delivered := send(0, own, "reports.nightly")
	intoDispatch := send(1, d.cfg.DispatchExchange, "forged.high")
	intoOther := send(2, other, "reports.nightly")

	got := amqptest.Consume(t, ownQueue, 1, 30*time.Second)[0]
	require.Equal(t, delivered.ExecutionId, got.MessageId, "the namespace's own exchange is published to")
	require.Equal(t, "tok", got.Headers["x-token"])

	alpha := d.client(keyAlpha)
	require.Eventually(t, func() bool { return len(listAll(t, alpha, job)) == 2 }, 30*time.Second, 20*time.Millisecond)
	reasons := map[string]string{}
	for _, dl := range listAll(t, alpha, job) {
		reasons[dl.ExecutionId] = dl.Reason
	}
	require.Contains(t, reasons[intoDispatch.ExecutionId], fmt.Sprintf("exchange %q is reserved for cronmesh", d.cfg.DispatchExchange))
	require.Contains(t, reasons[intoOther.ExecutionId], fmt.Sprintf("exchange %q is not the namespace's", other))
	ch := amqptest.Channel(t)
	for _, q := range []string{forgedQueue, otherQueue} {
		state, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		require.NoError(t, err)
		require.Zero(t, state.Messages, "nothing was published to %s", q)
	}
}
