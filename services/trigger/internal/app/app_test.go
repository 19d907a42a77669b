package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/promhist"
	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/apptest"
	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/trigger/internal/app"
)

const key = "trigger-key-0123456789abcdef"

type node struct {
	cfg     app.Config
	baseURL string
}

func startNode(t *testing.T, mods ...func(*app.Config)) *node {
	t.Helper()
	_, schema := pgtest.New(t)
	etcd := etcdtest.New(t)
	cfg := app.Config{
		Common: config.Common{
			Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL(),
			EtcdEndpoints: etcd.Endpoints(), LogLevel: "warn", ShutdownTimeout: 5 * time.Second,
		},
		APIKeys:            config.StringList{"alpha=" + key},
		NodeID:             "node-a",
		Schema:             schema,
		EtcdPrefix:         "/" + amqptest.UniqueName(t, "ring") + "/",
		Partitions:         8,
		LeaseTTL:           2 * time.Second,
		JobsExchange:       amqptest.UniqueName(t, "cronmesh.jobs"),
		JobsQueue:          amqptest.UniqueName(t, "cronmesh.jobsq"),
		DispatchExchange:   amqptest.UniqueName(t, "cronmesh.dispatch"),
		DispatchQueue:      amqptest.UniqueName(t, "cronmesh.dispatchq"),
		ExecutionsExchange: amqptest.UniqueName(t, "cronmesh.executions"),
		OutboxLanes:        4,
		Lookahead:          5 * time.Second,
	}
	for _, m := range mods {
		m(&cfg)
	}
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		for _, b := range broker.DispatchQueues(cfg.DispatchExchange, cfg.DispatchQueue) {
			_, _ = ch.QueueDelete(b.Queue, false, false, false)
		}
		_, _ = ch.QueueDelete(cfg.JobsQueue, false, false, false)
		for _, x := range []string{cfg.JobsExchange, cfg.DispatchExchange, cfg.ExecutionsExchange} {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, baseURL := apptest.Start(t, "trigger", func(ctx context.Context) (*app.App, error) { return app.New(ctx, cfg, logger) })
	n := &node{cfg: cfg, baseURL: baseURL}
	apptest.WaitReady(t, n.baseURL, "the node never held its partitions")
	return n
}

func (n *node) client(k string, opts ...connect.ClientOption) triggerv1connect.TriggerServiceClient {
	opts = append(opts, rpctest.Bearer(k))
	return triggerv1connect.NewTriggerServiceClient(rpctest.H2CClient(), n.baseURL, opts...)
}

// createJob publishes a CREATED event, as the registry would.
func (n *node) createJob(t *testing.T, namespace, cron string, created time.Time) string {
	t.Helper()
	id := uuid.Must(uuid.NewV7()).String()
	ev := &eventsv1.JobEvent{
		EventId: uuid.NewString(), Kind: eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, Version: 1, OccurTime: timestamppb.New(created),
		Job: &registryv1.Job{
			Id: id, Namespace: namespace, DisplayName: "job", Version: 1,
			Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: cron}, TimeZone: "UTC"},
			Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
				Method: "POST", Url: "https://example.test/hook", Timeout: durationpb.New(time.Second),
			}}},
			CatchUpWindow: durationpb.New(time.Hour), CreateTime: timestamppb.New(created), UpdateTime: timestamppb.New(created),
		},
	}
	body, err := proto.Marshal(ev)
	require.NoError(t, err)
	ch := amqptest.Channel(t)
	require.NoError(t, ch.PublishWithContext(context.Background(), n.cfg.JobsExchange, "job.created", false, false,
		amqp091.Publishing{MessageId: ev.EventId, Body: body}))
	return id
}

