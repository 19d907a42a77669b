package e2e_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/ledger"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
)

// bins are the mesh's binaries (libs/testkit/meshtest), built once for every test
// of the package: the tests run the real trigger, so a SIGKILL kills a real
// process with its etcd session and connections.
var bins = &meshtest.Binaries{}

func TestMain(m *testing.M) { bins.Main(m) }

const apiKey = "e2e-key-0123456789abcdef"

// leaseTTL is the nodes' etcd lease: a node stopped for longer loses its
// partitions.
const leaseTTL = 2 * time.Second

// cluster is a mesh of trigger nodes only, sharing one etcd, one schema and
// one set of broker names, with a consumer recording every dispatch request
// in the ledger (libs/testkit/ledger) in place of a dispatcher.
type cluster struct {
	t        *testing.T
	mesh     *meshrun.Mesh
	db       *pgxpool.Pool // the trigger's schema
	received *ledger.Ledger
}

// newCluster starts nodes trigger nodes (trigger-1, trigger-2, ...) that
// reach RabbitMQ at amqpURL ("" for the test server) and waits until they
// hold their partitions.
func newCluster(t *testing.T, amqpURL string, nodes int) *cluster {
	t.Helper()
	mesh := meshtest.Start(t, bins, meshtest.Options{
		APIKeys: map[string]string{"e2e": apiKey}, Only: []string{"trigger"}, AMQPURL: amqpURL,
		TriggerNodes: nodes, Partitions: 64, LeaseTTL: leaseTTL,
	})
	return &cluster{t: t, mesh: mesh, db: meshtest.Pool(t, mesh, "trigger"), received: ledger.New()}
}

// node is the i-th trigger node (1-based, as they are named).
func (c *cluster) node(i int) *meshrun.Process { return c.mesh.Triggers[i-1] }

// addNode starts one more node and waits until it holds its partitions.
func (c *cluster) addNode() {
	c.t.Helper()
	_, err := c.mesh.AddTrigger(c.t.Context(), fmt.Sprintf("trigger-%d", len(c.mesh.Triggers)+1))
	require.NoError(c.t, err)
}

// createJobs publishes CREATED job events, as the registry would, for
// count jobs that fire every second, and returns their ids.
func (c *cluster) createJobs(count int) []string {
	c.t.Helper()
	return c.createJobsWith(count, nil)
}

// createJobsWith is createJobs with each job changed by mod (nil: none)
// before its event is published.
func (c *cluster) createJobsWith(count int, mod func(*registryv1.Job)) []string {
	c.t.Helper()
	ch := amqptest.Channel(c.t)
	require.NoError(c.t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, count))
	ids := make([]string, count)
	now := time.Now()
	for i := range count {
		id := uuid.Must(uuid.NewV7()).String()
		ids[i] = id
		maxRetries := int32(5)
		ev := &eventsv1.JobEvent{
			EventId: uuid.NewString(),
			Kind:    eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED,
			Version: 1,
			Job: &registryv1.Job{
				Id: id, Namespace: "e2e", DisplayName: "every second " + strconv.Itoa(i), Version: 1,
				Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * * * * *"}, TimeZone: "UTC"},
				Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
					Method: "POST", Url: "http://127.0.0.1:9/hook", Timeout: durationpb.New(5 * time.Second),
					SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
				}}},
				RetryPolicy:   &registryv1.RetryPolicy{MaxRetries: &maxRetries},
				CatchUpWindow: durationpb.New(time.Hour),
				Priority:      registryv1.Priority_PRIORITY_NORMAL,
				CreateTime:    timestamppb.New(now),
				UpdateTime:    timestamppb.New(now),
			},
			OccurTime: timestamppb.New(now),
		}
		if mod != nil {
			mod(ev.Job)
		}
		body, err := proto.Marshal(ev)
		require.NoError(c.t, err)
		require.NoError(c.t, ch.PublishWithContext(context.Background(), c.mesh.Names.Jobs, "job.created", false, false,
			amqp091.Publishing{MessageId: ev.EventId, Body: body, DeliveryMode: amqp091.Persistent}))
	}
	for range count {
		select {
		case conf := <-confirms:
			require.True(c.t, conf.Ack)
		case <-time.After(30 * time.Second):
			c.t.Fatal("job events not confirmed")
		}
	}
	return ids
}

// consume records every dispatch request until ctx is done.
func (c *cluster) consume(ctx context.Context) *sync.WaitGroup {
	ch := amqptest.Channel(c.t)
	require.NoError(c.t, ch.Qos(1000, 0, false))
	// The jobs are of normal priority; reading every priority's queue would
	// also catch a misrouted one.
	var wg sync.WaitGroup
	for _, b := range broker.DispatchQueues(c.mesh.Names.Dispatch, c.mesh.Names.DispatchQueue) {
		deliveries, err := ch.Consume(b.Queue, "", true, false, false, false, nil)
		require.NoError(c.t, err)
		wg.Go(func() { c.record(ctx, deliveries) })
	}
	return &wg
}

// record decodes and records deliveries until ctx is done.
func (c *cluster) record(ctx context.Context, deliveries <-chan amqp091.Delivery) {
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			msgs, err := broker.DeliveryMessages(d)
			if err != nil {
				c.received.Bad(fmt.Sprintf("undecodable dispatch message %q: %v", d.MessageId, err))
				continue
			}
			at := time.Now()
			for _, m := range msgs {
				req := &dispatchv1.DispatchRequest{}
				if err := proto.Unmarshal(m.Payload, req); err != nil {
					c.received.Bad(fmt.Sprintf("undecodable dispatch request %q: %v", m.UUID, err))
					continue
				}
				c.received.Enqueued(req, m.Metadata.Get(outbox.RowIDHeader), at)
			}
		}
	}
}