func TestTriggerService(t *testing.T) {
	t.Parallel()
	n := startNode(t, func(c *app.Config) { c.MaxBackfills = quota.Limits{Default: 1} })
	ctx := context.Background()
	id := n.createJob(t, "alpha", "* * * * * *", time.Now())

	for _, p := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}} {
		t.Run(p.name, func(t *testing.T) {
			client := n.client(key, p.opts...)
			ring, err := client.GetRing(ctx, connect.NewRequest(&triggerv1.GetRingRequest{}))
			require.NoError(t, err)
			require.EqualValues(t, 8, ring.Msg.PartitionCount)
			require.Len(t, ring.Msg.Members, 1)
			require.Equal(t, "node-a", ring.Msg.Members[0].NodeId)
			require.EqualValues(t, 8, ring.Msg.Members[0].OwnedPartitions)
			for _, part := range ring.Msg.Partitions {
				require.Equal(t, "node-a", part.Owner)
				require.Positive(t, part.Epoch)
			}

			var slots []*triggerv1.Slot
			require.Eventually(t, func() bool {
				resp, err := client.ListSlots(ctx, connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: id, PageSize: 2}))
				if err != nil {
					return false // not projected yet
				}
				slots = resp.Msg.Slots
				return len(slots) == 2 && resp.Msg.NextPageToken != ""
			}, 15*time.Second, 100*time.Millisecond, "the every-second job never fired twice")
			require.True(t, slots[0].NominalTime.AsTime().After(slots[1].NominalTime.AsTime()), "newest first")
			require.Equal(t, triggerv1.SlotState_SLOT_STATE_FIRED, slots[0].State)
			require.Positive(t, slots[0].Epoch)
		})
	}

	// The fired slots' confirms are timed from their firing time.
	require.Eventually(t, func() bool {
		h, err := promhist.Scrape(ctx, []string{n.baseURL}, "outbox_due_to_confirm_seconds")
		_, confirmed := promhist.QuantileBound(promhist.Histogram{}, h, .5)
		return err == nil && confirmed > 0
	}, 10*time.Second, 100*time.Millisecond, "no fired slot's confirm in outbox_due_to_confirm_seconds")

	client := n.client(key)
	// Backfill the minute before the job existed: every second fires once,
	// and a second call finds them all in the ledger.
	end := time.Now().Add(-2 * time.Minute).Truncate(time.Second)
	start := end.Add(-9 * time.Second)
	req := &triggerv1.BackfillJobRequest{JobId: id, StartTime: timestamppb.New(start), EndTime: timestamppb.New(end), Rate: 1000}
	first, err := client.BackfillJob(ctx, connect.NewRequest(req))
	require.NoError(t, err)
	require.EqualValues(t, 10, first.Msg.Fired)
	again, err := client.BackfillJob(ctx, connect.NewRequest(req))
	require.NoError(t, err)
	require.EqualValues(t, 0, again.Msg.Fired)
	require.EqualValues(t, 10, again.Msg.Skipped)

	// While another backfill of the namespace runs (here on a node that
	// died a moment ago), a backfill goes beyond the quota of one.
	pool, err := postgres.Connect(ctx, postgres.Options{URL: pgtest.URL(), Schema: n.cfg.Schema})
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO backfills (id, namespace, job_id, node_id, start_time, expire_time)
		VALUES (gen_random_uuid(), 'alpha', gen_random_uuid(), 'node-z', now(), now() + interval '1 minute')`)
	require.NoError(t, err)
	_, err = client.BackfillJob(ctx, connect.NewRequest(req))
	rpctest.RequireCode(t, err, connect.CodeResourceExhausted)
	var cerr *connect.Error
	require.ErrorAs(t, err, &cerr)
	require.Len(t, cerr.Details(), 1)
	detail, err := cerr.Details()[0].Value()
	require.NoError(t, err)
	require.Equal(t, "namespace:alpha", detail.(*errdetails.QuotaFailure).Violations[0].Subject)
	resp, err := http.Get(n.baseURL + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(metrics), `quota_refusals_total{namespace="alpha",quota="concurrent_backfills"} 1`)

	_, err = client.ListSlots(ctx, connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: id, PageToken: "%%%"}))
	rpctest.RequireCode(t, err, connect.CodeInvalidArgument)
	_, err = client.BackfillJob(ctx, connect.NewRequest(&triggerv1.BackfillJobRequest{JobId: id, StartTime: timestamppb.New(end), EndTime: timestamppb.New(start)}))
	rpctest.RequireCode(t, err, connect.CodeInvalidArgument)
	_, err = client.ListSlots(ctx, connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: uuid.NewString()}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	_, err = n.client("").GetRing(ctx, connect.NewRequest(&triggerv1.GetRingRequest{}))
	rpctest.RequireCode(t, err, connect.CodeUnauthenticated)
}
